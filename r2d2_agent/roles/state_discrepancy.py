"""Is burn-in long enough? The recurrent-state diagnostic of Kapturowski et al. (2019), Fig. 1.

A replayed sequence starts from a recurrent state that is not the one the current network
would have there: the actor stored it with older weights ("stored state"), or it is zero.
Burn-in unrolls the current network over the `b` steps before the trained window to bring
that state closer. The paper measures how far it stays off with the Q-value discrepancy

    ΔQ_t = || q(ĥ_t) - q(h*_t) ||₂ / | max_j q(h*_t)_j |

at step `t` of the trained window, where `h*_t` is the "true" state, the current network
unrolled from the episode's start (zero state at `s_0`), and `ĥ_t` the state the learner
gets from the replayed sequence. `state_discrepancy` computes the mean (the paper's
statistic) and the median over sequences of `ΔQ_t` for every trained step `t` and four
starts:

* `stored_burnin`: the stored state, then `b` burn-in steps (what the learner trains on);
* `stored`: the state stored at the window's first step, no burn-in;
* `zero_burnin`: a zero state, then `b` burn-in steps;
* `zero`: a zero state at the window's first step, no burn-in.

A curve that is high at `t = 0` and falls along the window says the state starts stale
and the window's first steps are trained on it: a longer burn-in (or stored states) helps.
Q-values are the network's outputs (the rescaled `h` space with `enable_rescaling`, as
in the paper); the ratio grows without bound where the largest Q-value is near zero (an
episode's last steps, often), which the median shrugs off.

Episodes come from an `EpisodeRecorder`, a tee on the actor's adder that keeps the
frames, actions, rewards and recurrent states of some episodes (`RecordedEpisode`). They
are cut into windows by a `SequenceAdder` of the config's layout (input length, period,
stacking; the burn-in passed), exactly as the replay holds them, stored state included.
`write_episodes` and `read_episodes` move recorded episodes between processes as `.npz`
files (`r2d2_agent.callbacks.StateDiscrepancyCallback` does, for a manager run).
This module imports neither TensorFlow nor matplotlib; `plot_state_discrepancy` of
`r2d2_agent.plot` draws a result.
"""

from __future__ import annotations

import collections
import logging
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.leftovers import atomic_write
from r2d2_agent.replay.adder import SequenceAdder, SequenceRecord
from r2d2_agent.replay.layout import SequenceLayout, stack_frames
from r2d2_agent.replay.sizing import storage_dtype

__all__ = [
    "VARIANTS",
    "VARIANT_LABELS",
    "EpisodeRecorder",
    "RecordedEpisode",
    "StateDiscrepancy",
    "read_episodes",
    "state_discrepancy",
    "write_episodes",
]

logger = logging.getLogger(__name__)

VARIANTS = ("stored_burnin", "stored", "zero_burnin", "zero")
"""The four starts of a replayed sequence, in `StateDiscrepancy.by_step` order."""

VARIANT_LABELS = {
    "stored_burnin": "stored state, burn-in",
    "stored": "stored state, no burn-in",
    "zero_burnin": "zero state, burn-in",
    "zero": "zero state, no burn-in",
}
"""Legend labels of the variants."""

_DENOMINATOR_FLOOR = 1e-6
"""`|max_j q(h*_t)_j|` below this is taken as this (the ratio is undefined at 0)."""


@dataclass(frozen=True)
class RecordedEpisode:
    """One finished episode as the actor handed it to its adder.

    Attributes:
        observations: `(E + 1, *frame)`: the frames `s_0 .. s_E` (single frames, not
            stacks; `s_E` is the final one).
        actions: `(E,)` int: `a_t`, chosen on `s_t`.
        rewards: `(E,)` float: `r_t`.
        states: `(E, 2, state_size)` float32: the recurrent state (h, c) the actor had
            before processing `s_t`, the one it stored with step `t` (what the replay
            holds for a window whose stored state is at step `t`).
        terminated: Whether the episode ended in an absorbing state (else it was truncated).

    Raises:
        ValueError: If the lengths or shapes do not fit together (naming them).
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    states: np.ndarray
    terminated: bool

    def __post_init__(self) -> None:
        observations = np.asarray(self.observations)
        actions = np.asarray(self.actions, dtype=np.int64)
        rewards = np.asarray(self.rewards, dtype=np.float64)
        states = np.asarray(self.states, dtype=np.float32)
        steps = len(actions)
        if actions.ndim != 1 or steps < 1:
            raise ValueError(f"actions must have shape (E,) with E >= 1, got {actions.shape}")
        if observations.ndim < 1 or len(observations) != steps + 1:
            raise ValueError(
                f"observations must hold E + 1 = {steps + 1} frames, got shape {observations.shape}"
            )
        if rewards.shape != (steps,):
            raise ValueError(f"rewards must have shape ({steps},), got {rewards.shape}")
        if states.ndim != 3 or states.shape[:2] != (steps, 2):
            raise ValueError(f"states must have shape ({steps}, 2, state_size), got {states.shape}")
        for name, value in (
            ("observations", observations),
            ("actions", actions),
            ("rewards", rewards),
            ("states", states),
        ):
            value = value.copy() if value is getattr(self, name) else value
            value.flags.writeable = False
            object.__setattr__(self, name, value)
        object.__setattr__(self, "terminated", bool(self.terminated))

    @property
    def length(self) -> int:
        """Steps `E` of the episode."""
        return len(self.actions)


class EpisodeRecorder:
    """A tee on an actor's adder: passes every call on and keeps some whole episodes.

    It has the adder's interface (`reset`, `add_first`, `add`; other attributes are the
    wrapped adder's), so it stands in for the adder of an `R2D2Actor`
    (`R2D2Agent.record_episodes` puts it there). Of the episodes started, the 1st,
    `every + 1`-th, `2 every + 1`-th, ... are recorded; the last `keep` finished ones
    are kept. An episode dropped by `reset` before its end is not kept.

    Args:
        adder: The adder to pass calls on to (a `SequenceAdder`); None records only.
        keep: Finished episodes to keep, at least 1.
        every: Record one episode out of this many, at least 1.

    Raises:
        ValueError: If `keep` or `every` is not an int >= 1.
    """

    def __init__(self, adder: Any = None, keep: int = 10, every: int = 1) -> None:
        for name, value in (("keep", keep), ("every", every)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.adder = adder
        self.keep = int(keep)
        self.every = int(every)
        self.episodes_started = 0
        """Episodes started (`add_first` calls) since the recorder was made."""
        self._kept: collections.deque[RecordedEpisode] = collections.deque(maxlen=self.keep)
        self._current: dict[str, list[Any]] | None = None

    def __getattr__(self, name: str) -> Any:
        adder = self.__dict__.get("adder")
        if adder is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(adder, name)

    @property
    def episodes(self) -> tuple[RecordedEpisode, ...]:
        """The kept episodes, oldest first."""
        return tuple(self._kept)

    def clear(self) -> None:
        """Forgets the kept episodes (the one being recorded goes on)."""
        self._kept.clear()

    def reset(self) -> None:
        """Drops the episode in progress, here and in the adder."""
        self._current = None
        if self.adder is not None:
            self.adder.reset()

    def add_first(self, frame: np.ndarray) -> None:
        """Starts an episode at its first frame (see `SequenceAdder.add_first`)."""
        if self.adder is not None:
            self.adder.add_first(frame)
        record = self.episodes_started % self.every == 0
        self.episodes_started += 1
        self._current = None
        if record:
            self._current = {
                "frames": [np.array(frame)],
                "actions": [],
                "rewards": [],
                "states": [],
            }

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
        """Records a transition (see `SequenceAdder.add`) and passes it on."""
        if self.adder is not None:
            self.adder.add(
                action, reward, next_frame, terminated, truncated, state, q_values, next_q_values
            )
        current = self._current
        if current is None:
            return
        current["frames"].append(np.array(next_frame))
        current["actions"].append(int(action))
        current["rewards"].append(float(reward))
        current["states"].append(
            np.zeros((2, 0), np.float32) if state is None else np.array(state, np.float32)
        )
        if terminated or truncated:
            self._kept.append(
                RecordedEpisode(
                    observations=np.stack(current["frames"]),
                    actions=np.array(current["actions"]),
                    rewards=np.array(current["rewards"]),
                    states=np.stack(current["states"]),
                    terminated=bool(terminated),
                )
            )
            self._current = None


_EPISODE_FIELDS = ("observations", "actions", "rewards", "states")


def write_episodes(
    path: str | os.PathLike[str], episodes: Iterable[RecordedEpisode], **meta: Any
) -> str:
    """Writes recorded episodes to one numpy `.npz` file, atomically: to a temporary
    file named after its owner, fsynced, then renamed (`r2d2_agent.leftovers.atomic_write`),
    so a reader never sees half a file and a killed writer's temp file can be reclaimed.

    Episode `k`'s arrays are `<field>_<k>` (`observations`, `actions`, `rewards`,
    `states`) and `terminated` holds every episode's flag; `meta` values (numbers,
    strings, arrays) are stored as `meta_<name>`.

    Args:
        path: The file to write (its directory is created if needed).
        episodes: The `RecordedEpisode`s (may be none).
        **meta: Extra values to store, e.g. `actor=0`.

    Returns:
        The file written.
    """
    path = os.fspath(path)
    episodes = tuple(episodes)
    arrays: dict[str, Any] = {"terminated": np.array([e.terminated for e in episodes], bool)}
    for k, episode in enumerate(episodes):
        for name in _EPISODE_FIELDS:
            arrays[f"{name}_{k}"] = getattr(episode, name)
    for name, value in meta.items():
        arrays[f"meta_{name}"] = np.asarray(value)
    with atomic_write(path, durable=True) as tmp, open(tmp, "wb") as file:
        np.savez(file, **arrays)
    return path


def read_episodes(path: str | os.PathLike[str]) -> tuple[list[RecordedEpisode], dict[str, Any]]:
    """Reads a file of `write_episodes`.

    Args:
        path: The `.npz` file.

    Returns:
        `(episodes, meta)`: the `RecordedEpisode`s in the order written, and the `meta`
        values (0-d arrays as Python scalars).

    Raises:
        ValueError: If the file is not one `write_episodes` wrote (naming the file).
    """
    path = os.fspath(path)
    with np.load(path, allow_pickle=False) as data:
        if "terminated" not in data.files:
            raise ValueError(f"{path} holds no recorded episodes (no 'terminated' array)")
        terminated = data["terminated"]
        try:
            episodes = [
                RecordedEpisode(
                    **{name: data[f"{name}_{k}"] for name in _EPISODE_FIELDS},
                    terminated=bool(flag),
                )
                for k, flag in enumerate(terminated)
            ]
        except KeyError as exc:
            raise ValueError(f"{path} lacks an episode's array: {exc}") from exc
        meta = {}
        for name in data.files:
            if name.startswith("meta_"):
                value = data[name]
                meta[name.removeprefix("meta_")] = value.item() if value.ndim == 0 else value
    return episodes, meta


@dataclass(frozen=True)
class StateDiscrepancy:
    """The diagnostic's result: mean `ΔQ_t` per trained step `t` for each variant.

    Attributes:
        by_step: Variant name (`VARIANTS`) -> `(input_length,)` mean over sequences of
            `ΔQ_t` (NaN where no sequence has a real step `t`).
        median_by_step: The same with the median over sequences: robust to the few
            steps whose largest true Q-value is near 0 (e.g. an episode's last steps
            in a task whose rewards end there), which dominate a mean.
        counts: `(input_length,)` sequences with a real step `t` (the means' sizes).
        burnin: Burn-in steps of the `*_burnin` variants.
        input_length: Trained steps per sequence.
        period: Env steps between the starts of adjacent windows.
        nb_sequences: Windows cut from the episodes.
        nb_episodes: Episodes they came from.
    """

    by_step: dict[str, np.ndarray]
    median_by_step: dict[str, np.ndarray]
    counts: np.ndarray
    burnin: int
    input_length: int
    period: int
    nb_sequences: int
    nb_episodes: int

    def summary(self) -> dict[str, float]:
        """Per variant: `<variant>_mean` (over all real steps of all sequences),
        `<variant>_first` (step 0) and `<variant>_last` (the last step some sequence
        reaches, normally `input_length - 1`)."""
        real = np.flatnonzero(self.counts > 0)
        out: dict[str, float] = {}
        for name in VARIANTS:
            values = self.by_step[name]
            if real.size == 0:
                mean = first = last = float("nan")
            else:
                weights = self.counts[real]
                mean = float(np.sum(values[real] * weights) / np.sum(weights))
                first, last = float(values[real[0]]), float(values[real[-1]])
            out[f"{name}_mean"] = mean
            out[f"{name}_first"] = first
            out[f"{name}_last"] = last
        return out


Unroller = Callable[
    [np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]
]
"""`(obs (N, T, S, *frame), state (N, 2, u), mask (N, T) bool, prev_action (N, T),
prev_reward (N, T)) -> (q (N, T, nb_actions), final state (N, 2, u))`; masked steps keep
the state."""


def _unroller(network: Any, config: R2D2Config) -> Unroller:
    """Runs whole sequences through `network`: an `R2D2Network` (`unroll`, the learner's
    own call) or a one-step `Policy` (`step`: `NumpyNetwork`, `KerasPolicy`). With
    `normalize_rewards` the previous rewards are divided by the network's reward scale,
    as the learner and the actors divide them."""
    with_prev = config.enable_prev_action_reward
    scale = float(getattr(network, "reward_scale", 1.0)) if config.normalize_rewards else 1.0

    def run_unroll(
        obs: np.ndarray,
        state: np.ndarray,
        mask: np.ndarray,
        prev_action: np.ndarray,
        prev_reward: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        extra = {}
        if with_prev:
            extra = {"prev_action": prev_action, "prev_reward": prev_reward / scale}
        q, (h, c) = network.unroll(obs, (state[:, 0], state[:, 1]), mask, **extra)
        return np.asarray(q, np.float64), np.stack([np.asarray(h), np.asarray(c)], axis=1)

    def run_steps(
        obs: np.ndarray,
        state: np.ndarray,
        mask: np.ndarray,
        prev_action: np.ndarray,
        prev_reward: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        outputs = []
        for t in range(obs.shape[1]):
            extra = (prev_action[:, t], prev_reward[:, t] / scale) if with_prev else ()
            q, new_state = network.step(obs[:, t], state, *extra)
            state = np.where(mask[:, t, None, None], np.asarray(new_state), state)
            outputs.append(np.asarray(q, np.float64))
        return np.stack(outputs, axis=1), state

    if callable(getattr(network, "unroll", None)):
        return run_unroll
    if callable(getattr(network, "step", None)):
        return run_steps
    raise TypeError(
        "network must be an R2D2Network (with unroll) or a Policy (with step, e.g. "
        f"NumpyNetwork), got {type(network).__name__}"
    )


def _cut(episode: RecordedEpisode, layout: SequenceLayout, config: R2D2Config) -> list[Any]:
    """The episode's windows, as a fresh `SequenceAdder` of `layout` emits them."""
    records: list[SequenceRecord] = []
    adder = SequenceAdder(
        records.append,
        layout,
        gamma=config.gamma,
        priority_eta=config.priority_eta,
        rescaling=config.enable_rescaling,
        double_q=config.enable_double_dqn,
        normalize_rewards=config.normalize_rewards,
    )
    no_q = np.zeros(config.nb_actions)  # initial priorities are not used here
    adder.add_first(episode.observations[0])
    last = episode.length - 1
    for t in range(episode.length):
        end = t == last
        adder.add(
            int(episode.actions[t]),
            float(episode.rewards[t]),
            episode.observations[t + 1],
            end and episode.terminated,
            end and not episode.terminated,
            episode.states[t],
            no_q,
        )
    return records


def _check_episodes(episodes: tuple[Any, ...], config: R2D2Config) -> None:
    if not episodes:
        raise ValueError("episodes is empty: record some with an EpisodeRecorder first")
    for i, episode in enumerate(episodes):
        if not isinstance(episode, RecordedEpisode):
            raise TypeError(
                f"episodes[{i}] must be a RecordedEpisode, got {type(episode).__name__}"
            )
        frame_shape = episode.observations.shape[1:]
        if frame_shape != tuple(config.input_shape):
            raise ValueError(
                f"episodes[{i}] has frames of shape {frame_shape}, the config's input_shape "
                f"is {tuple(config.input_shape)}"
            )
        if episode.states.shape[2] != config.state_size:
            raise ValueError(
                f"episodes[{i}] stored states of size {episode.states.shape[2]}, the config's "
                f"lstm_units is {config.state_size}"
            )
        if episode.actions.min() < 0 or episode.actions.max() >= config.nb_actions:
            raise ValueError(f"episodes[{i}] has actions outside [0, {config.nb_actions})")


def _chunks(rows: int, row_bytes: int, max_bytes: int) -> Iterable[slice]:
    size = max(1, max_bytes // max(row_bytes, 1))
    for start in range(0, rows, size):
        yield slice(start, min(start + size, rows))


def _prev_inputs(episode: RecordedEpisode) -> tuple[np.ndarray, np.ndarray]:
    """The previous action and reward at each step `s_0 .. s_{E-1}` (-1 and 0 at `s_0`)."""
    prev_action = np.concatenate([[-1], episode.actions[:-1]]).astype(np.int32)
    prev_reward = np.concatenate([[0.0], episode.rewards[:-1]]).astype(np.float32)
    return prev_action, prev_reward


def _true_q_values(
    run: Unroller,
    config: R2D2Config,
    episodes: tuple[RecordedEpisode, ...],
    tables: list[np.ndarray],
    max_bytes: int,
) -> list[np.ndarray]:
    """Per episode `(E, nb_actions)`: the network unrolled from a zero state at `s_0` over
    the whole episode, on stacks built as the actor builds them (zero frames before
    `s_0`). Episodes of similar length run together, padded (padding keeps the state),
    in time segments that keep each call within `max_bytes` of observations."""
    stack = config.input_sequence
    obs_bytes = 4 * int(np.prod(config.network_input_shape))
    longest = max(e.length for e in episodes)
    group = max(1, max_bytes // (longest * obs_bytes))
    order = sorted(range(len(episodes)), key=lambda k: episodes[k].length)
    out: list[np.ndarray] = [np.empty(0)] * len(episodes)
    for first in range(0, len(order), group):
        members = order[first : first + group]
        steps = max(episodes[k].length for k in members)
        frame_shape = tables[members[0]].shape[1:]
        frames = np.zeros((len(members), steps + stack - 1, *frame_shape), np.float32)
        mask = np.zeros((len(members), steps), bool)
        prev_action = np.full((len(members), steps), -1, np.int32)
        prev_reward = np.zeros((len(members), steps), np.float32)
        for row, k in enumerate(members):
            length = episodes[k].length
            frames[row, stack - 1 : stack - 1 + length] = tables[k][:length]  # s_0 .. s_{E-1}
            mask[row, :length] = True
            prev_action[row, :length], prev_reward[row, :length] = _prev_inputs(episodes[k])
        state = np.zeros((len(members), 2, config.state_size), np.float32)
        segment = max(1, max_bytes // (len(members) * obs_bytes))
        q_parts = []
        for t0 in range(0, steps, segment):
            t1 = min(t0 + segment, steps)
            obs = stack_frames(frames[:, t0 : t1 + stack - 1], mask[:, t0:t1], stack)
            q, state = run(obs, state, mask[:, t0:t1], prev_action[:, t0:t1], prev_reward[:, t0:t1])
            q_parts.append(q)
        q_all = np.concatenate(q_parts, axis=1)
        for row, k in enumerate(members):
            out[k] = q_all[row, : episodes[k].length]
    return out


def _window_rows(
    windows: list[tuple[int, SequenceRecord, SequenceRecord]],
    tables: list[np.ndarray],
    config: R2D2Config,
    burnin: int,
) -> tuple[np.ndarray, ...]:
    """The unroll inputs of windows, four rows each (`VARIANTS` order): observations
    `(4N, b + L, S, *frame)`, start states, step masks (burn-in steps before the
    episode start, and all burn-in steps of the no-burn-in rows, keep the state),
    previous actions and rewards.

    Args:
        windows: Each window's episode index, and the window as cut with the burn-in and
            without it.
        tables: Per episode, its frames by id, a zero frame last (id -1).
        config: The configuration.
        burnin: b.
    """
    steps, stack = burnin + config.input_length, config.input_sequence
    zero_state = np.zeros((2, config.state_size), np.float32)
    trained = np.ones(config.input_length, bool)
    no_burn = np.zeros(burnin, bool)
    obs, states, masks, actions, rewards = [], [], [], [], []
    for episode, record, record_0 in windows:
        fields = record.fields
        table = tables[episode]
        if record_0.fields["frame_ids"][stack - 1] != fields["frame_ids"][burnin + stack - 1]:
            raise RuntimeError("the adder's windows with and without burn-in start apart")
        seq_obs = stack_frames(table[fields["frame_ids"]], fields["obs_mask"], stack)[:steps]
        burn = fields["burnin_mask"] > 0.5
        if config.enable_prev_action_reward:
            prev = (fields["prev_actions"][:steps], fields["prev_rewards"][:steps])
        else:
            prev = (np.full(steps, -1, np.int32), np.zeros(steps, np.float32))
        starts = (fields["state"], record_0.fields["state"], zero_state, zero_state)
        for state, burn_mask in zip(starts, (burn, no_burn, burn, no_burn), strict=True):
            obs.append(seq_obs)
            states.append(state)
            masks.append(np.concatenate([burn_mask, trained]))
            actions.append(prev[0])
            rewards.append(prev[1])
    return (
        np.stack(obs).astype(np.float32),
        np.stack(states).astype(np.float32),
        np.stack(masks),
        np.stack(actions).astype(np.int32),
        np.stack(rewards).astype(np.float32),
    )


def state_discrepancy(
    network: Any,
    config: R2D2Config,
    episodes: Iterable[RecordedEpisode],
    burnin: int | None = None,
    *,
    frame_dtype: Any = None,
    max_batch_bytes: int = 64 * 2**20,
) -> StateDiscrepancy:
    """The Q-value discrepancy of replayed sequences, per trained step and start.

    Each episode is cut into windows by a `SequenceAdder` of `config`'s layout with
    burn-in `burnin` (the windows start every `config.period` steps whatever the burn-in;
    a window's stored state is the actor's at step `max(q - burnin, 0)`, and the
    `stored` variant's at step `q`, as a replay without burn-in would hold). The "true"
    Q-values come from `network` unrolled over the whole episode from a zero state, on
    the frames as the replay stores them. See the module docstring.

    Args:
        network: The network to measure: an `R2D2Network` (e.g. the learner's online
            network) or a one-step `Policy` such as `NumpyNetwork`.
        config: The agent's configuration (it must have an LSTM).
        episodes: Recorded episodes (`EpisodeRecorder.episodes`).
        burnin: Burn-in steps of the `*_burnin` variants, >= 0; `config.burnin` when None.
            Pass another value to see what a longer or shorter burn-in would do.
        frame_dtype: Storage dtype of frames in the replay (None: `storage_dtype`'s
            default, float32 for values and uint8 for images).
        max_batch_bytes: Bound on the observations run through the network at once.

    Returns:
        A `StateDiscrepancy`.

    Raises:
        ValueError: Without an LSTM, with no episodes, a negative burn-in, or episodes
            that do not fit the config (naming the mismatch).
        TypeError: If an episode is not a `RecordedEpisode` or `network` has neither
            `unroll` nor `step`.
    """
    if not config.enable_lstm:
        raise ValueError("state_discrepancy needs a recurrent network (lstm_units > 0)")
    b = config.burnin if burnin is None else burnin
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 0:
        raise ValueError(f"burnin must be an int >= 0, got {burnin!r}")
    b = int(b)
    episodes = tuple(episodes)
    _check_episodes(episodes, config)
    run = _unroller(network, config)
    dtype = storage_dtype(config, frame_dtype)
    layout = SequenceLayout.from_config(config.replace(burnin=b), dtype)
    layout_0 = SequenceLayout.from_config(config.replace(burnin=0), dtype)
    length, steps = config.input_length, b + config.input_length
    obs_bytes = 4 * int(np.prod(config.network_input_shape))
    windows, tables = [], []  # (episode index, record, record_0); frames by id
    for k, episode in enumerate(episodes):
        records = _cut(episode, layout, config)
        records_0 = _cut(episode, layout_0, config)
        if len(records) != len(records_0):  # the windows do not depend on the burn-in
            raise RuntimeError("the adder cut different windows for different burn-ins")
        # The frames as the replay holds them, by the (fresh) adder's ids 0 .. E.
        frames = np.concatenate([r.frames for r in records]).astype(np.float32)
        if len(frames) != episode.length + 1:
            raise RuntimeError(f"the adder handed on {len(frames)} frames, not E + 1")
        tables.append(np.concatenate([frames, np.zeros_like(frames[:1])]))  # id -1: zeros
        windows += [(k, r, r0) for r, r0 in zip(records, records_0, strict=True)]
    q_true = _true_q_values(run, config, episodes, tables, max_batch_bytes)
    stack = config.input_sequence
    deltas = []  # (N, variants, L) per chunk, NaN at steps past the episode's end
    for chunk in _chunks(len(windows), len(VARIANTS) * steps * obs_bytes, max_batch_bytes):
        part = windows[chunk]
        q_hat = run(*_window_rows(part, tables, config, b))[0][:, b:]
        q_hat = q_hat.reshape(len(part), len(VARIANTS), length, -1)
        # The true Q-values at the trained steps: trained step 0 is the newest frame of
        # observation b, and frame ids are episode steps (a fresh adder per episode).
        truth = np.stack(
            [
                q_true[k][
                    np.minimum(
                        int(r.fields["frame_ids"][b + stack - 1]) + np.arange(length),
                        episodes[k].length - 1,
                    )
                ]
                for k, r, _ in part
            ]
        )  # (N, L, A)
        real = np.stack([r.fields["mask"] > 0.5 for _, r, _ in part])  # (N, L)
        denominator = np.maximum(np.abs(truth.max(axis=-1)), _DENOMINATOR_FLOOR)
        delta = np.linalg.norm(q_hat - truth[:, None], axis=-1) / denominator[:, None]
        deltas.append(np.where(real[:, None], delta, np.nan))
    nb_sequences = len(windows)
    all_deltas = np.concatenate(deltas)
    counts = np.sum(~np.isnan(all_deltas[:, 0]), axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN steps stay NaN
        means = np.nanmean(all_deltas, axis=0)
        medians = np.nanmedian(all_deltas, axis=0)
    result = StateDiscrepancy(
        by_step={name: means[i] for i, name in enumerate(VARIANTS)},
        median_by_step={name: medians[i] for i, name in enumerate(VARIANTS)},
        counts=counts,
        burnin=b,
        input_length=length,
        period=config.period,
        nb_sequences=nb_sequences,
        nb_episodes=len(episodes),
    )
    logger.info(
        "state discrepancy over %d sequences of %d episodes (burn-in %d): %s",
        nb_sequences,
        len(episodes),
        b,
        ", ".join(f"{k} {v:.3g}" for k, v in result.summary().items() if k.endswith("_last")),
    )
    return result
