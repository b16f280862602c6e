"""`BatchExtent`: how much of a sampled batch's windows holds real steps.

A window of `burnin + input_length + multisteps` observations is zero padded before an
episode's start and after its end. On tasks whose episodes are shorter than the window
(a cue named 20 steps later, trained in 64-step windows), most of every sequence is
padding, and the learner's update would unroll its networks over it for nothing: the
networks are causal, the padded steps after the end are masked out of the loss and the
priorities, and the padded burn-in steps before the start leave the stored state as it is.

So the learner cuts each batch to its extent before the update: the burn-in is dropped
when no sequence of the batch has a real burn-in step, and the trained steps end at the
batch's last real one, rounded up to a multiple of `length_step` (a few lengths, each
traced once). The update on the cut batch computes what the update on the whole one
does, on fewer steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2d2_agent.replay.layout import SequenceLayout

__all__ = ["BatchExtent", "batch_extent", "length_step", "trim_batch"]

_TRAINED_FIELDS = ("actions", "returns", "bootstrap_discount", "bootstrap_index", "mask")
"""Fields with one entry per trained step (`input_length`)."""
_OBSERVATION_FIELDS = ("obs_mask", "prev_actions", "prev_rewards")
"""Fields with one entry per observation (`sequence_length`)."""


@dataclass(frozen=True)
class BatchExtent:
    """The part of a batch's windows an update unrolls.

    Attributes:
        burnin: Burn-in steps kept: the layout's `burnin`, or 0 when no sequence of the
            batch has a real burn-in observation.
        input_length: Trained steps kept, from the first: at least the batch's last real
            trained step, at most the layout's `input_length`.
    """

    burnin: int
    input_length: int


def length_step(input_length: int) -> int:
    """The multiple of env steps a cut batch's trained length is rounded up to: a quarter
    of the window, at least 8 (so a learner traces its update for at most four lengths,
    each with and without the burn-in)."""
    return max(8, int(input_length) // 4)


def batch_extent(layout: SequenceLayout, mask: np.ndarray, burnin_mask: np.ndarray) -> BatchExtent:
    """The extent of a batch from its `mask` `(B, L)` and `burnin_mask` `(B, b)` fields.

    Args:
        layout: The batch's sequence layout.
        mask: 1 for each sequence's real trained steps.
        burnin_mask: 1 for each sequence's real burn-in observations.

    Returns:
        The burn-in kept (all of it if any sequence has a real burn-in observation) and the
        trained steps kept (the last real one's index plus one, rounded up to a multiple of
        `length_step`, at most `input_length`; one `length_step` if no step is real).
    """
    real = np.flatnonzero(np.asarray(mask).any(axis=0))
    last = int(real[-1]) + 1 if real.size else 1
    step = length_step(layout.input_length)
    length = min(layout.input_length, -(-last // step) * step)
    burnin = layout.burnin if np.asarray(burnin_mask).any() else 0
    return BatchExtent(burnin=burnin, input_length=length)


def trim_batch(
    layout: SequenceLayout, batch: dict[str, np.ndarray], extent: BatchExtent
) -> dict[str, np.ndarray]:
    """The batch cut to `extent` (views of its arrays; the batch itself if nothing is cut).

    The kept observations are the last `extent.burnin` burn-in ones, then
    `extent.input_length + multisteps`; `frames` keep the `input_sequence - 1` frames
    more that their stacks need. `bootstrap_index` counts from the first observation after
    the burn-in, so it holds as it is.

    Args:
        layout: The batch's sequence layout.
        batch: A batch as `SequenceReplay.sample` returns it (`frames` instead of
            `frame_ids`), each array with a leading batch dimension.
        extent: What to keep (`batch_extent`).

    Raises:
        ValueError: On an extent outside the layout, or a field the layout does not have.
    """
    burnin, length = extent.burnin, extent.input_length
    if not (0 <= burnin <= layout.burnin and 1 <= length <= layout.input_length):
        raise ValueError(
            f"extent {extent} lies outside the layout's burnin={layout.burnin}, "
            f"input_length={layout.input_length}"
        )
    if burnin == layout.burnin and length == layout.input_length:
        return batch
    start = layout.burnin - burnin
    stop = layout.burnin + length + layout.multisteps
    cut = {}
    for name, array in batch.items():
        if name in _TRAINED_FIELDS:
            cut[name] = array[:, :length]
        elif name in _OBSERVATION_FIELDS:
            cut[name] = array[:, start:stop]
        elif name == "frames":
            cut[name] = array[:, start : stop + layout.input_sequence - 1]
        elif name == "burnin_mask":
            cut[name] = array[:, start:]
        elif name == "state":
            cut[name] = array
        else:
            raise ValueError(f"trim_batch does not know the batch field {name!r}")
    return cut
