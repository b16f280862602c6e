"""Cuts episodes into R2D2 training sequences with initial priorities.

Trained windows of ``L = input_length`` steps start at episode steps
``q = 0, period, 2 period, ...``; each is stored with ``b = burnin`` observations
before it and ``n = multisteps`` after it, i.e. observations
``s_{q-b} ... s_{q+L+n-1}``, zero padded before ``s_0`` and after the final
observation ``s_E``. Emitted dict (see :meth:`SequenceAdder.spec`):

* ``obs`` ``(b+L+n, *obs_shape)``: the observations above.
* ``burnin_mask`` ``(b,)`` float32: 1 where the burn-in observation is real.
* ``state`` ``(2, state_size)`` float32: recurrent state passed with step
  ``max(q-b, 0)``, i.e. the state before processing the first real observation.
* ``actions`` ``(L,)`` int32; ``returns``, ``bootstrap_discount`` ``(L,)``
  float32 (:func:`r2d2_agent.targets.n_step_returns`, never crossing the
  episode end); ``bootstrap_index`` ``(L,)`` int32, index into ``obs[b:]`` of
  ``s_{t+K_t}`` (``i`` for padding); ``mask`` ``(L,)`` float32, 1 for real steps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from r2d2_agent.targets import n_step_returns, n_step_targets, sequence_priorities, td_errors

__all__ = ["SequenceAdder"]

Sink = Callable[[dict[str, np.ndarray], float], None]


class _Step:
    """Data attached to observation ``s_j``; the transition fields fill in later."""

    __slots__ = ("action", "obs", "q", "reward", "state")

    def __init__(self, obs: np.ndarray) -> None:
        self.obs = obs
        self.state: np.ndarray | None = None
        self.q: np.ndarray | None = None
        self.action = 0
        self.reward = 0.0


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """Returns ``value`` as int or raises ValueError naming ``name``."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not ok or value < minimum or (maximum is not None and value > maximum):
        bound = f"[{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")
    return int(value)


def _check_unit(name: str, value: object) -> float:
    """Returns ``value`` as float in [0, 1] or raises ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return float(value)


class SequenceAdder:
    """Acme-style adder: ``add_first``, then ``add`` per step; emits to ``sink``.

    A sequence is emitted once its look-ahead is complete, i.e. once
    ``s_{q+L+n-1}`` and ``Q(s_{q+L+n-1})`` (the latter for the initial
    priority) are known: normally on the ``add`` call acting on ``s_{q+L+n-1}``,
    one call earlier if ``next_q_values`` is passed; at the episode's end all
    remaining windows with at least one real step are emitted, padded. Only
    about ``b + L + n + 1`` steps are buffered.

    The initial priority uses the recorded acting q values as both online and
    target network: ``delta_t = n_step_targets(G_t, D_t, Q(s_{t+K}), Q(s_{t+K}))
    - Q(s_t, a_t)`` and ``priority = sequence_priorities(delta, mask, eta)``.

    Args:
        sink: Called as ``sink(sequence, priority)`` for each finished sequence.
        observation_shape: Shape of one observation.
        observation_dtype: Storage dtype of observations.
        state_size: LSTM units (0 = no recurrent state).
        burnin: ``b >= 0`` burn-in steps.
        input_length: ``L >= 1`` trained steps per sequence.
        multisteps: ``n >= 1`` steps of the n-step returns.
        period: Start distance of adjacent windows, in ``[1, L]``.
        gamma: Discount in ``[0, 1]``.
        priority_eta: Max/mean mixing of the priority, in ``[0, 1]``.
        rescaling: Whether q values are in the rescaled (``h``) space.
        double_q: Double-Q bootstrap for the initial priority.

    Raises:
        ValueError: On an invalid argument (the message names it and its value).
    """

    def __init__(self, sink: Sink, *, observation_shape: tuple[int, ...],
                 observation_dtype: np.dtype | type | str, state_size: int, burnin: int,
                 input_length: int, multisteps: int, period: int, gamma: float,
                 priority_eta: float, rescaling: bool, double_q: bool = True) -> None:
        if not callable(sink):
            raise ValueError(f"sink must be callable, got {sink!r}")
        self._spec = self.spec(observation_shape=observation_shape,
                               observation_dtype=observation_dtype, state_size=state_size,
                               burnin=burnin, input_length=input_length,
                               multisteps=multisteps)
        self._sink = sink
        self._obs_shape, self._obs_dtype = self._spec["obs"][0][1:], self._spec["obs"][1]
        self._state_size, self._b = int(state_size), int(burnin)
        self._L, self._n = int(input_length), int(multisteps)
        self._period = _check_int("period", period, 1, self._L)
        self._gamma = _check_unit("gamma", gamma)
        self._eta = _check_unit("priority_eta", priority_eta)
        for name, flag in (("rescaling", rescaling), ("double_q", double_q)):
            if not isinstance(flag, (bool, np.bool_)):
                raise ValueError(f"{name} must be a bool, got {flag!r}")
        self._rescaling, self._double_q = bool(rescaling), bool(double_q)
        self._steps: deque[_Step] = deque()
        self._base = 0  # Episode index of self._steps[0].
        self._next_start = 0  # Start q of the next window to emit.
        self._nb_actions: int | None = None
        self._active = False

    @staticmethod
    def spec(*, observation_shape: tuple[int, ...], observation_dtype: np.dtype | type | str,
             state_size: int, burnin: int, input_length: int,
             multisteps: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Field name -> ``(shape, dtype)`` of one emitted sequence.

        Raises:
            ValueError: On an invalid argument (named in the message).
        """
        try:
            shape = tuple(_check_int("observation_shape", d, 0) for d in observation_shape)
        except (TypeError, ValueError):
            raise ValueError(f"observation_shape must be a tuple of ints >= 0, "
                             f"got {observation_shape!r}") from None
        try:
            obs_dtype = np.dtype(observation_dtype)
        except TypeError:
            raise ValueError(f"observation_dtype must be a numpy dtype, "
                             f"got {observation_dtype!r}") from None
        units = _check_int("state_size", state_size, 0)
        b = _check_int("burnin", burnin, 0)
        length = _check_int("input_length", input_length, 1)
        n = _check_int("multisteps", multisteps, 1)
        f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
        return {"obs": ((b + length + n, *shape), obs_dtype), "burnin_mask": ((b,), f32),
                "state": ((2, units), f32), "actions": ((length,), i32),
                "returns": ((length,), f32), "bootstrap_discount": ((length,), f32),
                "bootstrap_index": ((length,), i32), "mask": ((length,), f32)}

    @property
    def buffer_length(self) -> int:
        """Number of per-step records currently buffered (diagnostic)."""
        return len(self._steps)

    def reset(self) -> None:
        """Drops the current episode without emitting anything."""
        self._steps.clear()
        self._base = self._next_start = 0
        self._active = False

    def add_first(self, observation: np.ndarray) -> None:
        """Starts an episode at ``s_0``.

        Raises:
            RuntimeError: If an episode is in progress (call :meth:`reset` first).
            ValueError: If the observation has the wrong shape.
        """
        if self._active:
            raise RuntimeError("add_first called mid-episode; call reset() to drop it")
        self.reset()
        self._steps.append(_Step(self._check_obs(observation)))
        self._active = True

    def add(self, action: int, reward: float, next_observation: np.ndarray,
            terminated: bool, truncated: bool, state: np.ndarray | None,
            q_values: np.ndarray, next_q_values: np.ndarray | None = None) -> None:
        """Records the transition ``(s_t, a_t, r_t, s_{t+1})``.

        Args:
            action: ``a_t``, chosen on ``s_t``.
            reward: ``r_t``.
            next_observation: ``s_{t+1}`` (the final observation if the episode ends).
            terminated: The episode terminated at ``s_{t+1}`` (wins over truncated).
            truncated: The episode was cut off at ``s_{t+1}``.
            state: ``(2, state_size)`` recurrent state before processing ``s_t``
                (``None`` allowed when ``state_size == 0``).
            q_values: ``Q(s_t, .)`` computed when acting, shape ``(nb_actions,)``.
            next_q_values: ``Q(s_{t+1}, .)`` if known. Needed for an exact initial
                priority at the last step of a truncated episode; if omitted
                there, ``q_values`` stands in for it (irrelevant on termination,
                where the bootstrap discount is 0).

        Raises:
            RuntimeError: If no episode is in progress (``add_first`` first).
            ValueError: On shapes that do not match the configuration.
        """
        if not self._active:
            raise RuntimeError("add called without an episode in progress; call add_first")
        q = self._check_q("q_values", q_values)
        if isinstance(action, bool) or int(action) != action or not 0 <= action < q.shape[0]:
            raise ValueError(f"action must be an integer in [0, {q.shape[0]}), got {action!r}")
        if state is None and self._state_size == 0:
            state = np.zeros((2, 0), np.float32)
        st = np.array(state, dtype=np.float32)
        if st.shape != (2, self._state_size):
            raise ValueError(f"state must have shape (2, {self._state_size}), got {st.shape}")
        nxt = _Step(self._check_obs(next_observation))
        ended = bool(terminated) or bool(truncated)
        nxt.q = (self._check_q("next_q_values", next_q_values)
                 if next_q_values is not None else (q if ended else None))
        step = self._steps[-1]
        step.action, step.reward, step.state, step.q = int(action), float(reward), st, q
        self._steps.append(nxt)
        if ended:
            end = self._base + len(self._steps) - 1  # E, index of s_E.
            while self._next_start < end:
                self._emit(self._next_start, end, bool(terminated))
                self._next_start += self._period
            self.reset()
            return
        while True:
            look = self._next_start + self._L + self._n - 1 - self._base
            if look >= len(self._steps) or self._steps[look].q is None:
                break
            self._emit(self._next_start, None, False)
            self._next_start += self._period
            while self._base < self._next_start - self._b:
                self._steps.popleft()
                self._base += 1

    def _check_obs(self, observation: np.ndarray) -> np.ndarray:
        """Copies an observation to the storage dtype, checking its shape."""
        obs = np.array(observation, dtype=self._obs_dtype)
        if obs.shape != self._obs_shape:
            raise ValueError(f"observation must have shape {self._obs_shape}, got {obs.shape}")
        return obs

    def _check_q(self, name: str, q_values: np.ndarray) -> np.ndarray:
        """Copies q values to float64, checking ``(nb_actions,)`` consistency."""
        q = np.array(q_values, dtype=np.float64)
        if q.ndim != 1 or q.shape[0] < 1 or q.shape[0] != (self._nb_actions or q.shape[0]):
            raise ValueError(f"{name} must have shape ({self._nb_actions or 'nb_actions'},), "
                             f"got {q.shape}")
        self._nb_actions = q.shape[0]
        return q

    def _emit(self, start: int, end: int | None, terminated: bool) -> None:
        """Builds the window starting at step ``start`` and hands it to the sink.

        ``end`` is ``E`` (index of the final observation) once the episode is
        over, else ``None`` (then the look-ahead is complete).
        """
        b, length, n = self._b, self._L, self._n
        steps, base = self._steps, self._base
        last = base + len(steps) - 1  # Index of the newest observation.
        seq = {k: np.zeros(shape, dtype) for k, (shape, dtype) in self._spec.items()}
        for p in range(b + length + n):
            j = start - b + p
            if 0 <= j <= last:
                seq["obs"][p] = steps[j - base].obs
        seq["burnin_mask"][:] = np.arange(start - b, start) >= 0
        seq["state"][:] = steps[max(start - b, 0) - base].state
        seg_end = start + length + n - 1 if end is None else min(start + length + n - 1, end)
        rewards = [steps[t - base].reward for t in range(start, seg_end)]
        term = terminated and end is not None and seg_end == end
        g, disc, k = n_step_returns(rewards, term, False, self._gamma, n)
        real = min(length, seg_end - start)
        idx = np.arange(length)
        seq["actions"][:real] = [steps[t - base].action for t in range(start, start + real)]
        seq["returns"][:real], seq["bootstrap_discount"][:real] = g[:real], disc[:real]
        seq["bootstrap_index"][:] = idx + np.pad(k[:real], (0, length - real))
        seq["mask"][:real] = 1.0
        # Initial priority from the acting q values (online == target).
        q_boot = np.stack([steps[t - base].q for t in start + seq["bootstrap_index"][:real]])
        q_now = np.stack([steps[t - base].q for t in range(start, start + real)])
        q_taken = q_now[np.arange(real), seq["actions"][:real]]
        y = n_step_targets(g[:real], disc[:real], q_boot, q_boot,
                           double_q=self._double_q, rescaling=self._rescaling)
        priority = sequence_priorities(td_errors(y, q_taken), np.ones(real), self._eta)
        self._sink(seq, float(priority))
