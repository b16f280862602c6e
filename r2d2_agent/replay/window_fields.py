"""`WindowFields`: the fields of a training window that depend only on where it lies.

A window of an episode is cut at its start `q`; its bootstrap offsets and discounts, its
`bootstrap_discount`, `bootstrap_index` and `mask` fields depend only on the number of
steps it covers (`size`) and on whether it ends in a termination, and its `obs_mask` and
`burnin_mask` fields only on the range of real observations. Both adders
(`SequenceAdder`, `VectorSequenceAdder`) compute each once and keep it (read only).
"""

from __future__ import annotations

import numpy as np

from r2d2_agent.replay.layout import SequenceLayout

__all__ = ["Bootstrap", "WindowFields", "check_rates"]

Bootstrap = tuple[list[int], list[float], np.ndarray, np.ndarray, np.ndarray]
"""`(k, disc, bootstrap_discount, bootstrap_index, mask)` of a segment
(`WindowFields.bootstrap`)."""


def check_rates(gamma: float, priority_eta: float) -> None:
    """An adder's discount and priority mixing, each in [0, 1].

    Raises:
        ValueError: Naming the first one outside [0, 1].
    """
    for name, value in (("gamma", gamma), ("priority_eta", priority_eta)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value!r}")


class WindowFields:
    """Cached position-only fields of the windows of one layout and discount.

    Args:
        layout: The sequence layout.
        gamma: The discount of the n-step returns.

    Attributes:
        gamma_powers: `gamma**i` for `i < multisteps`, as `n_step_returns` computes them.
    """

    def __init__(self, layout: SequenceLayout, gamma: float) -> None:
        self.layout = layout
        self.gamma = float(gamma)
        self.gamma_powers = [self.gamma**i for i in range(layout.multisteps)]
        self._spec = layout.field_spec()
        self._bootstrap: dict[tuple[int, bool], Bootstrap] = {}
        self._masks: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def bootstrap(self, size: int, terminal: bool) -> Bootstrap:
        """`n_step_returns`' bootstrap offsets `k` and discounts `disc` (as lists) of a
        segment of `size` steps (`terminal`: it ends in a termination), and the window's
        `bootstrap_discount`, `bootstrap_index` and `mask` fields (read only)."""
        cached = self._bootstrap.get((size, terminal))
        if cached is None:
            layout = self.layout
            length, n = layout.input_length, layout.multisteps
            offsets = np.arange(size, dtype=np.int64)
            k = np.minimum(n, size - offsets)
            disc = np.power(self.gamma, k).astype(np.float64)
            if terminal:
                disc[offsets + k == size] = 0.0
            real = min(length, size)
            boot = np.arange(length, dtype=np.int64)
            boot[:real] += k[:real]
            spec = self._spec
            discounts = np.zeros(*spec["bootstrap_discount"])
            discounts[:real] = disc[:real]
            bootstrap_index = np.zeros(*spec["bootstrap_index"])
            bootstrap_index[:] = boot
            mask = np.zeros(*spec["mask"])
            mask[:real] = 1.0
            cached = (k.tolist(), disc.tolist(), discounts, bootstrap_index, mask)
            self._bootstrap[size, terminal] = cached
        return cached

    def masks(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The `obs_mask` (1 on observations `lo .. hi-1`) and `burnin_mask` (1 from `lo`
        on) fields (read only)."""
        cached = self._masks.get((lo, hi))
        if cached is None:
            obs_mask = np.zeros(*self._spec["obs_mask"])
            obs_mask[lo:hi] = 1.0
            burnin_mask = np.zeros(*self._spec["burnin_mask"])
            burnin_mask[lo:] = 1.0
            cached = self._masks[lo, hi] = (obs_mask, burnin_mask)
        return cached
