"""`SequenceAdder`: cuts episodes into R2D2 training sequences with initial priorities.

Trained windows of `L = input_length` steps start at episode steps `q = 0, period,
2 period, ...`; each covers observations `s_{q-b} ... s_{q+L+n-1}` (`b = burnin`,
`n = multisteps`), zero padded before `s_0` and after the final observation `s_E`. The
fields of an emitted sequence are those of `SequenceLayout.field_spec`; the recurrent
state stored is the one passed with step `max(q-b, 0)`, i.e. the state before processing
the first real observation.

The adder is given single frames, not stacked observations. Every frame gets an id (one
counter per adder, so ids are unique for the adder's life), and each emitted
`SequenceRecord` carries the frames no earlier record carried: every frame leaves the
adder once, however many windows and stacks use it. A sequence names its frames by id
(`frame_ids`), the observation at position `p` being the stack of frames `p .. p+S-1`.

Rewards leave the adder once too, as moments: each record carries the count and the sum
of squares of the rewards added since the previous record (`reward_count`,
`reward_sum_square`), which the learner merges into the network's reward statistics
(`normalize_rewards`). Overlapping windows do not count a reward twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

import numpy as np

from r2d2_agent.math import (
    inverse_rescale_float,
    merge_reward_moments,
    rescale_float,
    reward_scale,
)
from r2d2_agent.replay.layout import SequenceLayout
from r2d2_agent.replay.window_fields import WindowFields, check_rates

__all__ = ["FRAME_ID_MODULUS", "SequenceAdder", "SequenceRecord", "Sink"]

FRAME_ID_MODULUS = 2**31
"""Frame ids travel modulo this (as int32); a receiver maps them modulo a power of two."""


@dataclass(frozen=True)
class SequenceRecord:
    """One finished sequence, as the adder hands it on.

    Attributes:
        fields: The fixed-shape fields of `SequenceLayout.field_spec`; `frame_ids` are the
            adder's frame ids modulo `FRAME_ID_MODULUS` (-1 for zero frames).
        priority: The initial priority, from the Q-values computed while acting.
        frames: `(F, *frame_shape)`: the frames this record introduces, in id order (the
            frames of earlier records are not repeated).
        first_frame: The id of `frames[0]` modulo `FRAME_ID_MODULUS` (the next id when
            `frames` is empty).
        reward_count: How many rewards the adder took since its previous record (each
            reward is counted by one record only).
        reward_sum_square: The sum of those rewards' squares.
    """

    fields: dict[str, np.ndarray]
    priority: float
    frames: np.ndarray
    first_frame: int
    reward_count: int = 0
    reward_sum_square: float = 0.0


Sink = Callable[[SequenceRecord], None]
"""Receives each finished sequence."""


class _Step:
    """Data attached to observation `s_j`; the transition fields fill in later.

    `q` is `Q(s_j, .)`; `q_list` is the same as Python floats and `boot` the value a
    target bootstrapping on `s_j` takes (`max Q(s_j, .)`, out of the rescaled space with
    `rescaling`), both set with `q` (`SequenceAdder._set_q`), so that the windows sharing
    the step do not compute them again.
    """

    __slots__ = ("action", "boot", "frame", "q", "q_list", "reward", "state")

    def __init__(self, frame: np.ndarray) -> None:
        self.frame = frame
        self.state: np.ndarray | None = None
        self.q: np.ndarray | None = None
        self.q_list: list[float] = []
        self.boot = 0.0
        self.action = 0
        self.reward = 0.0


_max = np.maximum.reduce  # ndarray.max and .sum without their Python wrappers
_sum = np.add.reduce


def _argmax(row: list[float]) -> int:
    """`np.argmax` of a list: the first maximum, or the first NaN if there is one."""
    best, top = 0, row[0]
    if top != top:
        return 0
    for i in range(1, len(row)):
        value = row[i]
        if value > top:
            best, top = i, value
        elif value != value:
            return i
    return best


class SequenceAdder:
    """Acme-style adder: `add_first`, then `add` per step; emits `SequenceRecord`s to `sink`.

    A sequence is emitted once its look-ahead is complete, i.e. once `s_{q+L+n-1}` and
    `Q(s_{q+L+n-1})` (the latter for the initial priority) are known: normally on the
    `add` call acting on `s_{q+L+n-1}`, one call earlier if `next_q_values` is passed; at
    the episode's end all remaining windows with at least one real step are emitted,
    padded. Only about `b + L + n + 1` steps are buffered.

    The initial priority uses the recorded acting Q-values as both online and target
    network: `delta_t = n_step_targets(G_t, D_t, Q(s_{t+K}), Q(s_{t+K})) - Q(s_t, a_t)` and
    `priority = sequence_priorities(delta, mask, eta)`. With `normalize_rewards`, `G_t`
    is divided by the reward scale of every reward this adder has seen
    (`r2d2_agent.math.reward_scale`), as the learner divides it by the run's.

    Args:
        sink: Called with each finished `SequenceRecord`.
        layout: The sequence layout (frame shape and dtype, stacking, burn-in, length, n,
            period, state size).
        gamma: Discount in `[0, 1]`.
        priority_eta: Max/mean mixing of the priority, in `[0, 1]`.
        rescaling: Whether Q-values are in the rescaled (`h`) space.
        double_q: Double-Q bootstrap for the initial priority.
        normalize_rewards: Divide the returns of the initial priority by the reward scale.

    Raises:
        ValueError: If `sink` is not callable or `gamma`/`priority_eta` is outside [0, 1].
    """

    def __init__(
        self,
        sink: Sink,
        layout: SequenceLayout,
        *,
        gamma: float,
        priority_eta: float,
        rescaling: bool,
        double_q: bool = True,
        normalize_rewards: bool = False,
    ) -> None:
        if not callable(sink):
            raise ValueError(f"sink must be callable, got {sink!r}")
        check_rates(gamma, priority_eta)
        self.layout = layout
        self._spec = layout.field_spec()
        self._sink = sink
        self._gamma = float(gamma)
        self._eta = float(priority_eta)
        self._rescaling = bool(rescaling)
        self._double_q = bool(double_q)
        self._normalize = bool(normalize_rewards)
        self._new_rewards = [0, 0.0]  # count, sum of squares since the last record
        self._reward_moments = (0.0, 0.0)  # count, mean square of every reward seen
        self._steps: deque[_Step] = deque()
        self._base = 0  # episode index of self._steps[0]
        self._next_start = 0  # start q of the next window to emit
        self._nb_actions: int | None = None
        self._active = False
        self._next_id = 0  # id of the next frame given to the adder
        self._episode_first_id = 0  # id of this episode's s_0
        self._sent_upto = -1  # highest frame id already carried by a record
        # _emit's constants: an index range, the frame ids of no frame, zeros to pad
        # with, gamma**i as n_step_returns computes it, the fields cached by position
        self._arange = np.arange(layout.frames_per_sequence, dtype=np.int64)
        ids_shape, ids_dtype = self._spec["frame_ids"]
        self._no_frames = np.full(ids_shape, -1, ids_dtype)
        self._zeros = [0] * layout.input_length
        self._windows = WindowFields(layout, self._gamma)

    @property
    def buffer_length(self) -> int:
        """Number of per-step records currently buffered (diagnostic)."""
        return len(self._steps)

    @property
    def reward_scale(self) -> float:
        """The reward scale of every reward this adder has sent (`reward_scale`)."""
        return reward_scale(*self._reward_moments)

    def reset(self) -> None:
        """Drops the current episode without emitting anything (frame ids go on; the
        moments of its rewards go with the next record)."""
        self._steps.clear()
        self._base = 0
        self._next_start = 0
        self._active = False
        self._sent_upto = self._next_id - 1

    def add_first(self, frame: np.ndarray) -> None:
        """Starts an episode at its first frame `s_0`.

        Raises:
            RuntimeError: If an episode is in progress (call `reset` first).
            ValueError: If the frame has the wrong shape.
        """
        if self._active:
            raise RuntimeError("add_first called mid-episode; call reset() to drop it")
        self.reset()
        self._episode_first_id = self._next_id
        self._steps.append(self._new_step(frame))
        self._active = True

    def add(
        self,
        action: int,
        reward: float,
        next_frame: np.ndarray,
        terminated: bool,
        truncated: bool,
        state: np.ndarray | None,
        q_values: np.ndarray,
        next_q_values: np.ndarray | None = None,
    ) -> None:
        """Records the transition `(s_t, a_t, r_t, s_{t+1})`.

        Args:
            action: `a_t`, chosen on `s_t`.
            reward: `r_t`.
            next_frame: The frame of `s_{t+1}` (the final one if the episode ends).
            terminated: The episode terminated at `s_{t+1}` (wins over truncated).
            truncated: The episode was cut off at `s_{t+1}`.
            state: `(2, state_size)` recurrent state before processing `s_t`
                (`None` allowed when `state_size == 0`).
            q_values: `Q(s_t, .)` computed when acting, shape `(nb_actions,)`.
            next_q_values: `Q(s_{t+1}, .)` if known. Needed for an exact initial
                priority at the last step of a truncated episode; if omitted
                there, `q_values` stands in for it (irrelevant on termination,
                where the bootstrap discount is 0).

        Raises:
            RuntimeError: If no episode is in progress (`add_first` first).
            ValueError: On shapes that do not match the configuration.
        """
        if not self._active:
            raise RuntimeError("add called without an episode in progress; call add_first")
        q = self._check_q("q_values", q_values)
        if isinstance(action, bool) or int(action) != action or not 0 <= action < q.shape[0]:
            raise ValueError(f"action must be an integer in [0, {q.shape[0]}), got {action!r}")
        if state is None and self.layout.state_size == 0:
            state = np.zeros((2, 0), np.float32)
        st = np.array(state, dtype=np.float32)
        if st.shape != (2, self.layout.state_size):
            raise ValueError(f"state must have shape (2, {self.layout.state_size}), got {st.shape}")
        nxt = self._new_step(next_frame)
        ended = bool(terminated) or bool(truncated)
        next_q = None if next_q_values is None else self._check_q("next_q_values", next_q_values)
        step = self._steps[-1]
        self._set_q(step, q)
        if next_q is not None:
            self._set_q(nxt, next_q)
        elif ended:  # Q(s_t) stands in for Q(s_E); see the docstring
            nxt.q, nxt.q_list, nxt.boot = step.q, step.q_list, step.boot
        step.action = int(action)
        step.reward = float(reward)
        self._new_rewards[0] += 1
        self._new_rewards[1] += step.reward * step.reward
        step.state = st
        self._steps.append(nxt)
        if ended:
            end = self._base + len(self._steps) - 1  # E, index of s_E.
            for start in self.layout.end_window_starts(self._next_start, end):
                self._emit(start, end, bool(terminated))
            self.reset()
            return
        while True:
            look = self._next_start + self.layout.input_length + self.layout.multisteps - 1
            look -= self._base
            if look >= len(self._steps) or self._steps[look].q is None:
                break
            self._emit(self._next_start, None, False)
            self._next_start += self.layout.period
            # keep the steps of the next window's burn-in (and the one before it, whose
            # action and reward its first observation may carry)
            keep_from = self._next_start - self.layout.burnin - self.layout.prev_action_reward
            while self._base < keep_from:
                self._steps.popleft()
                self._base += 1

    def _new_step(self, frame: np.ndarray) -> _Step:
        """A step holding a copy of `frame` in the storage dtype; the frame gets an id."""
        copy = np.array(frame, dtype=self.layout.frame_dtype)
        if copy.shape != self.layout.frame_shape:
            raise ValueError(f"frame must have shape {self.layout.frame_shape}, got {copy.shape}")
        self._next_id += 1
        return _Step(copy)

    def _set_q(self, step: _Step, q: np.ndarray) -> None:
        """Gives `step` its Q-values `q` (float64), as an array and as floats, and the
        value a bootstrap on it takes."""
        q_list = q.tolist()
        boot = q_list[_argmax(q_list)]
        step.q, step.q_list = q, q_list
        step.boot = inverse_rescale_float(boot) if self._rescaling else boot

    def _check_q(self, name: str, q_values: np.ndarray) -> np.ndarray:
        """Copies q values to float64, checking `(nb_actions,)` consistency."""
        q = np.array(q_values, dtype=np.float64)
        if q.ndim != 1 or q.shape[0] < 1 or q.shape[0] != (self._nb_actions or q.shape[0]):
            raise ValueError(
                f"{name} must have shape ({self._nb_actions or 'nb_actions'},), got {q.shape}"
            )
        self._nb_actions = q.shape[0]
        return q

    def _emit(self, start: int, end: int | None, terminated: bool) -> None:
        """Builds the window starting at step `start` and hands it to the sink.

        `end` is `E` (index of the final observation) once the episode is
        over, else `None` (then the look-ahead is complete).

        The arithmetic is that of `n_step_returns`, `n_step_targets`, `td_errors` and
        `sequence_priorities`, the same float64 operations in the same order (so the same
        bits, NaN and infinities included), but on Python floats one step at a time, with
        each step's Q-values as floats and bootstrap value computed once (`_set_q`), and
        the fields that depend only on where the window lies in the episode (masks,
        bootstrap indices and discounts) copied from cached arrays: this runs once per
        `period` env steps of every env, where a few dozen numpy calls on arrays of
        `input_length` elements cost more than the env step.
        """
        layout = self.layout
        b, length, n = layout.burnin, layout.input_length, layout.multisteps
        steps, base = self._steps, self._base
        last = base + len(steps) - 1  # index of the newest observation
        seg_end = start + length + n - 1 if end is None else min(start + length + n - 1, end)
        size = seg_end - start
        real = min(length, size)
        k, disc, discounts, bootstrap_index, mask = self._windows.bootstrap(
            size, end is not None and seg_end == end and terminated
        )
        window = list(islice(steps, start - base, seg_end - base + 1))  # s_start .. s_seg_end
        # n_step_returns: g_t = sum_{i < k_t} gamma^i r_{t+i}, added up oldest first
        rewards = [step.reward for step in window]
        powers = self._windows.gamma_powers
        returns = []
        for t in range(real):
            acc = 0.0
            for i in range(k[t]):
                acc += powers[i] * rewards[t + i]
            returns.append(acc)
        actions = [step.action for step in window[:real]]
        new_count, new_sum_square = self._take_new_rewards()
        g = returns
        if self._normalize:
            scale = self.reward_scale
            g = [x / scale for x in g]
        # Initial priority from the acting Q-values (online == target, so the double-Q
        # bootstrap and the max are one value), as n_step_targets, td_errors and
        # sequence_priorities compute it, one step at a time in Python floats.
        rescaling = self._rescaling
        td = []
        for t in range(real):
            discount = disc[t]
            y = g[t] + (discount * window[t + k[t]].boot if discount != 0.0 else 0.0)
            if rescaling:
                y = rescale_float(y)
            td.append(abs(y - window[t].q_list[actions[t]]))
        d = np.array(td)
        priority = self._eta * _max(d) + (1.0 - self._eta) * (_sum(d) / real)

        # the fields, in `field_spec` order
        seq: dict[str, np.ndarray] = {}
        if layout.prev_action_reward:
            obs_steps = range(start - b, start - b + layout.sequence_length)
            seq["prev_actions"] = np.array(
                [steps[j - 1 - base].action if 1 <= j <= last else -1 for j in obs_steps],
                np.int32,
            )
            seq["prev_rewards"] = np.array(
                [steps[j - 1 - base].reward if 1 <= j <= last else 0.0 for j in obs_steps],
                np.float32,
            )
        # Frames: observation p (episode step j = start - b + p) stacks the frames of steps
        # j - S + 1 .. j; frame list entry i is the frame of step start - b - S + 1 + i.
        # The visible entries (0 <= step <= last) are one contiguous run.
        first_step = start - b - layout.input_sequence + 1
        frame_ids = self._no_frames.copy()
        lo, hi = max(-first_step, 0), min(layout.frames_per_sequence, last - first_step + 1)
        if lo < hi:
            first_id = self._episode_first_id + first_step
            ids = self._arange[lo:hi] + first_id  # ids >= 0: the modulo only when it wraps
            frame_ids[lo:hi] = ids if first_id + hi <= FRAME_ID_MODULUS else ids % FRAME_ID_MODULUS
        seq["frame_ids"] = frame_ids
        obs_mask, burnin_mask = self._windows.masks(
            max(b - start, 0), min(max(last - start + b + 1, 0), layout.sequence_length)
        )
        seq["obs_mask"] = obs_mask.copy()
        seq["burnin_mask"] = burnin_mask.copy()
        seq["state"] = steps[max(start - b, 0) - base].state.copy()
        seq["actions"] = np.array(actions + self._zeros[real:], np.int32)
        seq["returns"] = np.array(returns + self._zeros[real:], np.float32)
        seq["bootstrap_discount"] = discounts.copy()
        seq["bootstrap_index"] = bootstrap_index.copy()
        seq["mask"] = mask.copy()
        newest = self._episode_first_id + min(start + length + n - 1, last)
        self._sink(self._record(seq, float(priority), newest, new_count, new_sum_square))

    def _take_new_rewards(self) -> tuple[int, float]:
        """The moments of the rewards added since the last record (zeroed), merged into
        the adder's own."""
        count, sum_square = self._new_rewards
        self._new_rewards = [0, 0.0]
        if count:
            self._reward_moments = merge_reward_moments(
                *self._reward_moments, count, sum_square / count
            )
        return count, sum_square

    def _record(
        self,
        fields: dict[str, np.ndarray],
        priority: float,
        newest: int,
        reward_count: int,
        reward_sum_square: float,
    ) -> SequenceRecord:
        """Wraps a sequence with the frames it uses (up to id `newest`) that no earlier
        record carried, and the moments of the rewards no earlier record carried."""
        first = self._sent_upto + 1
        count = max(newest - self._sent_upto, 0)
        offset = first - self._episode_first_id - self._base  # index in self._steps
        frames = [self._steps[offset + i].frame for i in range(count)]
        frames_array = (
            np.array(frames)  # np.stack's result, without its Python-level work
            if frames
            else np.zeros((0, *self.layout.frame_shape), self.layout.frame_dtype)
        )
        self._sent_upto = max(self._sent_upto, newest)
        return SequenceRecord(
            fields,
            priority,
            frames_array,
            first % FRAME_ID_MODULUS,
            reward_count,
            reward_sum_square,
        )
