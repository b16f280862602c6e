"""`ActorRunner`: one actor's loop, written against the transport interfaces only.

The runner acts through `VectorEpisodeLoop`, observing it: it steps its
`config.envs_per_actor` envs with one batched forward pass per step, gathers each env's
adder's sequences into `Experience` items (one stream per env, so frame ids stay apart)
and sends them through an `ExperienceSender`, and pulls weights from a
`WeightsSubscriber` every `actor_sync_interval` env steps (of all its envs). It does not know
whether the learner runs in the same process, another one, or on another machine. No
TensorFlow import here (a numpy policy keeps the whole actor process free of it).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from r2d2_agent.distributed.messages import (
    Experience,
    ExperienceSender,
    Liveness,
    WeightsSubscriber,
)
from r2d2_agent.distributed.reports import TimeSplit
from r2d2_agent.math import annealed_epsilon
from r2d2_agent.networks.weights_io import split_published
from r2d2_agent.replay.adder import SequenceRecord
from r2d2_agent.roles.builder import R2D2Builder
from r2d2_agent.roles.episode_loop import EpisodeResult
from r2d2_agent.roles.hooks import MetricLogger, bind_metric_logger, call_hooks
from r2d2_agent.roles.vector_loop import VectorEpisodeLoop, VectorObserver, as_env_batch

__all__ = ["ActorProgress", "ActorRunner"]


class ActorProgress(Protocol):
    """Where an actor reports progress."""

    def on_steps(self, total_steps: int) -> None:
        """After every env step, with the actor's total."""
        ...

    def on_episode(self, episode_return: float, episode_steps: int) -> None:
        """After every finished episode."""
        ...

    # Optional: `run_env_steps() -> int`, the run's env steps over all actors (the x of
    # the actor's metrics; without it, the actor's own env steps).


class ActorRunner(VectorObserver):
    """One actor: epsilon-greedy steps in its N envs, sequences out, weights in.

    Each env carries its own recurrent state across steps (reset at each of its episode
    starts); its adder stores that state with every sequence and computes initial
    priorities. All counts (steps, episodes, the sync interval, the env steps sent with
    the experience for the learner's rate limit) are over all N envs.

    Args:
        index: The actor's index (passed to callbacks).
        builder: Makes the actor's policy, adders and actor.
        env: `config.envs_per_actor` envs: one Gymnasium env (N = 1), a sequence of N,
            a Gymnasium `VectorEnv` of N, or an `EnvBatch`; owned by the caller.
        sender: Where experience goes.
        subscriber: Where weights come from; pulled every `config.actor_sync_interval`
            env steps (of all its envs).
        epsilon: Exploration rate of each env (e.g. their Ape-X epsilon_i), or one rate
            for all; with `config.epsilon_start` each env starts there and anneals to its
            rate over `config.epsilon_anneal_steps` env steps of the actor (all its envs:
            the ramp lasts as many env steps whatever N).
        seed: Env `j` is seeded with `seed + j` (its first reset and its exploration).
        send_batch_size: Items gathered before one `send` (also sent after a step in
            which an episode ended).
        progress: Optional progress sink.
        callbacks: Callbacks whose `on_r2d2_actor_*` hooks run here.
        stream: Tells this actor's frames apart from other actors' in the learner (unique
            per actor process, a restarted actor included); env `j` sends on stream
            `stream * N + j`.
        initial_steps: Env steps this actor index took before (a restarted or resumed
            actor continues its count).
        initial_episodes: Episodes it finished before.
        liveness: Shows the backend's stall watchdog that the actor is alive: a beat per
            env step and while it waits for weights; callback hooks and sends held by
            back-pressure (the learner may be busy writing a checkpoint) run as busy.

    Raises:
        ValueError: If the envs or epsilons are not `config.envs_per_actor` many.
    """

    def __init__(
        self,
        index: int,
        builder: R2D2Builder,
        env: Any,
        sender: ExperienceSender,
        subscriber: WeightsSubscriber,
        *,
        epsilon: float | Sequence[float],
        seed: int | None = None,
        send_batch_size: int = 4,
        progress: ActorProgress | None = None,
        callbacks: Sequence[Any] = (),
        stream: int = 0,
        initial_steps: int = 0,
        initial_episodes: int = 0,
        liveness: Liveness | None = None,
    ) -> None:
        self.index = index
        self.config = builder.config
        self.env = env
        self.envs = as_env_batch(env)
        n = self.config.envs_per_actor
        if self.envs.num_envs != n:
            raise ValueError(f"actor {index} got {self.envs.num_envs} envs, but envs_per_actor={n}")
        epsilons = [float(epsilon)] * n if isinstance(epsilon, (int, float)) else list(epsilon)
        if len(epsilons) != n:
            raise ValueError(f"actor {index} got {len(epsilons)} epsilons for {n} envs")
        self.num_envs = n
        self.env_seeds = [None if seed is None else seed + j for j in range(n)]
        self.sender = sender
        self.subscriber = subscriber
        self.seed = seed
        self.send_batch_size = send_batch_size
        self.progress = progress
        self.callbacks = tuple(callbacks)
        self.stream = stream
        self.liveness = liveness or Liveness()
        adder = builder.make_vector_adder([functools.partial(self._collect, j) for j in range(n)])
        self.final_epsilons = tuple(float(e) for e in epsilons)
        self.actor = builder.make_vector_actor(
            builder.make_policy(), adder, self.final_epsilons, self.env_seeds
        )
        self._episode_env = 0  # the env whose episode ended last (for `epsilon`)
        self.steps = int(initial_steps)
        """Env steps this actor index took (over restarts and resumed runs)."""
        self.episodes = int(initial_episodes)
        """Episodes it finished (over restarts and resumed runs)."""
        self.items_sent = 0
        """Experience items the sender accepted."""
        self.weight_pulls = 0
        """Weight sets taken from the subscriber."""
        self.time = TimeSplit()
        """Where `run`'s wall time went: "sending" (including back-pressure waits),
        "weights" (pulls), "waiting_for_weights" (before the first set), the rest
        "acting" (env steps, the policy, the adder, callbacks)."""
        self._anneal_epsilon()
        self._pending: list[Experience] = []
        self._steps_unsent = 0
        self._steps_since_sync = 0
        self._refused = False  # the sender refused: the run is stopping
        self._episode_ended = False  # an env's episode ended in this step
        self._loop_start_steps = self.steps  # at the start of the episode loop's run
        self._step_start_steps = self.steps  # at the start of the current step

    @property
    def policy(self) -> Any:
        """The acting network."""
        return self.actor.policy

    @property
    def run_env_steps(self) -> int:
        """The run's env steps over all actors, as far as this actor knows (from its
        progress sink's `run_env_steps()`; its own env steps if the sink has none)."""
        total = getattr(self.progress, "run_env_steps", None)
        return max(int(total()), self.steps) if total is not None else self.steps

    def _metric_counts(self) -> tuple[int, None]:
        return self.run_env_steps, None

    @property
    def epsilon(self) -> float:
        """The exploration rate of the env whose episode ended last (env 0 before any)."""
        return self.actor.epsilons[self._episode_env]

    @property
    def epsilons(self) -> tuple[float, ...]:
        """Each env's exploration rate."""
        return self.actor.epsilons

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Acts until `should_stop()` is true (checked before every env step).

        The first env step waits for the first published weights. The end hook runs when
        the loop ends normally (stop or budget), not when it raises.
        """
        metrics = MetricLogger(self.callbacks, f"actor-{self.index}", self._metric_counts)
        bind_metric_logger(self.callbacks, metrics)
        with self.liveness.busy("on_r2d2_actor_begin"):
            call_hooks(self.callbacks, "on_r2d2_actor_begin", self.index, self)
        self.time.start()
        with self.time.measure("waiting_for_weights"):
            started = self._wait_for_first_weights(should_stop)
        if started:
            self._loop_start_steps = self.steps
            loop = VectorEpisodeLoop(self.envs, self.actor, observers=[self], seeds=self.env_seeds)
            loop.run(should_stop=should_stop)
            if not self._refused:
                self._flush()
        self.time.stop()
        with self.liveness.busy("on_r2d2_actor_end"):
            call_hooks(self.callbacks, "on_r2d2_actor_end", self.index, self)

    # VectorObserver hooks ----------------------------------------------------------

    def on_step_begin(self) -> None:
        self._step_start_steps = self.steps
        if self._steps_since_sync >= self.config.actor_sync_interval:
            with self.time.measure("weights"):
                self._pull_weights()
            self._steps_since_sync = 0

    def on_env_episode_end(self, env: int, result: EpisodeResult) -> None:
        self._count_steps(self._loop_start_steps + result.total_steps)
        self.episodes += 1
        self._anneal_epsilon()
        self._episode_env = env
        if self.progress is not None:
            self.progress.on_steps(self.steps)
            self.progress.on_episode(result.episode_return, result.episode_steps)
        if self.callbacks:
            with self.liveness.busy("on_r2d2_actor_episode_end"):
                call_hooks(self.callbacks, "on_r2d2_actor_episode_end", self.index, self, result)
        self._episode_ended = True

    def on_step_end(self) -> None:
        self._count_steps(self._step_start_steps + self.num_envs)
        self.liveness.beat()
        self._anneal_epsilon()
        if self.progress is not None:
            self.progress.on_steps(self.steps)
        # One send per step at most: at an episode end (its last sequences go at once) or
        # once a batch is gathered.
        if self._episode_ended or len(self._pending) >= self.send_batch_size:
            self._episode_ended = False
            self._flush()

    def should_stop(self) -> bool:
        return self._refused

    def _count_steps(self, total: int) -> None:
        """Brings the env step counts up to `total` (this actor's env steps so far): the
        loop reports them at episode ends (its `total_steps`) and after each step."""
        new = total - self.steps
        self.steps = total
        self._steps_unsent += new
        self._steps_since_sync += new

    def _anneal_epsilon(self) -> None:
        config = self.config
        self.actor.set_epsilons(
            [
                annealed_epsilon(
                    config.epsilon_start, final, config.epsilon_anneal_steps, self.steps
                )
                for final in self.final_epsilons
            ]
        )

    # Experience out, weights in ------------------------------------------------------

    def _collect(self, env: int, record: SequenceRecord) -> None:
        stream = self.stream * self.num_envs + env
        self._pending.append(Experience(record, self._steps_unsent, stream))
        self._steps_unsent = 0

    def _flush(self) -> None:
        """Sends the pending items; a refusal (the run is stopping) ends the loop."""
        if not self._pending:
            return
        items = self._pending
        self._pending = []
        with self.time.measure("sending"), self.liveness.busy("sending"):
            accepted = self.sender.send(items)  # held while the learner is busy
        if accepted:
            self.items_sent += len(items)
        else:
            self._refused = True

    def _pull_weights(self) -> bool:
        """Takes newer weights if any; returns whether it did."""
        weights = self.subscriber.pull_if_newer()
        if weights is None:
            return False
        acting, _ = split_published(weights, self.config.policy_average_updates > 0)
        self.actor.set_weights(acting)
        self.weight_pulls += 1
        return True

    def _wait_for_first_weights(self, should_stop: Callable[[], bool]) -> bool:
        """Waits for the first published weights; False if the run stops first."""
        while not self._pull_weights():
            self.liveness.beat()
            if self.subscriber.version > 0:  # taken before this call
                return True
            if should_stop():
                return False
            time.sleep(0.01)
        return True
