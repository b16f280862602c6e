"""The actor loop and the learner loop, written against the transport interfaces only.

`ActorRunner` talks to the system through an `ExperienceSender` (sequences out) and a
`WeightsSubscriber` (weights in); `LearnerRunner` through an `ExperienceReceiver`
(sequences in) and a `WeightsPublisher` (weights out). Neither knows whether its peers
run in the same process, in other processes (`r2d2_agent.manager`) or on other machines:
another backend (e.g. Ray) only provides those four interfaces. No TensorFlow import here.

An experience item is a plain tuple ``(sequence, priority, env_steps)``: a sequence dict
from the `SequenceAdder`, its initial priority, and the env steps the actor took since its
previous item (the learner's rate limiter counts env steps with them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from r2d2_agent.actor import Policy, R2D2Actor, make_adder
from r2d2_agent.config import R2D2Config
from r2d2_agent.transport import (
    ExperienceReceiver,
    ExperienceSender,
    WeightsPublisher,
    WeightsSubscriber,
)

ExperienceItem = tuple[dict[str, np.ndarray], float, int]
"""(sequence dict, initial priority, env steps since the actor's previous item)."""


class ActorProgress(Protocol):
    """Where an actor reports progress: its total after every step, every episode end."""

    def on_steps(self, total_steps: int) -> None: ...
    def on_episode(self, episode_return: float, episode_steps: int) -> None: ...


class LearnerProgress(Protocol):
    """Where a learner reports progress, after every loop iteration."""

    def on_learner_progress(self, runner: LearnerRunner) -> None: ...


def call_hooks(callbacks: Sequence[Any], name: str, *args: Any) -> None:
    """Calls hook `name` on every callback that has it (duck-typed `R2D2Callback`)."""
    for callback in callbacks:
        hook = getattr(callback, name, None)
        if hook is not None:
            hook(*args)


class ActorRunner:
    """One actor: ε-greedy steps in its env, sequences out, weights in.

    The actor carries its recurrent state across steps (reset at each episode start), its
    adder stores that state with every sequence and computes initial priorities.

    Args:
        index: the actor's index (passed to callbacks).
        config: the agent's configuration.
        env: a gymnasium environment (new-style `reset`/`step`), owned by the runner's caller.
        policy: the acting network (`r2d2_agent.actor.make_policy`).
        sender: where experience items go.
        subscriber: where weights come from; pulled every `config.actor_sync_interval` steps.
        epsilon: exploration rate (e.g. `apex_epsilon(index, N)`).
        seed: seeds the env's first reset, its action space and the actor's ε draws.
        observation_dtype: dtype of stored observations.
        send_batch_size: items gathered before one `sender.send` (also sent at episode end).
        progress: optional progress sink; callbacks: `on_r2d2_actor_begin/end` hooks.
    """

    def __init__(self, index: int, config: R2D2Config, env: Any, policy: Policy,
                 sender: ExperienceSender, subscriber: WeightsSubscriber, *, epsilon: float,
                 seed: int | None = None, observation_dtype: Any = np.float32,
                 send_batch_size: int = 4, progress: ActorProgress | None = None,
                 callbacks: Sequence[Any] = ()) -> None:
        if send_batch_size < 1:
            raise ValueError(f"send_batch_size must be >= 1, got {send_batch_size}")
        self.index, self.config, self.env = index, config, env
        self.sender, self.subscriber = sender, subscriber
        self.seed, self.send_batch_size = seed, send_batch_size
        self.progress, self.callbacks = progress, tuple(callbacks)
        self.actor = R2D2Actor(config, policy, make_adder(config, self._collect,
                                                          observation_dtype), epsilon, seed)
        # env steps, finished episodes, items handed to the sender, weight sets pulled
        self.steps = self.episodes = self.items_sent = self.weight_pulls = 0
        self._pending: list[ExperienceItem] = []
        self._steps_unsent = 0

    def _collect(self, sequence: dict[str, np.ndarray], priority: float) -> None:
        self._pending.append((sequence, float(priority), self._steps_unsent))
        self._steps_unsent = 0

    def _flush(self) -> bool:
        """Sends the pending items; False if the sender refused (stopping)."""
        if not self._pending:
            return True
        items, self._pending = self._pending, []
        sent = self.sender.send(items)
        self.items_sent += len(items) if sent else 0
        return sent

    def _pull_weights(self, should_stop: Callable[[], bool], wait: bool) -> bool:
        """Takes newer weights if any; with `wait`, until the first set arrives or stop."""
        while True:
            weights = self.subscriber.pull_if_newer()
            if weights is not None:
                self.actor.update(weights)
                self.weight_pulls += 1
                return True
            if not wait or self.subscriber.version > 0 or should_stop():
                return False
            time.sleep(0.01)

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Acts until `should_stop()` is true (checked before every env step).

        The first env step waits for the first published weights. The end hook runs when
        the loop ends normally (stop or budget), not when it raises.
        """
        call_hooks(self.callbacks, "on_r2d2_actor_begin", self.index, self)
        self._run(should_stop)
        call_hooks(self.callbacks, "on_r2d2_actor_end", self.index, self)

    def _run(self, should_stop: Callable[[], bool]) -> None:
        if not self._pull_weights(should_stop, wait=True):
            return
        env, actor, sync = self.env, self.actor, self.config.actor_sync_interval
        if self.seed is not None:
            env.action_space.seed(self.seed)
        observation, _ = env.reset(seed=self.seed)
        actor.observe_first(observation)
        episode_return, episode_steps, since_sync = 0.0, 0, 0
        while not should_stop():
            if since_sync >= sync:
                self._pull_weights(should_stop, wait=False)
                since_sync = 0
            action = actor.select_action()
            observation, reward, terminated, truncated, _ = env.step(action)
            actor.observe(action, float(reward), observation, terminated, truncated)
            self.steps, self._steps_unsent = self.steps + 1, self._steps_unsent + 1
            since_sync, episode_steps = since_sync + 1, episode_steps + 1
            episode_return += float(reward)
            if self.progress is not None:
                self.progress.on_steps(self.steps)
            if terminated or truncated:
                self.episodes += 1
                if self.progress is not None:
                    self.progress.on_episode(episode_return, episode_steps)
                episode_return, episode_steps = 0.0, 0
                observation, _ = env.reset()
                actor.observe_first(observation)
                if not self._flush():
                    return
            elif len(self._pending) >= self.send_batch_size and not self._flush():
                return
        self._flush()


class LearnerRunner:
    """The learner loop: drain experience into replay, train, publish weights.

    Each iteration receives up to `receive_batch` items (waiting only when it cannot train),
    adds them to replay, then does at most one update and publishes the online weights
    every `publish_interval` updates (and once before the first and after the last update).

    Rate limiting (`env_steps_per_update`, like Reverb's sample-to-insert limiter): counting
    from the moment replay first holds `config.warmup` sequences, the learner keeps
    ``updates ≈ env_steps_received / env_steps_per_update`` within ± `ratio_tolerance`
    updates. Ahead of the data it waits for experience instead of training; behind it, it
    stops receiving, so the bounded transport pushes back on the actors. With None the loop
    trains as fast as it can and takes at most `receive_batch` items per update (so very fast
    actors are still slowed down by back-pressure, never buffered without bound).

    Args:
        learner: an `R2D2Learner` (duck typing: `config`, `add`, `ready`, `step`,
            `get_weights`); receiver, publisher: experience in, weights out.
        publish_interval: learner updates between weight publications.
        receive_batch: most items taken per iteration; default 4 × `config.batch_size`.
        env_steps_per_update: target env steps per update; None disables rate limiting.
        ratio_tolerance: allowed drift from the target, in updates.
        nb_trains: stop after this many updates (None: until `should_stop`).
        receive_timeout: seconds to wait for experience when there is nothing else to do.
        callbacks: `on_r2d2_learner_*` hooks; progress: optional progress sink.
    """

    def __init__(self, learner: Any, receiver: ExperienceReceiver, publisher: WeightsPublisher,
                 *, publish_interval: int = 10, receive_batch: int | None = None,
                 env_steps_per_update: float | None = None, ratio_tolerance: float = 16.0,
                 nb_trains: int | None = None, receive_timeout: float = 0.05,
                 callbacks: Sequence[Any] = (), progress: LearnerProgress | None = None) -> None:
        if publish_interval < 1:
            raise ValueError(f"publish_interval must be >= 1, got {publish_interval}")
        if env_steps_per_update is not None and not env_steps_per_update > 0:
            raise ValueError(f"env_steps_per_update must be > 0, got {env_steps_per_update}")
        if ratio_tolerance < 1:
            raise ValueError(f"ratio_tolerance must be >= 1 update, got {ratio_tolerance}")
        self.learner, self.receiver, self.publisher = learner, receiver, publisher
        self.publish_interval, self.ratio_tolerance = publish_interval, float(ratio_tolerance)
        self.receive_batch = receive_batch or 4 * learner.config.batch_size
        self.env_steps_per_update = env_steps_per_update
        self.nb_trains, self.receive_timeout = nb_trains, receive_timeout
        self.callbacks, self.progress = tuple(callbacks), progress
        # updates done, items added to replay, env steps they account for, latest version
        self.updates = self.sequences_received = self.env_steps_received = self.version = 0
        self.metrics: dict[str, float] = {}  # of the latest update
        self._ready_steps: int | None = None  # env_steps_received when replay became ready

    def _drift(self) -> float:
        """Updates done minus updates the received env steps allow (> 0: learner ahead)."""
        if self._ready_steps is None or self.env_steps_per_update is None:
            return 0.0
        earned = (self.env_steps_received - self._ready_steps) / self.env_steps_per_update
        return self.updates - earned

    def _can_train(self) -> bool:
        if not self.learner.ready:
            return False
        if self._ready_steps is None:
            self._ready_steps = self.env_steps_received
        return self._drift() < self.ratio_tolerance

    def _should_receive(self) -> bool:
        return self._drift() > -self.ratio_tolerance

    def _add(self, items: list[ExperienceItem]) -> None:
        for sequence, priority, env_steps in items:
            self.learner.add(sequence, priority)
            self.sequences_received += 1
            self.env_steps_received += int(env_steps)

    def publish(self) -> int:
        """Publishes the learner's current weights; returns the new version."""
        self.version = self.publisher.publish(self.learner.get_weights())
        return self.version

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Trains until `should_stop()` or `nb_trains` updates.

        Weights are published before the first update and, when the loop ends normally
        (not when it raises), after the last one, before the end hook.
        """
        call_hooks(self.callbacks, "on_r2d2_learner_begin", self.learner)
        self.publish()
        while not should_stop() and (self.nb_trains is None or self.updates < self.nb_trains):
            self._iteration()
        if self.updates % self.publish_interval:
            self.publish()
        call_hooks(self.callbacks, "on_r2d2_learner_end", self.learner)

    def _iteration(self) -> None:
        can_train = self._can_train()
        if not can_train or self._should_receive():
            items = self.receiver.receive(self.receive_batch,
                                          0.0 if can_train else self.receive_timeout)
            self._add(items)
            can_train = self._can_train()
        if can_train:
            call_hooks(self.callbacks, "on_r2d2_learner_train_begin", self.learner)
            self.metrics = self.learner.step()
            self.updates += 1
            call_hooks(self.callbacks, "on_r2d2_learner_train_end", self.learner)
            if self.updates % self.publish_interval == 0:
                self.publish()
        if self.progress is not None:
            self.progress.on_learner_progress(self)


def play_episodes(config: R2D2Config, policy: Policy, env: Any, nb_episodes: int, *,
                  epsilon: float = 0.0, seed: int | None = None) -> list[float]:
    """Plays episodes without recording anything (e.g. a greedy evaluation).

    Args:
        config: the agent's configuration.
        policy: the network to act with.
        env: a gymnasium environment.
        nb_episodes: episodes to play.
        epsilon: exploration rate (0: greedy).
        seed: seed of the first reset (later resets continue the env's RNG).

    Returns:
        The episode returns.
    """
    actor, returns = R2D2Actor(config, policy, None, epsilon, seed), []
    for episode in range(nb_episodes):
        observation, _ = env.reset(seed=seed if episode == 0 else None)
        actor.observe_first(observation)
        total, done = 0.0, False
        while not done:
            action = actor.select_action()
            observation, reward, terminated, truncated, _ = env.step(action)
            actor.observe(action, float(reward), observation, terminated, truncated)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return returns
