"""`EpisodeLoop`: the one loop that runs an actor in a Gymnasium environment.

Distributed actors, greedy evaluation and the single-process agent's `fit`/`test` all run
their episodes here (as Acme's `EnvironmentLoop`): reset, `observe_first`, then per step
`select_action`, `env.step`, `observe`. What differs between them is attached as
observers: sending experience and pulling weights (distributed actors), training every
`train_interval` steps (the agent), keras-rl's callback protocol (`fit`/`test`).

Gymnasium's `terminated` and `truncated` stay apart all the way to the actor, so a time
limit bootstraps and a true end of episode does not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = [
    "EpisodeLoop",
    "EpisodeObserver",
    "EpisodeResult",
    "LoopActor",
    "LoopTotals",
    "Transition",
    "limit_reached",
    "play_episodes",
]

logger = logging.getLogger(__name__)


class LoopActor(Protocol):
    """What the loop needs of an actor (Acme's `Actor` contract, without `update`)."""

    def observe_first(self, observation: Any) -> None:
        """Starts an episode at its first observation."""
        ...

    def select_action(self) -> int:
        """Chooses the action for the current observation."""
        ...

    def observe(
        self, action: int, reward: float, next_observation: Any, terminated: bool, truncated: bool
    ) -> None:
        """Records the transition that followed `select_action`."""
        ...


@dataclass(frozen=True)
class Transition:
    """One agent step as the loop saw it (after action repeats and the processor).

    Attributes:
        action: The action the actor chose.
        reward: Reward summed over the action's repeats.
        observation: The observation after the step.
        terminated: The episode reached an absorbing state.
        truncated: The episode was cut (a time limit); never True together with terminated.
        info: The env's info dict of the last repeat.
    """

    action: int
    reward: float
    observation: Any
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        """Whether the episode ended with this step."""
        return self.terminated or self.truncated


@dataclass(frozen=True)
class EpisodeResult:
    """A finished episode.

    Attributes:
        episode: Index of the episode within this `run` (0-based).
        episode_return: Sum of its rewards.
        episode_steps: Agent steps it took.
        total_steps: Agent steps of this `run` so far, this episode included.
        terminated: Whether it ended in an absorbing state (else it was truncated).
    """

    episode: int
    episode_return: float
    episode_steps: int
    total_steps: int
    terminated: bool


class EpisodeObserver:
    """Hooks the loop calls; override the ones you need (each does nothing by default).

    Observers run in the order given to the loop. An observer can end the run early by
    returning True from `should_stop` (checked before every step).
    """

    def on_episode_begin(self, episode: int) -> None:
        """Before the env is reset for episode `episode`."""

    def on_step_begin(self, episode_step: int) -> None:
        """Before the actor chooses the action of step `episode_step` of the episode."""

    def on_action_begin(self, action: int) -> None:
        """Before each `env.step` of an action (several with action repeats)."""

    def on_action_end(self, action: int) -> None:
        """After each `env.step` of an action."""

    def on_step_end(self, episode_step: int, transition: Transition) -> None:
        """After the actor observed the transition of step `episode_step`."""

    def on_episode_end(self, result: EpisodeResult) -> None:
        """After the last step of an episode."""

    def should_stop(self) -> bool:
        """True ends the run before the next step."""
        return False


@dataclass(frozen=True)
class LoopTotals:
    """What one `EpisodeLoop.run` did.

    Attributes:
        steps: Agent steps taken.
        episodes: Episodes finished.
    """

    steps: int
    episodes: int


def limit_reached(
    steps: int,
    nb_steps: int | None,
    should_stop: Callable[[], bool] | None,
    observers: Sequence[Any],
) -> bool:
    """Whether a loop that took `steps` env steps ends now: `nb_steps` reached, the
    caller's `should_stop` or any observer's `should_stop()` says so."""
    if nb_steps is not None and steps >= nb_steps:
        return True
    if should_stop is not None and should_stop():
        return True
    return any(observer.should_stop() for observer in observers)


class EpisodeLoop:
    """Runs an actor in a Gymnasium env, episode after episode.

    Args:
        env: A Gymnasium environment (`reset() -> (obs, info)`, `step(a) -> (obs, reward,
            terminated, truncated, info)`).
        actor: What chooses actions and records transitions (`LoopActor`).
        observers: Hooks called in order (`EpisodeObserver`).
        seed: Seeds the first reset of each `run` and the env's action space (used by
            random start steps); None leaves the env's randomness as it is.
        action_repeat: Env steps per agent step, rewards summed (keras-rl's
            `action_repetition`); the repeats stop early at the end of the episode.
        max_episode_steps: Agent steps after which an episode is truncated (None: only
            the env's own limits).
        processor: Optional keras-rl `Processor` (duck-typed): `process_observation` on
            every observation, `process_step` on every step, `process_action` on actions.
        start_steps: Up to this many random actions (uniformly drawn count) after each
            reset before the actor sees its first observation (keras-rl's
            `nb_max_start_steps`).
        start_step_policy: Chooses those actions from the observation (default: sample
            the action space).
    """

    def __init__(
        self,
        env: Any,
        actor: LoopActor,
        *,
        observers: Sequence[EpisodeObserver] = (),
        seed: int | None = None,
        action_repeat: int = 1,
        max_episode_steps: int | None = None,
        processor: Any = None,
        start_steps: int = 0,
        start_step_policy: Callable[[Any], int] | None = None,
    ) -> None:
        if action_repeat < 1:
            raise ValueError(f"action_repetition must be >= 1, got {action_repeat}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"nb_max_episode_steps must be >= 1, got {max_episode_steps}")
        if start_steps < 0:
            raise ValueError(f"nb_max_start_steps must be >= 0, got {start_steps}")
        self.env = env
        self.actor = actor
        self.observers = tuple(observers)
        self.seed = seed
        self.action_repeat = int(action_repeat)
        self.max_episode_steps = max_episode_steps
        self.processor = processor
        self.start_steps = int(start_steps)
        self.start_step_policy = start_step_policy

    def run(
        self,
        *,
        nb_steps: int | None = None,
        nb_episodes: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> LoopTotals:
        """Runs until `nb_steps` agent steps, `nb_episodes` episodes or `should_stop()`.

        Every limit is checked before each step, so a run can end mid-episode (the episode
        is then not reported as finished). At least one limit is needed.

        Args:
            nb_steps: Agent steps to take.
            nb_episodes: Episodes to finish.
            should_stop: Checked before every step; True ends the run.

        Returns:
            The steps taken and episodes finished.

        Raises:
            ValueError: If no limit is given or a limit is below 1.
        """
        if nb_steps is None and nb_episodes is None and should_stop is None:
            raise ValueError("give at least one limit: nb_steps, nb_episodes or should_stop")
        if nb_steps is not None and nb_steps < 1:
            raise ValueError(f"nb_steps must be >= 1, got {nb_steps}")
        if nb_episodes is not None and nb_episodes < 1:
            raise ValueError(f"nb_episodes must be >= 1, got {nb_episodes}")

        def stop() -> bool:
            return limit_reached(steps, nb_steps, should_stop, self.observers)

        if self.seed is not None:
            self.env.action_space.seed(self.seed)
        steps = 0
        episode = 0
        while (nb_episodes is None or episode < nb_episodes) and not stop():
            self._notify("on_episode_begin", episode)
            observation = self._reset(seed=self.seed if episode == 0 else None)
            self.actor.observe_first(observation)
            episode_return = 0.0
            episode_step = 0
            done = False
            while not done and not stop():
                self._notify("on_step_begin", episode_step)
                transition = self._step(episode_step)
                self.actor.observe(
                    transition.action,
                    transition.reward,
                    transition.observation,
                    transition.terminated,
                    transition.truncated,
                )
                steps += 1
                episode_return += transition.reward
                self._notify("on_step_end", episode_step, transition)
                episode_step += 1
                done = transition.done
            if done:
                result = EpisodeResult(
                    episode=episode,
                    episode_return=episode_return,
                    episode_steps=episode_step,
                    total_steps=steps,
                    terminated=transition.terminated,
                )
                self._notify("on_episode_end", result)
                episode += 1
        return LoopTotals(steps=steps, episodes=episode)

    def _notify(self, hook: str, *args: Any) -> None:
        for observer in self.observers:
            getattr(observer, hook)(*args)

    def _observation(self, observation: Any) -> Any:
        if self.processor is None:
            return observation
        return self.processor.process_observation(observation)

    def _reset(self, seed: int | None) -> Any:
        observation, _ = self.env.reset(seed=seed)
        observation = self._observation(observation)
        if not self.start_steps:
            return observation
        for _ in range(int(np.random.randint(self.start_steps))):
            if self.start_step_policy is not None:
                action = self.start_step_policy(observation)
            else:
                action = self.env.action_space.sample()
            observation, _, terminated, truncated, _ = self.env.step(action)
            observation = self._observation(observation)
            if terminated or truncated:
                logger.warning(
                    "episode ended during its %d random start steps; "
                    "consider lowering nb_max_start_steps",
                    self.start_steps,
                )
                observation = self._observation(self.env.reset()[0])
        return observation

    def _step(self, episode_step: int) -> Transition:
        """Chooses an action and steps the env `action_repeat` times (or to the end)."""
        action = self.actor.select_action()
        env_action = action
        if self.processor is not None:
            env_action = self.processor.process_action(action)
        reward = 0.0
        observation: Any = None
        terminated = False
        truncated = False
        info: dict[str, Any] = {}
        for _ in range(self.action_repeat):
            self._notify("on_action_begin", action)
            observation, step_reward, terminated, truncated, info = self.env.step(env_action)
            terminated = bool(terminated)
            truncated = bool(truncated) and not terminated
            if self.processor is not None:
                observation, step_reward, done, info = self.processor.process_step(
                    observation, step_reward, terminated or truncated, info
                )
                # A processor that ends the episode makes it a true end.
                terminated = terminated or (bool(done) and not truncated)
            self._notify("on_action_end", action)
            reward += float(step_reward)
            if terminated or truncated:
                break
        if (
            self.max_episode_steps is not None
            and episode_step + 1 >= self.max_episode_steps
            and not terminated
        ):
            truncated = True
        return Transition(action, reward, observation, terminated, truncated, dict(info))


class _ReturnRecorder(EpisodeObserver):
    """Keeps the return of every finished episode."""

    def __init__(self) -> None:
        self.returns: list[float] = []

    def on_episode_end(self, result: EpisodeResult) -> None:
        self.returns.append(result.episode_return)


def play_episodes(
    env: Any, actor: LoopActor, nb_episodes: int, seed: int | None = None
) -> list[float]:
    """Plays `nb_episodes` episodes (e.g. a greedy evaluation) and returns their returns.

    Args:
        env: A Gymnasium environment.
        actor: The actor; give it no adder so that nothing is recorded.
        nb_episodes: Episodes to play.
        seed: Seed of the first reset (later resets continue the env's randomness).
    """
    recorder = _ReturnRecorder()
    EpisodeLoop(env, actor, observers=[recorder], seed=seed).run(nb_episodes=nb_episodes)
    return recorder.returns
