"""`VectorEpisodeLoop`: one actor stepping N envs, one batched forward pass per step.

Where `EpisodeLoop` runs one env, this loop runs an `EnvBatch` of N envs side by side: per
step it asks the actor (`R2D2VectorActor`) for all N actions at once, steps every env,
and hands the N transitions to the actor at once. Every env keeps its own episode:
`terminated` and `truncated` stay apart per env, and an env whose episode ends is reset
alone while the others go on. Env `j` therefore plays exactly the episodes a single-env
actor with the same seed and exploration rate would (`tests/test_vector_actor.py`).

Two batches are provided: `EnvList`, N Gymnasium envs stepped one after the other in this
process, and `GymVectorEnvBatch`, a Gymnasium `VectorEnv` (`SyncVectorEnv`,
`AsyncVectorEnv`, `gymnasium.make_vec`) in any autoreset mode. Both copy observations on
entry, so an env that reuses its observation buffer cannot change frames already taken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from r2d2_agent.roles.episode_loop import (
    EpisodeResult,
    LoopTotals,
    Transition,
    limit_reached,
)

__all__ = [
    "EnvBatch",
    "EnvList",
    "GymVectorEnvBatch",
    "StepBatch",
    "VectorEpisodeLoop",
    "VectorLoopActor",
    "VectorObserver",
    "as_env_batch",
    "is_vector_env",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepBatch:
    """What one step of N envs returned, per env (observations already copied).

    Attributes:
        observations: The N observations after the step (for an env whose episode ended,
            its last observation, not the next episode's first).
        rewards: `(N,)` rewards.
        terminated: `(N,)` absorbing ends.
        truncated: `(N,)` cuts (time limits); never True together with `terminated`.
        infos: The N info dicts.
    """

    observations: list[np.ndarray]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: list[dict[str, Any]]


class EnvBatch(Protocol):
    """N envs stepped together (what `VectorEpisodeLoop` needs)."""

    num_envs: int

    def reset(self, envs: Sequence[int], seeds: Sequence[int | None]) -> list[np.ndarray]:
        """Resets the envs `envs` (all N at the start, ended ones later) and returns their
        first observations (copies); `seeds[k]` seeds env `envs[k]` (None: continue its
        randomness)."""
        ...

    def step(self, actions: np.ndarray) -> StepBatch:
        """Steps all N envs with `actions` `(N,)`."""
        ...

    def close(self) -> None:
        """Closes the envs."""
        ...


class EnvList:
    """N Gymnasium envs in this process, stepped one after the other.

    Args:
        envs: The envs (at least one), owned by this batch (`close` closes them).
    """

    def __init__(self, envs: Sequence[Any]) -> None:
        if not envs:
            raise ValueError("EnvList needs at least one env")
        self.envs = list(envs)
        self.num_envs = len(self.envs)

    def reset(self, envs: Sequence[int], seeds: Sequence[int | None]) -> list[np.ndarray]:
        """See `EnvBatch.reset`."""
        return [
            np.array(self.envs[j].reset(seed=seed)[0]) for j, seed in zip(envs, seeds, strict=True)
        ]

    def step(self, actions: np.ndarray) -> StepBatch:
        """See `EnvBatch.step`."""
        observations, rewards, terminated, truncated, infos = [], [], [], [], []
        for env, action in zip(self.envs, np.asarray(actions).tolist(), strict=True):
            obs, reward, term, trunc, info = env.step(action)  # a Python int
            observations.append(np.array(obs))
            rewards.append(reward)
            terminated.append(bool(term))
            truncated.append(bool(trunc) and not term)
            infos.append(info)
        return StepBatch(
            observations,
            np.array(rewards, np.float64),
            np.array(terminated, bool),
            np.array(truncated, bool),
            infos,
        )

    def close(self) -> None:
        """See `EnvBatch.close`."""
        for env in self.envs:
            env.close()


def is_vector_env(env: Any) -> bool:
    """Whether `env` is a Gymnasium `VectorEnv` (as `gymnasium.make_vec` returns)."""
    import gymnasium

    return isinstance(env, gymnasium.vector.VectorEnv)


class GymVectorEnvBatch:
    """A Gymnasium `VectorEnv` as an `EnvBatch`, in any of its autoreset modes.

    With `SAME_STEP` the env's own reset observation is taken (the step's last observation
    comes from `info["final_obs"]`); with `NEXT_STEP` and `DISABLED` the ended envs are
    reset at once through `reset(options={"reset_mask": ...})`, so no step is lost to an
    autoreset.

    Args:
        env: The vector env, owned by this batch (`close` closes it).
    """

    def __init__(self, env: Any) -> None:
        from gymnasium.vector import AutoresetMode

        self.env = env
        self.num_envs = int(env.num_envs)
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._same_step = AutoresetMode(mode) is AutoresetMode.SAME_STEP
        self._next_first: dict[int, np.ndarray] = {}  # SAME_STEP: reset observations

    def reset(self, envs: Sequence[int], seeds: Sequence[int | None]) -> list[np.ndarray]:
        """See `EnvBatch.reset`; a later reset of some envs takes no seed."""
        envs = list(envs)
        if sorted(envs) == list(range(self.num_envs)) and not self._next_first:
            order = np.argsort(envs)
            ordered = [seeds[k] for k in order]
            obs, _ = self.env.reset(seed=None if all(s is None for s in ordered) else ordered)
            return [np.array(obs[j]) for j in envs]
        if self._same_step:
            return [self._next_first.pop(j) for j in envs]
        mask = np.zeros(self.num_envs, bool)
        mask[envs] = True
        obs, info = self.env.reset(options={"reset_mask": mask})
        if len(obs) == self.num_envs:  # Gymnasium: all N observations
            return [np.array(obs[j]) for j in envs]
        # envpool: the reset envs' observations only, in the order of info["env_id"]
        ids = info.get("env_id") if isinstance(info, dict) else None
        if len(obs) != len(envs) or ids is None or sorted(np.asarray(ids).tolist()) != sorted(envs):
            raise ValueError(
                f"reset(options={{'reset_mask': ...}}) of envs {envs} returned {len(obs)} "
                f"observations (expected {self.num_envs}, or {len(envs)} with info['env_id'])"
            )
        row = {int(j): k for k, j in enumerate(np.asarray(ids).tolist())}
        return [np.array(obs[row[j]]) for j in envs]

    def step(self, actions: np.ndarray) -> StepBatch:
        """See `EnvBatch.step`."""
        obs, rewards, term, trunc, info = self.env.step(np.asarray(actions))
        terminated = np.asarray(term, bool).copy()
        truncated = np.asarray(trunc, bool) & ~terminated
        observations = [np.array(o) for o in obs]
        if self._same_step:
            for j in np.flatnonzero(terminated | truncated):
                self._next_first[int(j)] = observations[j]
                observations[j] = np.array(info["final_obs"][j])
        infos = [_env_info(info, j) for j in range(self.num_envs)]
        return StepBatch(
            observations, np.asarray(rewards, np.float64), terminated, truncated, infos
        )

    def close(self) -> None:
        """See `EnvBatch.close`."""
        self.env.close()


def _env_info(info: dict[str, Any], j: int) -> dict[str, Any]:
    """Env `j`'s entries of a vector env's info dict (Gymnasium's `"_key"` masks)."""
    out = {}
    for key, value in info.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = info.get(f"_{key}")
        if mask is not None and not mask[j]:
            continue
        out[key] = value[j] if isinstance(value, np.ndarray) else value
    return out


def as_env_batch(envs: Any) -> EnvBatch:
    """`envs` as an `EnvBatch`: a batch as is, a `VectorEnv` wrapped, a sequence of envs
    as an `EnvList`, one env as an `EnvList` of one."""
    if hasattr(envs, "num_envs") and hasattr(envs, "reset") and not is_vector_env(envs):
        return envs
    if is_vector_env(envs):
        return GymVectorEnvBatch(envs)
    if isinstance(envs, (list, tuple)):
        return EnvList(envs)
    return EnvList([envs])


class VectorLoopActor(Protocol):
    """What the loop needs of an actor of N envs (`R2D2VectorActor`)."""

    def observe_first(self, env: int, observation: Any) -> None:
        """Starts an episode of env `env`."""
        ...

    def select_actions(self) -> np.ndarray:
        """All N actions, from one batched forward pass."""
        ...

    def observe_all(
        self,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_observations: Sequence[Any],
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        """Records the N envs' transitions of one step (`(N,)` int64 actions, float64
        rewards, bool `terminated` and `truncated`)."""
        ...


class VectorObserver:
    """Hooks `VectorEpisodeLoop` calls; override the ones you need.

    Per step of the N envs: `on_step_begin`; the actor chooses and observes all N
    transitions; then for each env in order `on_env_step_end` and, if its episode ended,
    `on_env_episode_end`; then `on_step_end`. `on_env_step_end` is the one hook called
    for every single env step: when no observer has it, the loop does a step's
    bookkeeping with array operations and makes no per-env `Transition` (an actor
    process's runner counts its env steps at episode ends and step ends instead).
    """

    def on_step_begin(self) -> None:
        """Before the actor chooses the N actions of a step."""

    def on_env_step_end(self, env: int, episode_step: int, transition: Transition) -> None:
        """After the actor observed the N transitions of a step, for env `env`'s."""

    def on_env_episode_end(self, env: int, result: EpisodeResult) -> None:
        """After the last step of one of env `env`'s episodes (before it is reset);
        `result.total_steps` counts the run's env steps up to and including this env's
        step (envs 0 .. `env` of the current step)."""

    def on_step_end(self) -> None:
        """After all N transitions of a step were observed and ended envs reset."""

    def should_stop(self) -> bool:
        """True ends the run before the next step."""
        return False


class VectorEpisodeLoop:
    """Runs an actor in N envs, each env episode after episode, until told to stop.

    Args:
        envs: The envs (`EnvBatch`, or anything `as_env_batch` takes).
        actor: Chooses the N actions and records transitions (`VectorLoopActor`).
        observers: Hooks called in order (`VectorObserver`).
        seeds: Seed of each env's first reset of a `run` that starts the episodes (not
            one that continues them; None: unseeded); later resets continue each env's
            randomness, as `EpisodeLoop` does.
    """

    def __init__(
        self,
        envs: Any,
        actor: VectorLoopActor,
        *,
        observers: Sequence[VectorObserver] = (),
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        self.envs = as_env_batch(envs)
        n = self.envs.num_envs
        self.seeds = [None] * n if seeds is None else list(seeds)
        if len(self.seeds) != n:
            raise ValueError(f"one seed per env: {n} envs, got {len(self.seeds)} seeds")
        self.actor = actor
        self.observers = tuple(observers)
        self._returns = np.zeros(n, np.float64)  # of each env's episode so far
        self._episode_steps = np.zeros(n, np.int64)
        self._episodes = 0  # finished in this run
        self._in_flight = False  # the last run ended normally, its episodes running

    @property
    def in_flight(self) -> bool:
        """True when a run of this loop ended normally (by its limit, not an exception)
        with the N envs' episodes still running: a next run may continue them."""
        return self._in_flight

    def run(
        self,
        *,
        nb_steps: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        continue_episodes: bool = False,
    ) -> LoopTotals:
        """Steps all envs until `nb_steps` env steps (of all envs) or `should_stop()`.

        The limits are checked before each step of the N envs, so a run ends up to N-1
        env steps past `nb_steps`; an episode cut by the end of the run is not reported
        by this run.

        Args:
            nb_steps: Env steps of all N envs to take.
            should_stop: Ends the run when it returns True (checked before each step).
            continue_episodes: Go on with the episodes the previous run of this loop left
                running (`in_flight`), as if the two runs were one: no reset, each env's
                return and step count go on, and an episode cut by the previous run is
                reported by the run that ends it. The actor must still hold those
                episodes (not reset since). Without episodes in flight, the envs are
                reset as usual.

        Returns:
            The env steps taken (all envs) and the episodes finished.

        Raises:
            ValueError: If no limit is given or `nb_steps < 1`.
        """
        if nb_steps is None and should_stop is None:
            raise ValueError("give at least one limit: nb_steps or should_stop")
        if nb_steps is not None and nb_steps < 1:
            raise ValueError(f"nb_steps must be >= 1, got {nb_steps}")
        batch, actor, observers = self.envs, self.actor, self.observers
        n = batch.num_envs
        steps = 0  # env steps of this run, all envs

        def stop() -> bool:
            return limit_reached(steps, nb_steps, should_stop, self.observers)

        if stop():
            return LoopTotals(steps=0, episodes=0)
        resume = continue_episodes and self._in_flight
        self._in_flight = False  # until this run ends normally
        if not resume:
            for j, observation in enumerate(batch.reset(range(n), self.seeds)):
                actor.observe_first(j, observation)
            self._returns = np.zeros(n, np.float64)
            self._episode_steps = np.zeros(n, np.int64)
        # Without an observer of single env steps, a step's bookkeeping is array work;
        # the hooks and their order are the same either way.
        per_env = any(_overrides(observer, "on_env_step_end") for observer in observers)
        self._episodes = 0
        while not stop():
            self._notify("on_step_begin")
            actions = np.asarray(actor.select_actions(), np.int64)
            out = batch.step(actions)
            rewards = np.asarray(out.rewards, np.float64)
            terminated = np.asarray(out.terminated, bool)
            truncated = np.asarray(out.truncated, bool)
            actor.observe_all(actions, rewards, out.observations, terminated, truncated)
            self._returns += rewards
            self._episode_steps += 1
            if per_env:
                # the N envs' fields as Python scalars, converted once per step
                step_actions = actions.tolist()
                rewards, terminated, truncated = (
                    rewards.tolist(),
                    terminated.tolist(),
                    truncated.tolist(),
                )
                ended = []
                for j in range(n):
                    transition = Transition(
                        step_actions[j],
                        rewards[j],
                        out.observations[j],
                        terminated[j],
                        truncated[j],
                        out.infos[j],
                    )
                    for observer in observers:
                        observer.on_env_step_end(j, int(self._episode_steps[j]) - 1, transition)
                    if terminated[j] or truncated[j]:
                        self._end_episode(j, steps + j + 1, terminated[j])
                        ended.append(j)
            else:
                ended = np.flatnonzero(terminated | truncated).tolist()
                for j in ended:
                    self._end_episode(j, steps + j + 1, bool(terminated[j]))
            steps += n
            if ended:
                for j, observation in zip(
                    ended, batch.reset(ended, [None] * len(ended)), strict=True
                ):
                    actor.observe_first(j, observation)
            self._notify("on_step_end")
        self._in_flight = True
        return LoopTotals(steps=steps, episodes=self._episodes)

    def _end_episode(self, env: int, total_steps: int, terminated: bool) -> None:
        """Reports env `env`'s finished episode (`total_steps`: the run's env steps up to
        and including this env's step) and starts its counts afresh."""
        result = EpisodeResult(
            episode=self._episodes,
            episode_return=float(self._returns[env]),
            episode_steps=int(self._episode_steps[env]),
            total_steps=total_steps,
            terminated=terminated,
        )
        self._notify("on_env_episode_end", env, result)
        self._episodes += 1
        self._returns[env], self._episode_steps[env] = 0.0, 0

    def _notify(self, hook: str, *args: Any) -> None:
        for observer in self.observers:
            getattr(observer, hook)(*args)


def _overrides(observer: Any, hook: str) -> bool:
    """Whether `observer` has its own `hook` (not `VectorObserver`'s no-op)."""
    default = getattr(VectorObserver, hook)
    return getattr(type(observer), hook, default) is not default
