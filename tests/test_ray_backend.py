"""Tests of the Ray backend: its parts without Ray running, then `R2D2Manager(backend="ray")`
on a local two-node Ray cluster made here (`ray.cluster_utils.Cluster`, loopback).

Each run starts a TensorFlow learner as a Ray actor (a few seconds on a small machine), so
runs are few and tiny, each a module-scoped fixture whose tests check one thing each. Runs
that do not need learning keep the learner in its warm-up. After every run, the cluster's
CPUs are all free again (no Ray actor of the run is left), and Ray is as the run found it.
"""

from __future__ import annotations

import functools
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import ray
import seed_recording
from interrupting import interrupt_script
from ray import cloudpickle
from ray.cluster_utils import Cluster
from seed_recording import RecordActorSeeds, read_actor_seeds

from r2d2_agent.callbacks import CheckpointCallback
from r2d2_agent.checkpoints import read_checkpoint
from r2d2_agent.distributed import R2D2Manager, R2D2ProcessError, ray_backend
from r2d2_agent.distributed.messages import Experience
from r2d2_agent.distributed.ray_backend import RayOptions, channels, workers
from r2d2_agent.distributed.ray_backend.board import (
    ActorReply,
    ActorReport,
    LearnerReport,
    PublishedWeights,
    RunBoard,
)
from r2d2_agent.distributed.ray_backend.channels import (
    Inbox,
    InboxReceiver,
    ObjectStorePublisher,
    ObjectStoreSubscriber,
)
from r2d2_agent.math import resumed_seed
from r2d2_agent.networks.weights_io import split_published

CARTPOLE = functools.partial(gym.make, "CartPole-v1")

RUN = dict(memory_capacity=200, actor_sync_interval=50)
NO_TRAINING = dict(memory_warmup=200)  # replay never fills: the learner only receives
CLUSTER_CPUS = 4  # two nodes of 2 CPUs
# Env steps of the runs whose actor is killed or loses its node after 200: more than an
# actor makes within a report interval (0.2 s) and the loss takes (removing a node takes a
# while), so that the loss lands before the end.
LOST_ACTOR_BUDGET = 5_000


# Callbacks travel to the workers by value (these modules are not importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(seed_recording)


class FailingLearnerCallback:
    def on_r2d2_learner_train_begin(self, learner):
        if learner.updates >= 3:
            raise ValueError("boom in the learner after 3 updates")


class StopAfterEpisodes:
    """Asks for the stop from actor 0 after its second episode (duck-typed callback)."""

    _stop_requester = None

    def set_stop_requester(self, requester):
        self._stop_requester = requester

    def on_r2d2_actor_episode_end(self, actor_index, runner, result):
        if actor_index == 0 and runner.episodes >= 2 and self._stop_requester is not None:
            self._stop_requester("two episodes done")


# ----------------------------------------------------------------- without a cluster


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("learner_num_cpus", -1),
        ("learner_num_gpus", float("nan")),
        ("actor_num_cpus", "1"),
        ("actor_scheduling", "PACK"),
        ("learner_on_driver_node", 1),
        ("inbox_size", 0),
        ("inbox_size", True),
        ("send_ahead", 0),
        ("send_ahead", 2.0),
        ("send_interval", -0.1),
        ("report_interval", 0),
        ("start_timeout", -5),
        ("runtime_env", ["pip"]),
        ("actor_resources", {"actor_node": 0}),
        ("init_num_cpus", 0),
    ],
)
def test_ray_options_reject_a_bad_value_naming_it(field, value):
    with pytest.raises(ValueError, match=field):
        RayOptions(**{field: value})


def test_ray_options_count_every_resource_of_the_learner_and_the_actors():
    options = RayOptions(
        learner_num_cpus=1, learner_num_gpus=1, actor_num_cpus=0.5, actor_resources={"a": 2}
    )
    assert options.resources_needed(4) == {"CPU": 3.0, "GPU": 1.0, "a": 8.0}


def test_manager_without_ray_installed_says_what_to_install(make_config, monkeypatch):
    monkeypatch.setattr(ray_backend.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"pip install \"r2d2-agent\[ray\]\""):
        R2D2Manager(CARTPOLE, make_config(), backend="ray")


def test_manager_rejects_an_unknown_backend(make_config):
    with pytest.raises(ValueError, match="'dask'"):
        R2D2Manager(CARTPOLE, make_config(), backend="dask")


def test_manager_rejects_ray_settings_for_the_multiprocessing_backend(make_config):
    with pytest.raises(ValueError, match="ray_address"):
        R2D2Manager(CARTPOLE, make_config(), ray_address="auto")


def test_board_totals_the_actors_steps_in_its_reply():
    board = RunBoard((0, 0), (0, 0))
    board.actor_report(ActorReport(0, 30, 1))
    reply = board.actor_report(ActorReport(1, 12, 0))
    assert (reply.stop, reply.total_steps) == (False, 42)


def test_board_starts_from_a_resumed_runs_counts():
    board = RunBoard((100, 50), (3, 2), updates=7, sequences=9)
    assert board.actor_counts(1) == (50, 2)
    assert board.run_counters().env_steps == 150
    assert board.snapshot().learner.updates == 7


def test_board_hands_each_episode_return_to_one_snapshot_only():
    board = RunBoard((0, 0), (0, 0))
    board.actor_report(ActorReport(1, 10, 2, (5.0, 7.0)))
    assert board.snapshot().returns == ((1, 5.0), (1, 7.0))
    assert board.snapshot().returns == ()


def test_board_stop_flag_reaches_actors_and_the_learner():
    board = RunBoard((0,), (0,))
    board.set_stop()
    assert board.actor_report(ActorReport(0, 1, 0)).stop
    assert board.learner_report(LearnerReport(1, 1, 1, 1, 0.5))


def test_board_gives_weights_only_when_newer():
    board = RunBoard((0,), (0,))
    assert board.weights_if_newer(0) is None
    board.publish(PublishedWeights(2, ["ref2"]))
    board.publish(PublishedWeights(1, ["ref1"]))  # late: never replaces a newer version
    assert board.weights_if_newer(0).refs == ["ref2"]
    assert board.weights_if_newer(2) is None


def test_board_reply_to_an_actor_carries_the_latest_weights_reference():
    board = RunBoard((0,), (0,))
    assert board.actor_report(ActorReport(0, 1, 0)).weights is None
    board.publish(PublishedWeights(3, ["ref3"]))
    assert board.actor_report(ActorReport(0, 2, 0)).weights == PublishedWeights(3, ["ref3"])
    known = ActorReport(0, 3, 0, weights_version=3)
    assert board.actor_report(known).weights is None  # nothing newer than it knows


def test_subscriber_fetches_only_a_newer_version(monkeypatch):
    fetched = []
    monkeypatch.setattr(channels.ray, "get", lambda ref: fetched.append(ref) or [np.ones(2)])
    latest = [PublishedWeights(1, ["ref1"])]
    subscriber = ObjectStoreSubscriber(lambda: latest[0])
    assert subscriber.pull_if_newer()[0].tolist() == [1.0, 1.0]
    assert subscriber.pull_if_newer() is None  # same version: no fetch
    latest[0] = PublishedWeights(2, ["ref2"])
    assert subscriber.pull_if_newer() is not None and subscriber.version == 2
    assert fetched == ["ref1", "ref2"]


def _pull_until_taken(subscriber, seconds: float = 5.0):
    """Pulls until the background fetch hands over the arrays."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        arrays = subscriber.pull_if_newer()
        if arrays is not None:
            return arrays
        time.sleep(0.001)
    raise AssertionError("the background fetch handed nothing over")


def test_background_subscriber_keeps_acting_while_it_fetches(monkeypatch):
    release = threading.Event()
    fetched = []

    def slow_get(ref):
        fetched.append(ref)
        release.wait(5.0)
        return [np.full(2, float(ref[-1]))]

    monkeypatch.setattr(channels.ray, "get", slow_get)
    latest = [PublishedWeights(1, ["ref1"])]
    subscriber = ObjectStoreSubscriber(lambda: latest[0], background=True)
    assert subscriber.pull_if_newer() is None  # the fetch started; the call returned
    assert subscriber.pull_if_newer() is None  # still fetching: no second fetch
    assert subscriber.version == 0
    release.set()
    assert _pull_until_taken(subscriber)[0].tolist() == [1.0, 1.0]
    assert subscriber.version == 1 and fetched == ["ref1"]
    assert subscriber.pull_if_newer() is None  # nothing newer: no fetch
    subscriber.close()


def test_background_subscriber_takes_a_finished_fetch_then_fetches_the_newer_one(
    monkeypatch,
):
    release = threading.Event()
    monkeypatch.setattr(
        channels.ray, "get", lambda ref: release.wait(5.0) and [np.full(1, float(ref[-1]))]
    )
    latest = [PublishedWeights(1, ["ref1"])]
    subscriber = ObjectStoreSubscriber(lambda: latest[0], background=True)
    assert subscriber.pull_if_newer() is None
    latest[0] = PublishedWeights(2, ["ref2"])  # published while version 1 is fetched
    release.set()
    assert _pull_until_taken(subscriber)[0].tolist() == [1.0]
    assert subscriber.version == 1
    assert _pull_until_taken(subscriber)[0].tolist() == [2.0]
    assert subscriber.version == 2
    subscriber.close()


def test_background_subscriber_raises_a_failed_fetch_in_the_pulling_call(monkeypatch):
    def failing_get(ref):
        raise RuntimeError(f"object {ref} lost")

    monkeypatch.setattr(channels.ray, "get", failing_get)
    subscriber = ObjectStoreSubscriber(lambda: PublishedWeights(1, ["ref1"]), background=True)
    assert subscriber.pull_if_newer() is None
    with pytest.raises(RuntimeError, match="object ref1 lost"):
        _pull_until_taken(subscriber)
    assert subscriber.version == 0
    subscriber.close()


class _Remote:
    """A Ray method handle's stand-in: records `remote` calls."""

    def __init__(self) -> None:
        self.calls: list = []

    def remote(self, *args):
        self.calls.append(args)


def test_publisher_puts_each_publish_once_and_registers_its_reference(monkeypatch):
    puts = []
    monkeypatch.setattr(channels.ray, "put", lambda value: puts.append(value) or f"ref{len(puts)}")
    board = SimpleNamespace(publish=_Remote())
    publisher = ObjectStorePublisher(board, min_interval=0.2)
    assert publisher.publish([np.ones(2)]) == 1 and publisher.publish([np.zeros(2)]) == 2
    assert [p[0].tolist() for p in puts] == [[1.0, 1.0], [0.0, 0.0]]
    assert board.publish.calls == [
        (PublishedWeights(1, ["ref1"]),),
        (PublishedWeights(2, ["ref2"]),),
    ]
    # actors read new weights once per report: the learner's loop publishes no more often
    assert publisher.min_interval == 0.2 and ObjectStorePublisher(board).min_interval == 0.0


def test_board_passes_stop_requests_to_the_driver_once():
    board = RunBoard((0,), (0,))
    board.request_stop("actor 0: enough")
    assert board.snapshot().stop_requests == ("actor 0: enough",)
    assert board.snapshot().stop_requests == ()


def test_board_tells_the_driver_each_workers_silence_and_who_is_busy():
    board = RunBoard((0,), (0,))
    board.actor_report(ActorReport(0, 5, 0))
    board.set_busy("learner", True)  # its keep-alive thread then sends heartbeats
    board.heartbeat("learner")
    snap = board.snapshot()
    silences = dict(snap.silent_for)
    assert set(silences) == {"actor 0", "learner"}
    assert all(0.0 <= seconds < 60.0 for seconds in silences.values())
    assert snap.busy == ("learner",)
    board.set_busy("learner", False)
    assert board.snapshot().busy == ()


def _items(n: int, start: int = 0) -> list[Experience]:
    return [Experience(record=None, env_steps=i, stream=0) for i in range(start, start + n)]


def test_inbox_receiver_never_returns_more_than_asked_and_keeps_the_rest():
    inbox = Inbox(4)
    inbox.put(_items(3))
    inbox.put(_items(3, start=3))
    receiver = InboxReceiver(inbox)
    first = receiver.receive(max_items=4, timeout=0.0)
    second = receiver.receive(max_items=4, timeout=0.0)
    assert [i.env_steps for i in first] == [0, 1, 2, 3]
    assert [i.env_steps for i in second] == [4, 5]


def test_inbox_receiver_returns_nothing_after_its_timeout():
    assert InboxReceiver(Inbox(2)).receive(max_items=8, timeout=0.05) == []


def test_full_inbox_holds_a_put_until_the_learner_takes_a_batch():
    inbox = Inbox(1)
    inbox.put(_items(1))
    done = queue.Queue()
    threading.Thread(target=lambda: done.put(inbox.put(_items(1, 1))), daemon=True).start()
    with pytest.raises(queue.Empty):
        done.get(timeout=0.3)  # back-pressure: the second put waits
    inbox.get(0.0)
    assert done.get(timeout=2.0) is True


def test_inbox_counts_sequences_not_calls():
    inbox = Inbox(4)
    assert inbox.put(_items(3)) is True
    assert inbox.put(_items(3, start=3)) is True  # room left: taken whole
    done = queue.Queue()
    threading.Thread(target=lambda: done.put(inbox.put(_items(1, 6))), daemon=True).start()
    with pytest.raises(queue.Empty):
        done.get(timeout=0.3)  # 6 sequences held, capacity 4: the put waits
    assert [i.env_steps for i in inbox.get(0.0)] == [0, 1, 2]  # 3 held: room again
    assert done.get(timeout=2.0) is True


def test_closed_inbox_refuses_a_waiting_put():
    inbox = Inbox(1)
    inbox.put(_items(1))
    done = queue.Queue()
    threading.Thread(target=lambda: done.put(inbox.put(_items(1))), daemon=True).start()
    inbox.close()
    assert done.get(timeout=2.0) is False


class _Call:
    """A fake `put_experience` call: done once the fake learner answers it."""

    def __init__(self, payload: bytes) -> None:
        self.items = pickle.loads(payload)
        self.answer: bool | None = None


class _FakeLearner:
    """A learner handle whose calls stay in flight until `answer`; keeps every call."""

    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self.put_experience = SimpleNamespace(remote=self._remote)

    def _remote(self, payload: bytes) -> _Call:
        self.calls.append(_Call(payload))
        return self.calls[-1]

    def answer(self, accepted: bool = True) -> None:
        for call in self.calls:
            if call.answer is None:
                call.answer = accepted

    def received(self) -> list[int]:
        return [i.env_steps for c in self.calls if c.answer for i in c.items]


def _wait_answered(refs, timeout=None):
    """`ray.wait` over fake calls: (answered, unanswered)."""
    return [r for r in refs if r.answer is not None], [r for r in refs if r.answer is None]


def _fake_ray(monkeypatch, module) -> None:
    """`ray.wait` and `ray.get` of `module` over `_Call`s (a get of an unanswered call
    times out after a short sleep)."""

    def get(ref, timeout=None):
        if ref.answer is None:
            time.sleep(0.01)
            raise channels.GetTimeoutError()
        return ref.answer

    monkeypatch.setattr(module, "ray", SimpleNamespace(wait=_wait_answered, get=get))


def test_sender_keeps_at_most_its_bound_while_the_learner_takes_nothing(monkeypatch):
    _fake_ray(monkeypatch, channels)
    learner = _FakeLearner()
    sender = channels.ActorCallSender(learner, lambda: False, max_pending=6)
    accepted = 0
    with pytest.raises(TimeoutError):
        for start in range(0, 200, 2):  # far more than the bound
            sender.send(_items(2, start), timeout=0.05)
            accepted += 2
    # 2 in the call in flight, then 2 + 2 kept; the next 2 reach the bound of 6: wait.
    assert accepted == 6
    assert len(learner.calls) == 1
    learner.answer()  # the learner takes the call: the actor goes on, in order
    assert sender.send(_items(2, 6)) is True  # the 2 that timed out, sent again
    assert sender.flush() is True
    learner.answer()
    assert learner.received() == list(range(8))


def test_sender_gathers_batches_between_calls_and_keeps_their_order(monkeypatch):
    _fake_ray(monkeypatch, channels)
    learner = _FakeLearner()
    sender = channels.ActorCallSender(learner, lambda: False, max_pending=100, min_interval=60)
    for start in range(0, 10, 2):
        assert sender.send(_items(2, start)) is True
        learner.answer()
    assert [len(c.items) for c in learner.calls] == [2]  # the rest wait for the interval
    assert sender.flush() is True
    learner.answer()
    assert [len(c.items) for c in learner.calls] == [2, 8]
    assert learner.received() == list(range(10))


def test_sender_refuses_once_the_learner_refused_or_the_run_stops(monkeypatch):
    _fake_ray(monkeypatch, channels)
    learner = _FakeLearner()
    sender = channels.ActorCallSender(learner, lambda: False, max_pending=1)
    assert sender.send(_items(1)) is True
    learner.answer(accepted=False)  # the learner stopped
    assert sender.send(_items(1, 1)) is False
    assert sender.send(_items(1, 2)) is False
    stopping = channels.ActorCallSender(_FakeLearner(), lambda: True, max_pending=1)
    assert stopping.send(_items(1)) is True
    assert stopping.send(_items(1, 1)) is False  # waits for a call, but the run stops


class _FakeBoard:
    """Records the pulse's calls to the board."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.set_busy = SimpleNamespace(remote=lambda who, busy: self.calls.append((who, busy)))
        self.heartbeat = SimpleNamespace(remote=lambda who: self.calls.append((who, "beat")))


def test_pulse_tells_the_board_of_a_lasting_busy_section_and_its_end():
    board = _FakeBoard()
    pulse = workers._BoardPulse(board, "actor 0", interval=0.2, announce_after=0.05)
    with pulse.busy("short"):
        pass
    with pulse.busy("long"):
        deadline = time.monotonic() + 10
        while ("actor 0", "beat") not in board.calls and time.monotonic() < deadline:
            time.sleep(0.05)
    assert board.calls[0] == ("actor 0", True)
    assert ("actor 0", "beat") in board.calls
    assert board.calls[-1] == ("actor 0", False)
    assert board.calls.count(("actor 0", True)) == board.calls.count(("actor 0", False))


def test_actor_reporter_sends_one_report_at_a_time_and_counts_what_the_reply_answers(
    monkeypatch,
):
    replies = []

    class Board:
        def __init__(self):
            self.actor_report = SimpleNamespace(remote=self._report)

        def _report(self, report):
            replies.append(_Call(pickle.dumps([])))
            replies[-1].report = report
            return replies[-1]

    _fake_ray(monkeypatch, workers)
    reporter = workers._ActorBoardReporter(Board(), 0, 0, 0, nb_steps=None, interval=0.0)
    reporter.on_steps(10)
    assert reporter.stopped() is False and len(replies) == 1  # sent, not waited for
    reporter.on_steps(20)
    assert reporter.stopped() is False and len(replies) == 1  # the first is not answered
    replies[0].answer = ActorReply(stop=False, total_steps=10)
    reporter.on_steps(30)
    assert reporter.stopped() is False and len(replies) == 2  # taken, and a new one sent
    assert replies[1].report.steps == 30
    assert reporter.run_env_steps() == 10 + 30 - 10  # the reply counts steps up to 10
    replies[1].answer = ActorReply(stop=True, total_steps=40)
    assert reporter.stopped() is True


@pytest.mark.parametrize(
    ("steps", "leases", "wanted", "budget", "lease"),
    [
        # the budget's free steps are leased as asked
        ((0, 0), (0, 0), 80, 100, 80),
        # only what the other actor's lease leaves
        ((0, 0), (0, 80), 80, 100, 20),
        # the other actor's steps past its lease hold the budget too
        ((0, 90), (0, 80), 80, 100, 10),
        # nothing free: the lease stays where it is
        ((30, 50), (50, 50), 80, 100, 50),
        # a lease never shrinks, even asked for less than it holds
        ((10, 0), (60, 0), 5, 100, 60),
        # the actor's own steps past its lease count: 40 + 30 asked, 20 free
        ((40, 40), (20, 40), 30, 100, 60),
    ],
)
def test_board_leases_no_more_than_the_budget_holds(steps, leases, wanted, budget, lease):
    board = RunBoard((0, 0), (0, 0), nb_steps=budget)
    board._steps, board._leases = list(steps), list(leases)
    reply = board.actor_report(ActorReport(0, steps[0], 0, wanted=wanted))
    assert reply.lease == lease


def test_board_leases_nothing_without_a_budget():
    board = RunBoard((0,), (0,))
    assert board.actor_report(ActorReport(0, 5, 0, wanted=100)).lease is None


def test_board_counts_a_resumed_runs_steps_as_held():
    board = RunBoard((60, 30), (0, 0), nb_steps=100)
    assert board.actor_report(ActorReport(0, 60, 0, wanted=50)).lease == 70


class _LaggingBoard:
    """A `RunBoard` behind a fake Ray handle whose replies arrive late: a report reaches
    the board only when `deliver` takes it (or an actor waits for its reply)."""

    def __init__(self, board: RunBoard) -> None:
        self.board = board
        self.pending: list[_Call] = []
        self.actor_report = SimpleNamespace(remote=self._report)

    def _report(self, report):
        call = _Call(pickle.dumps([]))
        call.report = report
        self.pending.append(call)
        return call

    def deliver(self, call) -> None:
        self.pending.remove(call)
        call.answer = self.board.actor_report(call.report)


def _lagging_ray(monkeypatch, handle: _LaggingBoard) -> None:
    def get(ref, timeout=None):
        if ref.answer is None:  # the actor waits: its report reaches the board now
            handle.deliver(ref)
        return ref.answer

    monkeypatch.setattr(workers, "ray", SimpleNamespace(wait=_wait_answered, get=get))


@pytest.mark.parametrize(("nb_actors", "step_size"), [(1, 1), (3, 1), (4, 8)])
@pytest.mark.parametrize("seed", [0, 1])
def test_actors_on_leases_reach_the_budget_and_pass_it_by_less_than_a_step_each(
    monkeypatch, nb_actors, step_size, seed
):
    """Actors stepping at uneven rates, their reports delivered at random delays (up to
    many intervals late): the run's env steps end at the budget, past it by less than
    one actor step per actor."""
    rng = np.random.default_rng(seed)
    budget = 2_000
    handle = _LaggingBoard(RunBoard((0,) * nb_actors, (0,) * nb_actors, nb_steps=budget))
    _lagging_ray(monkeypatch, handle)
    clock = [0.0]
    monkeypatch.setattr(workers.time, "monotonic", lambda: clock[0])
    reporters = [
        workers._ActorBoardReporter(
            handle, i, 0, 0, nb_steps=budget, interval=0.01, step_size=step_size
        )
        for i in range(nb_actors)
    ]
    steps = [0] * nb_actors
    running = set(range(nb_actors))
    while running and clock[0] < 100.0:  # 100,000 ticks: far more than the run takes
        clock[0] += 0.001
        for i in sorted(running):
            if rng.random() < 0.3 * (i + 1) / nb_actors:  # actor i steps at its own rate
                if reporters[i].should_stop():
                    running.discard(i)
                    continue
                steps[i] += step_size
                reporters[i].on_steps(steps[i])
        for call in list(handle.pending):
            if rng.random() < 0.05:  # a reply takes 20 ticks on average
                handle.deliver(call)
    assert not running
    assert budget <= sum(steps) <= budget + nb_actors * (step_size - 1)


def test_actor_reporter_asks_for_three_intervals_at_its_rate(monkeypatch):
    handle = _LaggingBoard(RunBoard((0,), (0,), nb_steps=100_000))
    _lagging_ray(monkeypatch, handle)
    clock = [0.0]
    monkeypatch.setattr(workers.time, "monotonic", lambda: clock[0])
    reporter = workers._ActorBoardReporter(handle, 0, 0, 0, nb_steps=100_000, interval=0.25)
    assert reporter.should_stop() is False  # no lease yet: it asked and waited
    assert handle.board._leases == [16]  # at least 16 steps before a rate is known
    clock[0] += 0.25
    reporter.on_steps(100)  # 400 env steps/s: past its lease, so it asks and waits
    assert reporter.should_stop() is False
    assert handle.board._leases == [100 + 3 * 0.25 * 400]


def test_actor_reporter_stops_when_the_others_hold_the_rest_of_the_budget(monkeypatch):
    handle = _LaggingBoard(RunBoard((0, 0), (0, 0), nb_steps=20))
    _lagging_ray(monkeypatch, handle)
    first, second = (
        workers._ActorBoardReporter(handle, i, 0, 0, nb_steps=20, interval=10.0) for i in range(2)
    )
    assert first.should_stop() is False  # leased 16 of the 20
    assert second.should_stop() is False  # the 4 left
    second.on_steps(4)
    assert second.should_stop() is True  # the first holds the rest
    first.on_steps(15)
    assert first.should_stop() is False
    first.on_steps(16)
    assert first.should_stop() is True


# ----------------------------------------------------------------- a local cluster


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of 2 CPUs each on loopback; Ray disconnected and stopped after."""
    assert not ray.is_initialized()
    made = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "object_store_memory": 150 * 2**20,
            # Ray's dashboard runs a multiprocessing forkserver whose socket folder
            # (/tmp/pymp-*) is left behind when the cluster is torn down.
            "include_dashboard": False,
        },
    )
    made.add_node(num_cpus=2, object_store_memory=150 * 2**20)
    made.wait_for_nodes()
    yield made
    if ray.is_initialized():
        ray.shutdown()
    made.shutdown()


def _free_cpus_come_back() -> bool:
    """Whether every CPU of the cluster is free again within 20 s (the run's Ray actors
    are gone)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0.0) >= CLUSTER_CPUS:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def run_config(make_config):
    return lambda **overrides: make_config(**{**RUN, **overrides})


def _spread_run(cluster, config):
    """Two actors and a learner on the cluster, Ray initialised by the caller."""
    ray.init(address=cluster.address)
    try:
        manager = R2D2Manager(CARTPOLE, config, actor_num=2, backend="ray", progress=False)
        snapshots = []
        result = manager.train(nb_steps=1500, on_progress=snapshots.append)
        agent = manager.create_test_agent()
        q_values = agent.compute_q_values(np.zeros(4, np.float32))
        return SimpleNamespace(
            result=result,
            latest_weights=manager.latest_weights(),
            published=manager._final_weights,  # the learner's last publication, as it is
            snapshots=snapshots,
            q_values=q_values,
            still_initialized=ray.is_initialized(),
            cpus_freed=_free_cpus_come_back(),
            nodes={n["NodeID"] for n in ray.nodes() if n["Alive"]},
            driver_node=ray.get_runtime_context().get_node_id(),
        )
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def spread_run(cluster, run_config):
    # With the greedy policy's average: two weight sets published, the actors take the first.
    return _spread_run(cluster, run_config(memory_warmup=20, policy_average_updates=5))


def test_ray_run_stops_for_nb_steps(spread_run):
    result = spread_run.result
    assert result.stop_reason == "nb_steps" and result.env_steps >= 1500


def test_ray_run_takes_exactly_nb_steps_with_one_env_per_actor(spread_run):
    assert spread_run.result.env_steps == 1500  # the board leases no more than the budget


def test_ray_per_actor_env_steps_sum_to_the_total(spread_run):
    result = spread_run.result
    assert sum(result.actor_env_steps) == result.env_steps and min(result.actor_env_steps) > 0


def test_ray_learner_trained_and_published(spread_run):
    result = spread_run.result
    assert result.learner_updates > 0 and result.weights_version > 1


def test_ray_latest_weights_are_the_policy_average(spread_run):
    online, policy = split_published(spread_run.published, averaged=True)
    assert len(online) == len(policy) == len(spread_run.latest_weights)
    assert all(np.array_equal(a, b) for a, b in zip(policy, spread_run.latest_weights, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(online, policy, strict=True))


def test_ray_actors_sit_on_both_nodes(spread_run):
    placed = {info["node_id"] for info in spread_run.result.actor_info}
    assert placed == spread_run.nodes and len(placed) == 2


def test_ray_learner_reports_where_its_time_went(spread_run):
    assert spread_run.result.learner_info["seconds"]["learning"] > 0


def test_ray_learner_sits_on_the_drivers_node(spread_run):
    assert spread_run.result.learner_info["node_id"] == spread_run.driver_node


def test_ray_actors_report_episode_returns(spread_run):
    assert all(len(returns) > 0 for returns in spread_run.result.episode_returns)


def test_ray_numpy_actors_never_load_tensorflow(spread_run):
    assert [i["tensorflow_loaded"] for i in spread_run.result.actor_info] == [False, False]


def test_ray_progress_reaches_the_caller(spread_run):
    steps = [p.env_steps for p in spread_run.snapshots]
    assert steps == sorted(steps) and steps[-1] > 0
    assert all(p.learner_pid is not None for p in spread_run.snapshots[-3:])


def test_ray_test_agent_holds_the_learners_weights(spread_run):
    assert spread_run.q_values.shape == (2,) and np.all(np.isfinite(spread_run.q_values))


def test_ray_initialised_by_the_user_stays_initialised(spread_run):
    assert spread_run.still_initialized


def test_ray_run_leaves_no_ray_actor_behind(spread_run):
    assert spread_run.cpus_freed


def _killed_actor(cluster, config):
    """One actor, killed with SIGKILL after 200 env steps; the manager connects itself."""
    manager = R2D2Manager(
        CARTPOLE,
        config,
        actor_num=1,
        backend="ray",
        ray_address=cluster.address,
        progress=False,
    )
    killed = {}

    def on_progress(p):
        pid = p.actor_pids[0]
        if not killed and p.env_steps >= 200 and pid is not None:
            os.kill(pid, signal.SIGKILL)
            killed["at"] = p.env_steps

    result = manager.train(nb_steps=LOST_ACTOR_BUDGET, max_seconds=240, on_progress=on_progress)
    return SimpleNamespace(result=result, killed=killed, left_initialized=ray.is_initialized())


@pytest.fixture(scope="module")
def killed_actor(cluster, run_config):
    return _killed_actor(cluster, run_config(**NO_TRAINING))


def test_ray_killed_actor_is_restarted(killed_actor):
    assert killed_actor.killed and killed_actor.result.actor_restarts == [1]


def test_ray_restarted_actor_finishes_the_run(killed_actor):
    result = killed_actor.result
    assert result.stop_reason == "nb_steps" and result.env_steps >= LOST_ACTOR_BUDGET


def test_ray_started_by_the_manager_is_shut_down_after(killed_actor):
    assert not killed_actor.left_initialized


def _failing(cluster, config, *, kill_learner: bool):
    """A run whose learner raises (a callback) or is killed; returns the error and time."""
    ray.init(address=cluster.address)
    try:
        callbacks = [] if kill_learner else [FailingLearnerCallback()]
        manager = R2D2Manager(
            CARTPOLE, config, actor_num=1, backend="ray", callbacks=callbacks, progress=False
        )
        killed = {}

        def on_progress(p):
            if kill_learner and not killed and p.env_steps >= 100 and p.learner_pid:
                os.kill(p.learner_pid, signal.SIGKILL)
                killed["at"] = time.monotonic()

        start = time.monotonic()
        with pytest.raises(R2D2ProcessError) as error:
            manager.train(max_seconds=240, on_progress=on_progress)
        return SimpleNamespace(
            error=error.value,
            seconds=time.monotonic() - killed.get("at", start),
            cpus_freed=_free_cpus_come_back(),
        )
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def learner_exception(cluster, run_config):
    return _failing(cluster, run_config(memory_warmup=20), kill_learner=False)


def test_ray_learner_exception_reraises_with_its_traceback(learner_exception):
    error = learner_exception.error
    assert error.role == "learner"
    assert "boom in the learner after 3 updates" in str(error)
    assert "in on_r2d2_learner_train_begin" in error.child_traceback  # the remote frame
    assert "\x1b[" not in str(error)  # no terminal colour codes


def test_ray_learner_exception_leaves_no_ray_actor_behind(learner_exception):
    assert learner_exception.cpus_freed


@pytest.fixture(scope="module")
def killed_learner(cluster, run_config):
    return _failing(cluster, run_config(**NO_TRAINING), kill_learner=True)


def test_ray_killed_learner_stops_the_run_with_a_clear_error(killed_learner):
    error = killed_learner.error
    assert error.role == "learner" and "was lost" in str(error)


def test_ray_killed_learner_is_detected_within_ten_seconds(killed_learner):
    assert killed_learner.seconds < 10


def test_ray_killed_learner_leaves_no_ray_actor_behind(killed_learner):
    assert killed_learner.cpus_freed


class SlowUpdates:
    """Makes every learner update take 50 ms at least (a slow learner)."""

    def on_r2d2_learner_train_begin(self, learner):
        time.sleep(0.05)


SLOW_RUN_TRAINS = 60
SLOW_RUN_OPTIONS = RayOptions(inbox_size=2, send_ahead=2)


@pytest.fixture(scope="module")
def slow_learner_run(cluster, run_config):
    """Two actors beside a rate-limited learner slower than they are (tiny bounds)."""
    ray.init(address=cluster.address)
    try:
        config = run_config(memory_warmup=20)
        manager = R2D2Manager(
            CARTPOLE,
            config,
            actor_num=2,
            backend="ray",
            ray_options=SLOW_RUN_OPTIONS,
            callbacks=[SlowUpdates()],
            progress=False,
        )
        result = manager.train(nb_trains=SLOW_RUN_TRAINS, max_seconds=240)
        return SimpleNamespace(result=result, config=config)
    finally:
        ray.shutdown()


def test_ray_rate_limit_holds_actors_back_behind_a_slow_learner(slow_learner_run):
    result, config = slow_learner_run.result, slow_learner_run.config
    assert result.learner_updates >= SLOW_RUN_TRAINS
    # Earned by the updates (and the ratio's tolerance of 16), plus what the bounds let
    # through unconsumed: the inbox, each actor's call in flight and kept batches, the
    # learner's last receive (4 x batch_size), and the warm-up before the limit starts;
    # each sequence accounts for at most `input_length` new env steps here. Unbounded,
    # two numpy actors would make thousands of env steps in the learner's 3 s or more.
    send_batch = 4
    sequences = (
        SLOW_RUN_OPTIONS.inbox_size * send_batch
        + 2 * (2 * SLOW_RUN_OPTIONS.send_ahead * send_batch + 1)
        + 4 * config.batch_size
        + config.memory_warmup
    )
    earned = (result.learner_updates + 16) * config.train_interval
    assert result.env_steps <= earned + sequences * config.input_length + 2 * 50


RAY_STALL_TIMEOUT = 5.0


class SlowLearnerBegin:
    """Long legitimate work in a learner hook (as a checkpoint writing a replay)."""

    def on_r2d2_learner_begin(self, learner):
        time.sleep(1.5 * RAY_STALL_TIMEOUT)


def _stalled_learner(cluster, config):
    """One actor; the learner spends 1.5 stall timeouts in its begin hook, then is frozen
    with SIGSTOP once weights were published and 100 env steps taken."""
    ray.init(address=cluster.address)
    frozen: dict = {}
    try:
        manager = R2D2Manager(
            CARTPOLE,
            config,
            actor_num=1,
            backend="ray",
            callbacks=[SlowLearnerBegin()],
            stall_timeout=RAY_STALL_TIMEOUT,
            progress=False,
        )

        def on_progress(p):
            if not frozen and p.weights_version >= 1 and p.env_steps >= 100 and p.learner_pid:
                os.kill(p.learner_pid, signal.SIGSTOP)
                frozen.update(pid=p.learner_pid, at=time.monotonic())

        with pytest.raises(R2D2ProcessError) as error:
            manager.train(max_seconds=240, on_progress=on_progress)
        return SimpleNamespace(
            error=error.value,
            frozen=frozen,
            seconds=time.monotonic() - frozen.get("at", 0.0),
            cpus_freed=_free_cpus_come_back(),
            learner_alive=bool(frozen) and os.path.exists(f"/proc/{frozen['pid']}"),
        )
    finally:
        if frozen and os.path.exists(f"/proc/{frozen['pid']}"):  # a failed test: no stopped
            os.kill(frozen["pid"], signal.SIGKILL)  # process stays behind
        ray.shutdown()


@pytest.fixture(scope="module")
def stalled_learner(cluster, run_config):
    return _stalled_learner(cluster, run_config(**NO_TRAINING))


def test_ray_frozen_learner_stops_the_run_naming_it_after_long_legitimate_work(
    stalled_learner,
):
    error = stalled_learner.error
    assert stalled_learner.frozen  # frozen after its begin hook outlasted the timeout
    assert error.role == "learner" and "learner stalled: no sign of life for" in str(error)
    assert f"stall_timeout={RAY_STALL_TIMEOUT:g} s" in str(error)
    assert stalled_learner.seconds < RAY_STALL_TIMEOUT + 20  # noticed, not hanging


def test_ray_frozen_learner_is_killed_leaving_no_ray_actor(stalled_learner):
    assert stalled_learner.cpus_freed and not stalled_learner.learner_alive


def _checkpointed_then_resumed(cluster, config, directory, seeds_dir):
    ray.init(address=cluster.address)
    try:
        first = R2D2Manager(
            CARTPOLE,
            config,
            backend="ray",
            callbacks=[CheckpointCallback(directory, interval=10)],
            progress=False,
        ).train(nb_trains=30, max_seconds=240)
        resumed = R2D2Manager(
            CARTPOLE, config, backend="ray", callbacks=[RecordActorSeeds(seeds_dir)], progress=False
        ).train(nb_trains=40, max_seconds=240, resume_from=directory)
        return SimpleNamespace(
            first=first,
            resumed=resumed,
            files=sorted(os.listdir(directory)),
            checkpoint=read_checkpoint(directory),
            resumed_seeds=read_actor_seeds(seeds_dir, 1),
            config=config,
        )
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def checkpointed(cluster, run_config, tmp_path_factory):
    directory = tmp_path_factory.mktemp("ray_ckpt")
    seeds_dir = str(tmp_path_factory.mktemp("ray_seeds"))
    return _checkpointed_then_resumed(cluster, run_config(memory_warmup=20), directory, seeds_dir)


def test_ray_run_stops_for_nb_trains(checkpointed):
    assert checkpointed.first.stop_reason == "nb_trains"
    assert checkpointed.first.learner_updates >= 30


def test_ray_learner_writes_checkpoints(checkpointed):
    assert "ckpt-0000000030.h5" in checkpointed.files


def test_ray_resumed_actors_do_not_replay_the_runs_first_episodes(checkpointed):
    """The resumed run's actor starts from the checkpoint's resumed seed (the last
    checkpoint the first run wrote is the one it resumed from)."""
    seed = checkpointed.config.seed
    base = resumed_seed(seed, checkpointed.checkpoint.counters.env_steps)
    assert base not in (None, seed)
    assert checkpointed.resumed_seeds == {0: [base]}


def test_ray_resumed_run_continues_the_counts(checkpointed):
    first, resumed = checkpointed.first, checkpointed.resumed
    assert resumed.resumed_from is not None and resumed.stop_reason == "nb_trains"
    assert resumed.learner_updates >= 40
    assert resumed.env_steps > first.env_steps * 0.9  # the checkpoint's steps count on


def _callback_stop(cluster, config):
    ray.init(address=cluster.address)
    try:
        manager = R2D2Manager(
            CARTPOLE, config, backend="ray", callbacks=[StopAfterEpisodes()], progress=False
        )
        return manager.train(max_seconds=240)
    finally:
        ray.shutdown()


def test_ray_callback_in_an_actor_stops_the_run(cluster, run_config):
    result = _callback_stop(cluster, run_config(**NO_TRAINING))
    assert result.stop_reason == "callback" and "actor 0: two episodes done" in result.stop_detail


def test_ray_run_asking_for_more_cpus_than_the_cluster_has_is_refused(cluster, run_config):
    ray.init(address=cluster.address)
    try:
        manager = R2D2Manager(
            CARTPOLE,
            run_config(**NO_TRAINING),
            actor_num=2,
            backend="ray",
            ray_options=RayOptions(actor_num_cpus=3),
            progress=False,
        )
        assert _free_cpus_come_back()  # the previous test's Ray actors are gone
        with pytest.raises(ValueError, match="actor_num_cpus=3"):
            manager.train(nb_steps=100)
        assert ray.available_resources().get("CPU", 0.0) >= CLUSTER_CPUS  # nothing started
    finally:
        ray.shutdown()


def _node_gone(cluster, config):
    """One actor, pinned (custom resource) to a node that is removed after 200 env steps;
    a replacement node offers the same resource. The driver connects first, so that its
    node (where the board and the learner go) is not the doomed one: on loopback every
    node has the same address."""
    ray.init(address=cluster.address)
    doomed = cluster.add_node(num_cpus=1, resources={"doomed": 1})
    cluster.wait_for_nodes()
    replacement = []
    try:
        manager = R2D2Manager(
            CARTPOLE,
            config,
            actor_num=1,
            backend="ray",
            ray_options=RayOptions(actor_resources={"doomed": 1}, start_timeout=120),
            progress=False,
        )
        removed = {}

        def on_progress(p):
            if not removed and p.env_steps >= 200:
                removed["at"] = time.monotonic()
                cluster.remove_node(doomed)
                replacement.append(cluster.add_node(num_cpus=1, resources={"doomed": 1}))

        result = manager.train(nb_steps=LOST_ACTOR_BUDGET, max_seconds=240, on_progress=on_progress)
        return SimpleNamespace(result=result, removed=removed)
    finally:
        ray.shutdown()
        for node in replacement:
            cluster.remove_node(node)


@pytest.fixture(scope="module")
def node_gone(cluster, run_config):
    return _node_gone(cluster, run_config(**NO_TRAINING))


def test_ray_actor_of_a_lost_node_is_restarted_elsewhere(node_gone):
    assert node_gone.removed and node_gone.result.actor_restarts == [1]


def test_ray_run_with_a_lost_node_finishes(node_gone):
    result = node_gone.result
    assert result.stop_reason == "nb_steps" and result.env_steps >= LOST_ACTOR_BUDGET


_SIGINT_SCRIPT = textwrap.dedent("""
    import functools, json, sys
    import gymnasium as gym
    import ray
    from r2d2_agent.config import R2D2Config
    from r2d2_agent.distributed import R2D2Manager

    def main():
        config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=16, dense_units=16,
                            burnin=2, input_length=4, multisteps=2, batch_size=4,
                            memory_capacity=200, memory_warmup=200, seed=0)
        manager = R2D2Manager(functools.partial(gym.make, "CartPole-v1"), config,
                              actor_num=1, backend="ray", progress=False)
        ready = {}

        def on_progress(p):
            if not ready and p.weights_version >= 1 and min(p.actor_env_steps) > 0:
                ready.update(pids=[*p.actor_pids, p.learner_pid])
                print("READY " + json.dumps(ready), flush=True)

        result = manager.train(max_seconds=120, on_progress=on_progress)
        print("RESULT " + json.dumps({
            "reason": result.stop_reason, "steps": result.env_steps,
            "weights": manager.latest_weights() is not None,
            "ray": ray.is_initialized()}), flush=True)

    if __name__ == "__main__":
        main()
""")


def _session_processes(session: int) -> list[str]:
    """Command lines of the live processes of a session (Ray's own ones included)."""
    out = subprocess.run(["ps", "-o", "sid=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split(None, 1)[0] == str(session)]


@pytest.fixture(scope="module")
def ray_ctrl_c(tmp_path_factory):
    """A one-actor run on a Ray the script starts itself, interrupted like a terminal's
    Ctrl-C (SIGINT to the whole process group) once weights were published."""
    tmp_path = tmp_path_factory.mktemp("ray_ctrl_c")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    # Its own Ray session root, so that it starts a Ray rather than join this module's
    # cluster (Ray joins a cluster it finds running on the machine).
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="r2d2ray", dir="/tmp")
    try:
        run = interrupt_script(_SIGINT_SCRIPT, tmp_path, env, ready_timeout=180)
        time.sleep(2)  # Ray's own processes end after the driver's ray.shutdown()
        run.left = _session_processes(run.pid)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)  # the script's Ray session
    return run


def test_ray_ctrl_c_stops_the_run_as_interrupted_and_keeps_the_weights(ray_ctrl_c):
    result = ray_ctrl_c.result
    assert result["reason"] == "interrupted" and result["steps"] > 0 and result["weights"]


def test_ray_ctrl_c_lets_the_script_exit_normally_within_seconds(ray_ctrl_c):
    assert ray_ctrl_c.exitcode == 0 and ray_ctrl_c.seconds < 30


def test_ray_ctrl_c_leaves_no_ray_process_behind(ray_ctrl_c):
    assert ray_ctrl_c.result["ray"] is False
    assert ray_ctrl_c.left == [], "\n".join(ray_ctrl_c.left)


_SIGTERM_SCRIPT = textwrap.dedent("""
    import functools, json, os, signal
    import gymnasium as gym
    import ray
    from r2d2_agent.callbacks import CheckpointCallback
    from r2d2_agent.config import R2D2Config
    from r2d2_agent.distributed import R2D2Manager

    def main():
        config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=16, dense_units=16,
                            burnin=2, input_length=4, multisteps=2, batch_size=4,
                            memory_capacity=200, memory_warmup=200, seed=0)
        checkpoints = CheckpointCallback("ckpt", interval=10**9, save_at_end=True)
        manager = R2D2Manager(functools.partial(gym.make, "CartPole-v1"), config,
                              actor_num=1, backend="ray", callbacks=[checkpoints],
                              progress=False)
        ready = {}

        def on_progress(p):
            if not ready and p.weights_version >= 1 and min(p.actor_env_steps) > 0:
                ready.update(pids=[*p.actor_pids, p.learner_pid])
                print("READY " + json.dumps(ready), flush=True)

        result = manager.train(max_seconds=120, on_progress=on_progress)
        print("RESULT " + json.dumps({
            "reason": result.stop_reason, "steps": result.env_steps,
            "updates": result.learner_updates,
            "weights": manager.latest_weights() is not None,
            "checkpoints": sorted(os.listdir("ckpt")) if os.path.isdir("ckpt") else [],
            "handler_restored": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "ray": ray.is_initialized()}), flush=True)

    if __name__ == "__main__":
        main()
""")


@pytest.fixture(scope="module")
def ray_sigterm(tmp_path_factory):
    """A one-actor run with a `CheckpointCallback` (saves only at the end) on a Ray the
    script starts itself, sent SIGTERM to its whole process group (as `docker stop`,
    systemd or Slurm do) once weights were published."""
    tmp_path = tmp_path_factory.mktemp("ray_sigterm")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="r2d2ray", dir="/tmp")
    try:
        run = interrupt_script(
            _SIGTERM_SCRIPT, tmp_path, env, ready_timeout=180, sig=signal.SIGTERM
        )
        time.sleep(2)  # Ray's own processes end after the driver's ray.shutdown()
        run.left = _session_processes(run.pid)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)  # the script's Ray session
    run.folder = tmp_path
    return run


def test_ray_sigterm_stops_the_run_after_the_final_checkpoint(ray_sigterm):
    from r2d2_agent.checkpoints import read_checkpoint

    result = ray_sigterm.result
    assert result["reason"] == "sigterm" and result["steps"] > 0 and result["weights"]
    assert len(result["checkpoints"]) == 1
    state = read_checkpoint(ray_sigterm.folder / "ckpt" / result["checkpoints"][0])
    assert state.counters.learner_updates == result["updates"]


def test_ray_sigterm_lets_the_script_exit_normally_leaving_nothing(ray_sigterm):
    assert ray_sigterm.exitcode == 0 and ray_sigterm.result["handler_restored"] is True
    assert ray_sigterm.result["ray"] is False
    assert ray_sigterm.left == [], "\n".join(ray_sigterm.left)
