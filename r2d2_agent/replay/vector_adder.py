"""`VectorSequenceAdder`: N envs' `SequenceAdder`s in arrays, one call per step of all N.

An actor of N envs (`R2D2VectorActor`) steps all its envs together. With one
`SequenceAdder` per env, each env step costs a Python call that copies the step into an
object and, every `period` steps, a window built step by step in Python: at CartPole size
that was more than the env step itself. This adder keeps the N envs' recent steps in
arrays (a ring of steps per env) and takes a step of all N envs in one `add`: the step
is written with a handful of array assignments, and the windows due at that step (about
`N / period` of them) are built together, with array arithmetic over the windows.

The records are those N separate `SequenceAdder`s would emit, bit for bit (the same float64
operations in the same order; `tests/test_vector_adder.py` compares them), each handed to
its env's sink, env after env, in the order a `SequenceAdder` emits them: env `j`'s
records go to `sinks[j]` with env `j`'s own frame ids and reward moments.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from r2d2_agent.math import inverse_rescale, merge_reward_moments, rescale, reward_scale
from r2d2_agent.replay.adder import FRAME_ID_MODULUS, SequenceRecord, Sink
from r2d2_agent.replay.layout import SequenceLayout
from r2d2_agent.replay.window_fields import WindowFields, check_rates

__all__ = ["VectorSequenceAdder"]

_max = np.maximum.reduce
_min = np.minimum.reduce
_sum = np.add.reduce


class _Windows:
    """The windows due after one step, of any envs, sizes and endings (one `_build`).

    Attributes:
        envs: The env of each window, in emit order (env after env, each env's windows
            by start).
        starts: The episode step each window starts at (`q`).
        last: The index of its env's newest observation.
        keys: `(size, terminal)`: the steps its segment covers (`min(L + n - 1, E - q)`)
            and whether the segment ends in a termination.
    """

    __slots__ = ("envs", "keys", "last", "starts")

    def __init__(self) -> None:
        self.envs: list[int] = []
        self.starts: list[int] = []
        self.last: list[int] = []
        self.keys: list[tuple[int, bool]] = []

    def add(self, env: int, start: int, last: int, size: int, terminal: bool) -> None:
        """Adds a window."""
        self.envs.append(env)
        self.starts.append(start)
        self.last.append(last)
        self.keys.append((size, terminal))


class VectorSequenceAdder:
    """`SequenceAdder`s of N envs in one: `add_first(env, frame)` per env, then `add` per
    step of all N envs; each env's records go to its own sink.

    Every env must have an episode in progress at each `add`: an env whose episode ended
    in a step gets `add_first` (its next episode's first frame) before the next `add`, as
    `VectorEpisodeLoop` does. See `SequenceAdder` for what a record holds.

    Args:
        sinks: One sink per env (N of them), each called with that env's records.
        layout: The sequence layout.
        gamma: Discount in `[0, 1]`.
        priority_eta: Max/mean mixing of the priority, in `[0, 1]`.
        rescaling: Whether Q-values are in the rescaled (`h`) space.
        double_q: Double-Q bootstrap for the initial priority: with the acting Q-values
            as both networks it is the same value as without, so it changes nothing
            (taken for `SequenceAdder`'s interface).
        normalize_rewards: Divide the returns of the initial priority by each env's
            reward scale.

    Raises:
        ValueError: If there is no sink, a sink is not callable or `gamma`/`priority_eta`
            is outside [0, 1].
    """

    def __init__(
        self,
        sinks: Sequence[Sink],
        layout: SequenceLayout,
        *,
        gamma: float,
        priority_eta: float,
        rescaling: bool,
        double_q: bool = True,
        normalize_rewards: bool = False,
    ) -> None:
        sinks = list(sinks)
        if not sinks:
            raise ValueError("VectorSequenceAdder needs at least one sink (one per env)")
        for sink in sinks:
            if not callable(sink):
                raise ValueError(f"sinks must be callable, got {sink!r}")
        check_rates(gamma, priority_eta)
        self.layout = layout
        self.num_envs = n = len(sinks)
        self._sinks = sinks
        self._gamma = float(gamma)
        self._eta = float(priority_eta)
        self._rescaling = bool(rescaling)
        self._normalize = bool(normalize_rewards)
        self._windows = WindowFields(layout, self._gamma)
        b, length, steps = layout.burnin, layout.input_length, layout.multisteps
        # The ring holds every step from the next window's burn-in (and the step before
        # it) to the newest observation: at most b + 1 + L + n + period of them.
        self._ring = ring = b + length + steps + layout.period + 2
        self._rows = np.arange(n)
        self._table_index: dict[tuple[int, bool], int] = {}
        spec = layout.field_spec()
        self._tables: tuple[np.ndarray, ...] = (  # see _key_rows
            np.zeros((0, length), np.int64),
            np.zeros((0, length), np.float64),
            *(
                np.zeros((0, length), spec[name][1])
                for name in ("bootstrap_discount", "bootstrap_index", "mask")
            ),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
        self._frames = np.zeros((n, ring, *layout.frame_shape), layout.frame_dtype)
        self._states = np.zeros((n, ring, 2, layout.state_size), np.float32)
        self._actions = np.zeros((n, ring), np.int64)
        self._rewards = np.zeros((n, ring), np.float64)
        self._boot = np.zeros((n, ring), np.float64)
        self._q: np.ndarray | None = None  # (n, ring, nb_actions) once known
        # Every `add` takes one step of every env, so the per-env counters that grow by
        # one a step are kept as offsets from `_adds`: env j's newest observation is
        # step `_adds - _episode_start[j]` of its episode, its next frame id
        # `_adds + _firsts[j]`, its rewards since its last record `_adds - _counted[j]`.
        self._adds = 0
        self._episode_start = np.zeros(n, np.int64)
        self._firsts = [0] * n  # add_first calls
        self._counted = [0] * n
        self._next_start = np.zeros(n, np.int64)  # start of the env's next window
        self._active = [False] * n
        self._episode_first_id = [0] * n
        self._sent_upto = [-1] * n  # newest frame id a record carried
        self._new_sum_square = np.zeros(n, np.float64)
        self._reward_moments = [(0.0, 0.0)] * n
        spec = layout.field_spec()
        self._field_names = tuple(spec)
        self._id_dtype = spec["frame_ids"][1]

    @property
    def nb_actions(self) -> int | None:
        """The number of actions (None before the first `add`)."""
        return None if self._q is None else self._q.shape[2]

    def reward_scale(self, env: int) -> float:
        """With `normalize_rewards`, the reward scale of every reward env `env`'s records
        carried (`reward_scale`), which divides its initial priorities' returns.

        Raises:
            RuntimeError: Without `normalize_rewards` (the moments are not kept then).
        """
        if not self._normalize:
            raise RuntimeError("the adder keeps reward moments only with normalize_rewards")
        return reward_scale(*self._reward_moments[env])

    def reset(self, env: int) -> None:
        """Drops env `env`'s current episode without emitting anything (frame ids go on;
        the moments of its rewards go with the env's next record)."""
        self._next_start[env] = 0
        self._active[env] = False
        self._sent_upto[env] = self._adds + self._firsts[env] - 1

    def add_first(self, env: int, frame: np.ndarray) -> None:
        """Starts an episode of env `env` at its first frame `s_0`.

        Raises:
            RuntimeError: If the env has an episode in progress (call `reset` first).
            ValueError: If the frame has the wrong shape.
        """
        if self._active[env]:
            raise RuntimeError(f"add_first called mid-episode of env {env}; call reset({env})")
        self.reset(env)
        copy = np.asarray(frame, dtype=self.layout.frame_dtype)
        if copy.shape != self.layout.frame_shape:
            raise ValueError(f"frame must have shape {self.layout.frame_shape}, got {copy.shape}")
        self._episode_start[env] = self._adds
        self._episode_first_id[env] = self._adds + self._firsts[env]
        self._frames[env, 0] = copy
        self._firsts[env] += 1
        self._active[env] = True

    def add(
        self,
        actions: Sequence[int] | np.ndarray,
        rewards: Sequence[float] | np.ndarray,
        next_frames: Sequence[np.ndarray] | np.ndarray,
        terminated: Sequence[bool] | np.ndarray,
        truncated: Sequence[bool] | np.ndarray,
        states: np.ndarray | None,
        q_values: np.ndarray,
        next_q_values: dict[int, np.ndarray] | None = None,
    ) -> None:
        """Records the transitions `(s_t, a_t, r_t, s_{t+1})` of all N envs.

        Args:
            actions: `(N,)` actions `a_t`.
            rewards: `(N,)` rewards `r_t`.
            next_frames: The N frames of `s_{t+1}` (the final ones where episodes end).
            terminated: `(N,)`: the episode terminated at `s_{t+1}` (wins over truncated).
            truncated: `(N,)`: the episode was cut off at `s_{t+1}`.
            states: `(N, 2, state_size)` recurrent states before processing `s_t` (None
                allowed when `state_size == 0`).
            q_values: `(N, nb_actions)` `Q(s_t, .)` computed when acting.
            next_q_values: `Q(s_{t+1}, .)` by env, for envs whose episode ends at this
                step, where known (needed for an exact initial priority at a truncation;
                else `Q(s_t, .)` stands in for it, as in `SequenceAdder.add`).

        Raises:
            RuntimeError: If an env has no episode in progress.
            ValueError: On shapes or actions that do not match the configuration.
        """
        layout, n = self.layout, self.num_envs
        if not all(self._active):
            idle = self._active.index(False)
            raise RuntimeError(f"add called without an episode of env {idle}; call add_first")
        q = self._checked_q(q_values)
        act = np.asarray(actions)
        if act.shape != (n,) or not np.issubdtype(act.dtype, np.integer):
            raise ValueError(f"actions must be {n} integers, got {actions!r}")
        if _min(act) < 0 or _max(act) >= q.shape[1]:
            raise ValueError(f"actions must be integers in [0, {q.shape[1]}), got {actions!r}")
        if states is None and layout.state_size == 0:
            states = np.zeros((n, 2, 0), np.float32)
        st = np.asarray(states, dtype=np.float32)
        if st.shape != (n, 2, layout.state_size):
            raise ValueError(
                f"states must have shape ({n}, 2, {layout.state_size}), got {st.shape}"
            )
        frames = np.asarray(next_frames, dtype=layout.frame_dtype)
        if frames.shape != (n, *layout.frame_shape):
            raise ValueError(
                f"next_frames must have shape ({n}, *{layout.frame_shape}), got {frames.shape}"
            )
        reward = np.asarray(rewards, dtype=np.float64)
        term = np.asarray(terminated, dtype=bool)
        ended = term | np.asarray(truncated, dtype=bool)
        next_q_values = next_q_values or {}
        for j in next_q_values:
            if not 0 <= j < n or not ended[j]:
                raise ValueError(
                    f"next_q_values are for envs whose episode ends at this step, got env {j!r}"
                )
        next_q = {j: self._checked_q(np.asarray(q_j)[None]) for j, q_j in next_q_values.items()}
        # nothing was changed before this line: a refused step leaves the adder as it was
        ring, rows = self._ring, self._rows
        last = self._adds - self._episode_start
        now = last % ring
        after = (last + 1) % ring
        self._q[rows, now] = q
        self._boot[rows, now] = self._boot_values(q)
        self._actions[rows, now] = act
        self._rewards[rows, now] = reward
        self._states[rows, now] = st
        self._frames[rows, after] = frames
        self._new_sum_square += reward * reward
        ended_envs = np.flatnonzero(ended).tolist()
        for j in ended_envs:  # Q(s_E): given, or Q(s_t) stands in for it
            if j in next_q:
                self._q[j, after[j]] = next_q[j][0]
                self._boot[j, after[j]] = self._boot_values(next_q[j])[0]
            else:
                self._q[j, after[j]] = q[j]
                self._boot[j, after[j]] = self._boot[j, now[j]]
        self._adds += 1
        self._emit_due(ended, ended_envs, term.tolist())

    # Windows ----------------------------------------------------------------------------

    def _emit_due(self, ended: np.ndarray, ended_envs: list[int], terminated: list[bool]) -> None:
        """Builds every window due after this step and hands the records on, env by env."""
        layout = self.layout
        period = layout.period
        full = layout.input_length + layout.multisteps - 1
        windows = _Windows()
        lasts = self._adds - self._episode_start  # each env's newest observation
        # the envs that ended, and those whose next window's look-ahead s_{q+L+n-1} has
        # its Q-values
        emitting = np.flatnonzero(ended | (self._next_start + full <= lasts - 1)).tolist()
        for j in emitting:
            last, start = int(lasts[j]), int(self._next_start[j])
            if ended[j]:  # the windows with a real step (`end_window_starts`), padded
                for first in layout.end_window_starts(start, last):
                    terminal = terminated[j] and first + full >= last
                    windows.add(j, first, last, min(full, last - first), terminal)
            else:
                while start + full <= last - 1:
                    windows.add(j, start, last, full, False)
                    start += period
            self._next_start[j] = start
        if windows.envs:
            moments = self._take_new_rewards(sorted(set(windows.envs)))
            built = self._build(windows, moments)
            priorities = built.pop("priority").tolist()
            names = self._field_names
            # each field's rows as views, split once (iterating an array is C work)
            rows = zip(*(list(built[name]) for name in names), strict=True)
            frames = self._new_frames(windows)
            for row, (j, values) in enumerate(zip(windows.envs, rows, strict=True)):
                first_frame, new_frames = frames[row]
                count, sum_square, _ = moments.pop(j, (0, 0.0, 0.0))
                record = SequenceRecord(
                    dict(zip(names, values, strict=True)),
                    priorities[row],
                    new_frames,
                    first_frame % FRAME_ID_MODULUS,
                    count,
                    sum_square,
                )
                self._sinks[j](record)
        for j in ended_envs:
            self.reset(j)

    def _key_rows(self, keys: list[tuple[int, bool]]) -> np.ndarray:
        """The rows of `self._tables` of segments `(size, terminal)`, adding new ones:
        `WindowFields.bootstrap` as arrays over the `L` trained steps (`k` and `disc` 0
        past the real steps), the three fields, the real steps and the size."""
        index = self._table_index
        for key in keys:
            if key not in index:
                length = self.layout.input_length
                k, disc, discounts, bootstrap_index, mask = self._windows.bootstrap(*key)
                real = min(length, key[0])
                k_pad = np.zeros(length, np.int64)
                k_pad[:real] = k[:real]
                disc_pad = np.zeros(length, np.float64)
                disc_pad[:real] = disc[:real]
                row = (k_pad, disc_pad, discounts, bootstrap_index, mask, real, key[0])
                index[key] = len(index)
                self._tables = tuple(
                    np.concatenate([table, np.asarray(value)[None]])
                    for table, value in zip(self._tables, row, strict=True)
                )
        return np.array([index[key] for key in keys])

    def _build(
        self, windows: _Windows, moments: dict[int, tuple[int, float, float]]
    ) -> dict[str, np.ndarray]:
        """The fields (one row per window) and priorities of the windows, as
        `SequenceAdder._emit` computes them one window at a time: the same float64
        operations in the same order, over arrays of windows."""
        layout = self.layout
        b, length, seq_len = layout.burnin, layout.input_length, layout.sequence_length
        ring, count = self._ring, len(windows.envs)
        rows = self._key_rows(windows.keys)
        k, disc, discounts, bootstrap_index, mask, real, sizes = (
            table[rows] for table in self._tables
        )
        sizes = sizes[:, None]
        envs = np.array(windows.envs)[:, None]
        starts = np.array(windows.starts)[:, None]
        lasts = np.array(windows.last)[:, None]
        t = np.arange(length)
        trained = t < real[:, None]
        # n_step_returns: g_t = sum_{i < k_t} gamma^i r_{t+i}, added up oldest first; a
        # term i < n is in the sum iff t + i < size, so the rewards past a segment's end
        # are taken as 0 (gamma^i * 0 = +0.0 adds nothing: the sum starts at +0.0 and is
        # never -0.0)
        full = np.arange(length + layout.multisteps - 1)
        rewards = self._rewards[envs, (starts + full) % ring]
        rewards = np.where(full < sizes, rewards, 0.0)
        returns = np.zeros((count, length))
        for i in range(int(k.max())):
            returns = returns + self._windows.gamma_powers[i] * rewards[:, i : i + length]
        g = returns
        if self._normalize:
            g = returns / np.array([moments[j][2] for j in windows.envs])[:, None]
        # initial priority: n_step_targets, td_errors and sequence_priorities with the
        # acting Q-values as online and target network
        steps = (starts + t) % ring
        actions = np.where(trained, self._actions[envs, steps], 0)
        boots = self._boot[envs, (starts + t + k) % ring]
        y = g + disc * np.where(disc != 0.0, boots, 0.0)  # no 0 * inf
        if self._rescaling:
            y = rescale(y)
        assert self._q is not None
        td = np.where(trained, np.abs(y - self._q[envs, steps, actions]), 0.0)
        sums = _sum(td, axis=1)
        for row in np.flatnonzero(real != length).tolist():  # as a sum of `real` terms
            sums[row] = _sum(td[row, : real[row]])
        fields: dict[str, np.ndarray] = {
            "priority": self._eta * _max(td, axis=1) + (1.0 - self._eta) * (sums / real)
        }
        if layout.prev_action_reward:
            obs_steps = starts - b + np.arange(seq_len)
            before = (obs_steps - 1) % ring
            seen = (obs_steps >= 1) & (obs_steps <= lasts)
            fields["prev_actions"] = np.where(seen, self._actions[envs, before], -1).astype(
                np.int32
            )
            fields["prev_rewards"] = np.where(seen, self._rewards[envs, before], 0.0).astype(
                np.float32
            )
        # frames: list entry i is the frame of step start - b - S + 1 + i, visible (an id,
        # else -1) for 0 <= step <= last
        entries = np.arange(layout.frames_per_sequence)
        first_step = starts - b - layout.input_sequence + 1
        visible = (entries >= -first_step) & (entries <= lasts - first_step)
        first_ids = np.array([self._episode_first_id[j] for j in windows.envs])[:, None]
        ids = (first_ids + first_step + entries) % FRAME_ID_MODULUS
        fields["frame_ids"] = np.where(visible, ids, -1).astype(self._id_dtype)
        positions = np.arange(seq_len)
        lo = np.maximum(b - starts, 0)
        hi = np.minimum(np.maximum(lasts - starts + b + 1, 0), seq_len)
        fields["obs_mask"] = ((positions >= lo) & (positions < hi)).astype(np.float32)
        fields["burnin_mask"] = (np.arange(b) >= lo).astype(np.float32)
        fields["state"] = self._states[envs[:, 0], np.maximum(starts[:, 0] - b, 0) % ring]
        fields["actions"] = actions.astype(np.int32)
        fields["returns"] = np.where(trained, returns, 0.0).astype(np.float32)
        fields["bootstrap_discount"] = discounts
        fields["bootstrap_index"] = bootstrap_index
        fields["mask"] = mask
        return fields

    def _new_frames(self, windows: _Windows) -> list[tuple[int, np.ndarray]]:
        """Per window, in order: the id of the first frame its record introduces and the
        frames it uses that no earlier record of its env carried (up to its newest
        observation), gathered from the rings in one indexing."""
        layout = self.layout
        look = layout.input_length + layout.multisteps - 1
        firsts, begins, counts = [], [], []
        for j, start, last in zip(windows.envs, windows.starts, windows.last, strict=True):
            first_id = self._episode_first_id[j]
            newest = first_id + min(start + look, last)
            sent = self._sent_upto[j]
            firsts.append(sent + 1)
            begins.append(sent + 1 - first_id)  # the episode step of that frame
            counts.append(max(newest - sent, 0))
            self._sent_upto[j] = max(sent, newest)
        sizes = np.array(counts)
        ends = np.cumsum(sizes)
        # episode steps begin .. begin + count - 1 of each window's env, one after another
        offsets = np.arange(int(ends[-1])) - np.repeat(ends - sizes, sizes)
        steps = (np.repeat(np.array(begins), sizes) + offsets) % self._ring
        flat = self._frames.reshape(-1, *layout.frame_shape)
        gathered = flat[np.repeat(np.array(windows.envs), sizes) * self._ring + steps]
        return [
            (first, gathered[end - size : end])
            for first, size, end in zip(firsts, counts, ends.tolist(), strict=True)
        ]

    # Helpers ----------------------------------------------------------------------------

    def _take_new_rewards(self, envs: list[int]) -> dict[int, tuple[int, float, float]]:
        """Per env: the count and sum of squares of the rewards added since its last
        record (zeroed) and, with `normalize_rewards`, its reward scale after merging
        them into its moments (1.0 without)."""
        taken = {}
        sums = self._new_sum_square[envs].tolist()
        self._new_sum_square[envs] = 0.0
        for j, sum_square in zip(envs, sums, strict=True):
            count = self._adds - self._counted[j]
            self._counted[j] = self._adds
            scale = 1.0
            if self._normalize:
                if count:
                    self._reward_moments[j] = merge_reward_moments(
                        *self._reward_moments[j], count, sum_square / count
                    )
                scale = self.reward_scale(j)
            taken[j] = (count, sum_square, scale)
        return taken

    def _boot_values(self, q: np.ndarray) -> np.ndarray:
        """The value a target bootstrapping on each row's state takes: `max Q(s, .)`
        (NaN if a row has one), out of the rescaled space with `rescaling`."""
        top = _max(q, axis=1)
        return inverse_rescale(top) if self._rescaling else top

    def _checked_q(self, q_values: np.ndarray) -> np.ndarray:
        """Q-values as float64 `(N, nb_actions)`, the same number of actions as before."""
        q = np.array(q_values, dtype=np.float64)
        known = self.nb_actions
        if q.ndim != 2 or q.shape[1] < 1 or q.shape[1] != (known or q.shape[1]):
            raise ValueError(
                f"q_values must have shape ({self.num_envs}, {known or 'nb_actions'}), "
                f"got {q.shape}"
            )
        if self._q is None:
            self._q = np.zeros((self.num_envs, self._ring, q.shape[1]), np.float64)
        return q
