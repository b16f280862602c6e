"""Tests of the transport-agnostic actor and learner loops
(`r2d2_agent.distributed.actor_runner`, `r2d2_agent.distributed.learner_runner`).

Everything here runs in the test process (no child process, no TensorFlow work): the
loops are driven through in-memory implementations of the transport interfaces
(`r2d2_agent.distributed.messages`). The actor and learner runs that several tests check
run once each, in module-scoped fixtures.
"""

from __future__ import annotations

import collections
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent.config import R2D2Config
from r2d2_agent.distributed.actor_runner import ActorRunner
from r2d2_agent.distributed.learner_runner import LearnerRunner
from r2d2_agent.distributed.messages import (
    Experience,
    ExperienceReceiver,
    ExperienceSender,
    WeightsPublisher,
    WeightsSubscriber,
)
from r2d2_agent.networks.numpy_net import weight_layout
from r2d2_agent.replay import SequenceRecord
from r2d2_agent.roles import R2D2Builder

SYNC_INTERVAL = 10  # env steps between weight pulls: 205 steps make a countable 21 pulls


@pytest.fixture(scope="module")
def config(make_config) -> R2D2Config:
    return make_config(actor_sync_interval=SYNC_INTERVAL)


# ------------------------------------------------------------- in-memory transport --
class ListSender(ExperienceSender):
    def __init__(self, accept: bool = True) -> None:
        self.batches: list[list] = []
        self.accept = accept

    def send(self, items, timeout=None):
        if self.accept:
            self.batches.append(list(items))
        return self.accept


class CountingSubscriber(WeightsSubscriber):
    """Has no weights for the first `empty_pulls` pulls, then a new version on each pull."""

    def __init__(self, weights, empty_pulls: int = 0) -> None:
        self._weights, self._empty, self._version, self.pulls = weights, empty_pulls, 0, 0

    @property
    def version(self) -> int:
        return self._version

    def pull_if_newer(self):
        self.pulls += 1
        if self._empty > 0:
            self._empty -= 1
            return None
        self._version += 1
        return self._weights


class ListReceiver(ExperienceReceiver):
    def __init__(self, items=()) -> None:
        self.items = collections.deque(items)
        self.calls: list[int] = []

    def receive(self, max_items, timeout):
        self.calls.append(max_items)
        return [self.items.popleft() for _ in range(min(max_items, len(self.items)))]


class ListPublisher(WeightsPublisher):
    def __init__(self) -> None:
        self.published: list = []

    def publish(self, arrays):
        self.published.append(arrays)
        return len(self.published)


class FakeLearner:
    """Duck-typed `R2D2Learner`: counts what it gets, trains instantly."""

    def __init__(self, warmup: int = 2) -> None:
        self.config = SimpleNamespace(batch_size=2)
        self.warmup, self.priorities, self.updates = warmup, [], 0

    @property
    def ready(self) -> bool:
        return len(self.priorities) >= self.warmup

    def add(self, record, stream=0) -> None:
        self.priorities.append(record.priority)

    def step(self) -> dict:
        self.updates += 1
        return {"loss": 1.0 / self.updates}

    def trace(self) -> None:
        self.traced_at = (self.updates, len(getattr(self, "publishes", ())))

    def get_published_weights(self) -> list:
        return [np.full(2, self.updates, np.float32)]


class HookRecorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name):
        if not name.startswith("on_r2d2_"):
            raise AttributeError(name)
        return lambda *args: self.calls.append(name)


def random_weights(config: R2D2Config) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(0, 0.3, shape).astype(np.float32) for _, shape in weight_layout(config)]


# ------------------------------------------------------------------- actor loop -----
@pytest.fixture(scope="module")
def actor_run(config):
    """One actor run of 205 CartPole steps; its weights arrive after 3 empty pulls."""
    env = gym.make("CartPole-v1")
    sender, subscriber = ListSender(), CountingSubscriber(random_weights(config), empty_pulls=3)
    hooks, episodes = HookRecorder(), []

    class Progress:
        steps = 0

        def on_steps(self, total_steps):
            Progress.steps = total_steps

        def on_episode(self, episode_return, episode_steps):
            episodes.append((episode_return, episode_steps))

    runner = ActorRunner(
        0,
        R2D2Builder(config),
        env,
        sender,
        subscriber,
        epsilon=0.5,
        seed=3,
        send_batch_size=3,
        progress=Progress(),
        callbacks=[hooks],
    )
    runner.run(lambda: runner.steps >= 205)
    env.close()
    return SimpleNamespace(
        runner=runner,
        items=[item for batch in sender.batches for item in batch],
        reported_steps=Progress.steps,
        hook_calls=hooks.calls,
        episodes=episodes,
    )


def test_actor_runner_runs_until_its_stop_condition(actor_run):
    assert actor_run.runner.steps == 205


def test_actor_runner_reports_its_steps_to_progress(actor_run):
    assert actor_run.reported_steps == 205


def test_actor_runner_calls_the_begin_and_end_hooks_first_and_last(actor_run):
    calls = actor_run.hook_calls
    assert (calls[0], calls[-1]) == ("on_r2d2_actor_begin", "on_r2d2_actor_end")


def test_actor_runner_calls_the_episode_end_hook_once_per_finished_episode(actor_run):
    calls = actor_run.hook_calls.count("on_r2d2_actor_episode_end")
    assert calls == actor_run.runner.episodes > 0


def test_actor_runner_counts_every_env_step_in_at_most_one_item(actor_run):
    assert 0 < sum(item.env_steps for item in actor_run.items) <= 205


def test_actor_runner_counts_the_items_it_sent(actor_run):
    assert actor_run.runner.items_sent == len(actor_run.items) > 0


def test_actor_runner_sends_sequences_of_the_config_layout(actor_run, config):
    fields = actor_run.items[0].record.fields
    assert fields["frame_ids"].shape == (config.sequence_length,)  # S = 1
    assert fields["state"].shape == (2, config.lstm_units)


def test_actor_runner_sends_every_frame_once(actor_run):
    """Frames travel with the first sequence that uses them: ids follow each other."""
    records = [item.record for item in actor_run.items]
    sent = [record.first_frame + i for record in records for i in range(len(record.frames))]
    assert sent == list(range(sent[0], sent[0] + len(sent)))
    assert all(record.frames.shape[1:] == (4,) for record in records)


def test_actor_runner_tags_its_items_with_its_stream(actor_run):
    assert {item.stream for item in actor_run.items} == {0}


def test_actor_runner_sends_finite_non_negative_priorities(actor_run):
    priority = actor_run.items[0].record.priority
    assert np.isfinite(priority) and priority >= 0


def test_actor_runner_waits_for_weights_then_pulls_every_sync_interval(actor_run):
    # the 3 empty pulls wait for the first weights; then one pull per actor_sync_interval
    assert actor_run.runner.weight_pulls == 1 + (205 - 1) // SYNC_INTERVAL


def test_actor_runner_reports_finished_episodes(actor_run):
    episodes = actor_run.episodes
    assert episodes and sum(n for _, n in episodes) <= 205


def test_actor_runner_reports_episode_returns(actor_run):
    assert all(ret == n for ret, n in actor_run.episodes)  # CartPole: reward 1 per step


def test_actor_runner_accounts_its_time_by_activity(actor_run):
    split = actor_run.runner.time
    assert set(split.seconds) == {"waiting_for_weights", "weights", "sending"}
    shares = split.shares("acting")
    parts = sum(value for name, value in shares.items() if name != "total")
    assert shares["acting"] > 0 and parts == pytest.approx(shares["total"], abs=0.005)


def test_actor_runner_stops_when_sender_refuses(config, cartpole):
    runner = ActorRunner(
        0,
        R2D2Builder(config),
        cartpole,
        ListSender(accept=False),
        CountingSubscriber(random_weights(config)),
        epsilon=1.0,
        seed=0,
        send_batch_size=1,
    )
    runner.run(lambda: False)  # would never stop by itself
    assert 0 < runner.steps < 100


def test_actor_runner_without_weights_never_acts(config, cartpole):
    subscriber = CountingSubscriber(random_weights(config), empty_pulls=10**9)
    calls = []
    runner = ActorRunner(0, R2D2Builder(config), cartpole, ListSender(), subscriber, epsilon=0.0)
    runner.run(lambda: calls.append(1) or len(calls) > 3)
    assert runner.steps == 0 and subscriber.pulls >= 3


# ----------------------------------------------------------------- learner loop -----
def items(n: int, env_steps: int = 4) -> list:
    records = [SequenceRecord({"i": np.array(i)}, 1.0, np.zeros((0, 4)), 0) for i in range(n)]
    return [Experience(record, env_steps) for record in records]


@pytest.fixture(scope="module")
def learner_run():
    """A learner run to 10 updates on 100 waiting items, publishing every 4 updates."""
    learner, publisher, hooks = FakeLearner(), ListPublisher(), HookRecorder()
    runner = LearnerRunner(
        learner,
        ListReceiver(items(100)),
        publisher,
        publish_interval=4,
        nb_trains=10,
        callbacks=[hooks],
        receive_timeout=0.0,
    )
    learner.publishes = publisher.published  # what `trace` sees
    runner.run(lambda: False)
    return SimpleNamespace(
        runner=runner, learner=learner, published=publisher.published, hook_calls=hooks.calls
    )


def test_learner_runner_traces_the_update_after_the_first_publish_before_any_update(learner_run):
    assert learner_run.learner.traced_at == (0, 1)  # (updates, weights published) then
    assert learner_run.runner.time.seconds["tracing"] > 0


def test_learner_runner_stops_at_nb_trains(learner_run):
    assert learner_run.runner.updates == learner_run.learner.updates == 10


def test_learner_runner_publishes_initially_every_interval_and_at_the_end(learner_run):
    # initial, every 4 updates (4, 8), final (10)
    assert [int(w[0][0]) for w in learner_run.published] == [0, 4, 8, 10]


class ReplacesWeightsAtTheEnd:
    """An end hook that sets weights (as `EvaluationCallback(restore_best=True)` does)."""

    def __init__(self, replace: bool) -> None:
        self.replace = replace

    def on_r2d2_learner_end(self, learner) -> None:
        if self.replace:
            learner.updates = 99  # FakeLearner's weights are its update count
            learner.weights_replaced = getattr(learner, "weights_replaced", 0) + 1


@pytest.mark.parametrize(
    ("replace", "published"), [(True, [0, 4, 8, 10, 99]), (False, [0, 4, 8, 10])]
)
def test_learner_runner_publishes_again_when_an_end_hook_replaced_the_weights(replace, published):
    publisher = ListPublisher()
    runner = LearnerRunner(
        FakeLearner(),
        ListReceiver(items(100)),
        publisher,
        publish_interval=4,
        nb_trains=10,
        callbacks=[ReplacesWeightsAtTheEnd(replace)],
        receive_timeout=0.0,
    )
    runner.run(lambda: False)
    assert [int(w[0][0]) for w in publisher.published] == published


class SlowReadPublisher(ListPublisher):
    """A publisher whose subscribers read at most once per `min_interval` seconds; it
    records the clock at each publish."""

    def __init__(self, min_interval: float, clock) -> None:
        super().__init__()
        self.min_interval, self.clock, self.times = min_interval, clock, []

    def publish(self, arrays):
        self.times.append(self.clock())
        return super().publish(arrays)


@pytest.mark.parametrize(
    ("min_interval", "published"),
    [
        (0.0, [0, 4, 8, 12, 16, 20, 24, 25]),  # every 4 updates, and the last
        (10.0, [0, 10, 20, 25]),  # due at 4, 8 -> at 10 s; due at 12 -> at 20 s; the last
    ],
)
def test_learner_runner_publishes_no_sooner_than_the_publishers_min_interval(
    min_interval, published
):
    learner = FakeLearner()
    publisher = SlowReadPublisher(min_interval, clock=lambda: float(learner.updates))
    runner = LearnerRunner(
        learner,
        ListReceiver(items(100)),
        publisher,
        publish_interval=4,
        nb_trains=25,
        receive_timeout=0.0,
        clock=publisher.clock,  # one second per update
    )
    runner.run(lambda: False)
    assert [int(w[0][0]) for w in publisher.published] == published
    assert runner.version == len(published)


def test_learner_runner_publishes_a_due_publish_while_it_waits_for_experience():
    # 6 items of 4 env steps at 4 env steps per update: after the warm-up's 2 items the
    # learner trains 4 updates (and the tolerance's 2) in its first iterations, then
    # waits; the clock counts iterations.
    iterations: list[int] = []
    learner = FakeLearner(warmup=2)
    publisher = SlowReadPublisher(30.0, clock=lambda: float(len(iterations)))
    runner = LearnerRunner(
        learner,
        ListReceiver(items(6)),
        publisher,
        publish_interval=4,
        env_steps_per_update=4,
        ratio_tolerance=2,
        receive_batch=2,
        receive_timeout=0.0,
        clock=publisher.clock,
    )
    runner.run(lambda: iterations.append(1) or len(iterations) > 100)
    assert learner.updates == 6
    # due at update 4, published at the first iteration 30 s (iterations) after the
    # first publish, with what the learner held then (6 updates); none again at the end
    assert [int(w[0][0]) for w in publisher.published] == [0, 6]
    assert publisher.times == [0.0, 30.0]


def test_learner_runner_keeps_the_last_version_and_metrics(learner_run):
    assert learner_run.runner.version == 4 and learner_run.runner.metrics == {"loss": 0.1}


def test_learner_runner_calls_the_begin_and_end_hooks(learner_run):
    calls = learner_run.hook_calls
    assert calls[0] == "on_r2d2_learner_begin" and calls[-1] == "on_r2d2_learner_end"


def test_learner_runner_accounts_its_time_by_activity(learner_run):
    seconds = learner_run.runner.time.seconds
    assert {"learning", "replay_add", "receiving", "publishing"} <= set(seconds)
    assert all(value > 0 for value in seconds.values())
    assert sum(seconds.values()) <= learner_run.runner.time.elapsed


def test_learner_runner_calls_the_train_hooks_once_per_update(learner_run):
    assert learner_run.hook_calls.count("on_r2d2_learner_train_begin") == 10


def test_learner_runner_rate_limit_waits_for_data():
    # 10 items x 4 env steps at 4 env steps per update: 10 updates earned after warm-up.
    learner = FakeLearner(warmup=2)
    runner = LearnerRunner(
        learner,
        ListReceiver(items(10)),
        ListPublisher(),
        env_steps_per_update=4,
        ratio_tolerance=2,
        receive_batch=2,
        receive_timeout=0.0,
    )
    iterations = []
    runner.run(lambda: iterations.append(1) or len(iterations) > 500)
    # warm-up consumed 2 items (8 steps) before the reference point: the other 8 items
    # earn 8 updates, and the learner may run ahead by the tolerance (2), no further.
    assert runner.sequences_received == 10
    assert runner.updates == 8 + 2


def test_learner_runner_rate_limit_pushes_back_when_behind():
    receiver = ListReceiver(items(10_000))
    runner = LearnerRunner(
        FakeLearner(),
        receiver,
        ListPublisher(),
        env_steps_per_update=1,
        ratio_tolerance=5,
        receive_batch=10,
        receive_timeout=0.0,
    )
    drifts = []

    class Progress:
        def on_learner_progress(self, r):
            drifts.append(r.rate.drift(r.updates, r.env_steps_received))

    runner.progress = Progress()
    iterations = []
    runner.run(lambda: iterations.append(1) or len(iterations) > 2000)
    # each item earns 4 updates; the learner stops receiving while >= 5 updates behind,
    # so it never falls behind by more than the tolerance plus one receive (10 x 4)
    assert min(drifts) > -(5 + 40)
    assert runner.sequences_received < 1000  # most of the data was left in the channel
    assert runner.updates > 900


def test_learner_runner_without_rate_limit_trains_every_iteration():
    runner = LearnerRunner(
        FakeLearner(),
        ListReceiver(items(50)),
        ListPublisher(),
        receive_batch=5,
        receive_timeout=0.0,
    )
    iterations = []
    runner.run(lambda: iterations.append(1) or len(iterations) > 100)
    assert runner.sequences_received == 50
    assert runner.updates == 100  # ready after the first receive, then one per iteration
