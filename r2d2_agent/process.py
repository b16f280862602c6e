"""Multiprocessing plumbing of `R2D2Manager`: child bootstrap, errors, channels, counters.

* `run_child` is every child's process target: it ignores SIGINT (the parent orchestrates
  shutdown), sets ``TF_FORCE_GPU_ALLOW_GROWTH`` and, for CPU-only children,
  ``CUDA_VISIBLE_DEVICES=-1`` before any TensorFlow import, imports TensorFlow only when
  the child needs it (then enables GPU memory growth before its first op), seeds, and
  sends any exception's traceback to the parent before exiting with code 1.
* Experience travels through one pipe per actor (`PipeExperienceSender` /
  `PipeExperienceReceiver`), not one shared queue: an actor killed in the middle of a
  write (SIGKILL, OOM killer) can corrupt or lock a queue shared by all actors (its
  writer lock stays taken, a half-written message blocks the reader), while a private
  pipe just reaches end-of-file and is dropped. A restarted actor gets a new pipe whose
  read end the parent passes to the running learner over its control pipe (multiprocessing
  transfers `Connection` objects between processes).
* Progress counters are lock-free shared arrays with one writer per slot, and the stop
  flag is a lock-free shared byte: a process killed while holding a multiprocessing lock
  (as `Event.is_set` takes) would deadlock everyone else.

Nothing here imports TensorFlow at module level.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import random
import select
import signal
import struct
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.runners import ActorRunner, LearnerRunner
from r2d2_agent.transport import (
    ExperienceReceiver,
    ExperienceSender,
    SharedWeightsSubscriber,
    WeightsPublisher,
)
from r2d2_agent.weights import SharedWeights, SharedWeightsHandle, WeightsSpec

logger = logging.getLogger(__name__)


class R2D2ProcessError(RuntimeError):
    """A child process of an `R2D2Manager` failed; the message holds its traceback.

    Attributes:
        role: "learner" or "actor".
        index: the actor index (None for the learner).
        exitcode: the child's exit code (negative: killed by that signal), if known.
        child_traceback: the traceback text sent by the child, if it could send one.
    """

    def __init__(self, message: str, role: str, index: int | None = None,
                 exitcode: int | None = None, child_traceback: str | None = None) -> None:
        super().__init__(message)
        self.role, self.index = role, index
        self.exitcode, self.child_traceback = exitcode, child_traceback


def describe_exit(exitcode: int | None) -> str:
    """Human-readable exit status ("exit code 1", "killed by SIGKILL")."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class SharedFlag:
    """A lock-free stop flag in shared memory (pass it as a Process argument)."""

    def __init__(self, ctx: BaseContext) -> None:
        self._value = ctx.RawValue(ctypes.c_int8, 0)

    def set(self) -> None:
        """Raises the flag."""
        self._value.value = 1

    def is_set(self) -> bool:
        """Whether the flag is raised."""
        return bool(self._value.value)


class RunCounters:
    """Lock-free shared counters of a run; every slot has exactly one writer.

    Attributes:
        actor_steps: env steps per actor index (written by that actor).
        learner: learner updates, sequences received, env steps received, weights version.
        loss: the learner's latest loss.
    """

    LEARNER_FIELDS = ("updates", "sequences", "env_steps", "version")

    def __init__(self, ctx: BaseContext, actor_num: int) -> None:
        self.actor_steps = ctx.RawArray(ctypes.c_int64, actor_num)
        self.learner = ctx.RawArray(ctypes.c_int64, len(self.LEARNER_FIELDS))
        self.loss = ctx.RawValue(ctypes.c_double, float("nan"))
        self._steps_view: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_steps_view": None}

    def total_steps(self) -> int:
        """Env steps summed over all actors."""
        if self._steps_view is None:
            self._steps_view = np.frombuffer(self.actor_steps, dtype=np.int64)
        return int(self._steps_view.sum())

    def learner_value(self, field: str) -> int:
        """One of `LEARNER_FIELDS`, as a Python int."""
        return int(self.learner[self.LEARNER_FIELDS.index(field)])


# ---------------------------------------------------------------- channels ----------
class PipeExperienceSender(ExperienceSender):
    """Sends pickled item batches through this actor's own pipe (bounded by the pipe).

    Writes are non-blocking, so a full pipe never stops the actor from seeing the stop
    flag or a timeout, even in the middle of a large message. The bytes on the wire are
    those of `Connection.send_bytes` (a ``!i`` length, or -1 and a ``!Q`` length, then
    the payload), so the learner reads them with `Connection.recv_bytes`. A message given
    up half-way closes the pipe, so the reader sees end-of-file instead of waiting.

    Args:
        conn: the write end of the actor's pipe.
        stop: stop flag; a blocked `send` gives up once it is set.
        poll_interval: seconds between stop checks while the pipe is full.
    """

    def __init__(self, conn: Connection, stop: SharedFlag, poll_interval: float = 0.1) -> None:
        self._conn, self._stop, self._poll = conn, stop, poll_interval
        os.set_blocking(conn.fileno(), False)

    def send(self, items: list, timeout: float | None = None) -> bool:
        """See `ExperienceSender.send`.

        Raises:
            TimeoutError: still full after `timeout` s (the pipe is closed if a part of
                the message was written).
            BrokenPipeError: the learner closed its end while stop is not set.
        """
        if self._conn.closed:
            raise BrokenPipeError("experience pipe closed by an earlier failed send")
        payload = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
        size = len(payload)
        header = (struct.pack("!i", size) if size <= 0x7FFFFFFF
                  else struct.pack("!i", -1) + struct.pack("!Q", size))
        deadline = None if timeout is None else time.monotonic() + timeout
        fd, written = self._conn.fileno(), 0
        for view in (memoryview(header), memoryview(payload)):
            while view:
                if self._stop.is_set():
                    return self._give_up(written, None)
                wait_s = self._poll
                if deadline is not None:
                    wait_s = min(wait_s, deadline - time.monotonic())
                    if wait_s <= 0:
                        return self._give_up(written, TimeoutError(
                            f"experience pipe still full after {timeout} s"))
                if not select.select([], [fd], [], wait_s)[1]:
                    continue
                try:
                    n = os.write(fd, view)
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    if self._stop.is_set():
                        return False
                    raise
                view, written = view[n:], written + n
        return True

    def _give_up(self, written: int, error: Exception | None) -> bool:
        if written:  # a cut message: close so that the reader gets end-of-file
            self._conn.close()
        if error is not None:
            raise error
        return False

    def close(self) -> None:
        """Closes the write end."""
        self._conn.close()


class PipeExperienceReceiver(ExperienceReceiver):
    """Receives item batches from many actor pipes; new pipes arrive on a control pipe.

    A pipe whose actor died (end of file, or a message cut short) is dropped; the items of
    a batch that do not fit in one `receive` are kept for the next.

    Args:
        control: read end of the manager's control pipe; ``("connect", index, conn)``
            messages add actor pipes. End of file on it means the manager is gone.
        connections: initial actor pipes.
    """

    def __init__(self, control: Connection | None = None,
                 connections: Sequence[Connection] = ()) -> None:
        self._control = control
        self._conns: list[Connection] = list(connections)
        self._pending: deque = deque()

    @property
    def connections(self) -> int:
        """Number of open actor pipes."""
        return len(self._conns)

    def add_connection(self, conn: Connection) -> None:
        """Starts reading from another actor pipe."""
        self._conns.append(conn)

    def _read(self, conn: Connection) -> None:
        if conn is self._control:
            try:
                message = conn.recv()
            except (EOFError, OSError) as exc:
                raise RuntimeError("the manager's control pipe closed: manager gone") from exc
            if message[0] != "connect":
                raise RuntimeError(f"unexpected control message {message[0]!r}")
            self.add_connection(message[2])
            return
        try:
            self._pending.extend(pickle.loads(conn.recv_bytes()))
        except (EOFError, OSError) as exc:  # actor gone, maybe in the middle of a message
            logger.info("dropping an experience pipe (%s)", exc or type(exc).__name__)
            self._conns.remove(conn)
            conn.close()

    def receive(self, max_items: int, timeout: float) -> list:
        """See `ExperienceReceiver.receive`."""
        out: list = []
        deadline = time.monotonic() + max(timeout, 0.0)
        while len(out) < max_items:
            while self._pending and len(out) < max_items:
                out.append(self._pending.popleft())
            if len(out) >= max_items:
                break
            sources = self._conns + ([self._control] if self._control is not None else [])
            remaining = 0.0 if out else max(0.0, deadline - time.monotonic())
            if not sources:
                time.sleep(remaining)
                break
            ready = wait(sources, remaining)
            if not ready:
                break
            for conn in ready:
                self._read(conn)
        return out

    def close(self) -> None:
        """Closes all actor pipes (not the control pipe)."""
        for conn in self._conns:
            conn.close()
        self._conns.clear()
        self._pending.clear()


class AttachedWeightsPublisher(WeightsPublisher):
    """Publishes into a segment the manager created (the manager owns and unlinks it)."""

    def __init__(self, handle: SharedWeightsHandle) -> None:
        self._weights = SharedWeights.attach(handle, writer=True)

    def publish(self, arrays: Sequence[np.ndarray]) -> int:
        """See `WeightsPublisher.publish`."""
        return self._weights.publish(arrays)

    def close(self) -> None:
        """Detaches (never unlinks)."""
        self._weights.close()


# ------------------------------------------------------------ child processes -------
@dataclass(frozen=True)
class ChildOptions:
    """How `run_child` prepares a child before its main function.

    Attributes:
        role: "learner" or "actor".
        index: actor index (None for the learner).
        use_tensorflow: import TensorFlow (and enable GPU memory growth) up front.
        hide_gpu: set ``CUDA_VISIBLE_DEVICES=-1`` so the child never touches a GPU.
        seed: seeds Python's, numpy's (and TensorFlow's) global generators.
        log_level: level of the child's root logger, if it has no handler yet.
    """

    role: str
    index: int | None = None
    use_tensorflow: bool = False
    hide_gpu: bool = False
    seed: int | None = None
    log_level: int = logging.WARNING


def bootstrap(options: ChildOptions) -> None:
    """Prepares this process as described by `options` (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # covers late TF imports
    if options.hide_gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
    if not logging.getLogger().handlers:
        logging.basicConfig(level=options.log_level,
                            format="%(asctime)s %(processName)s %(levelname)s %(name)s: "
                                   "%(message)s")
    if options.seed is not None:
        random.seed(options.seed)
        np.random.seed(options.seed % 2**32)
    if options.use_tensorflow:
        from r2d2_agent import compat

        compat.enable_gpu_memory_growth()
        if options.seed is not None:
            compat.set_global_seed(options.seed)


def run_child(main: Callable[..., None], options: ChildOptions, events: Connection,
              *args: Any) -> None:
    """Process target: `bootstrap`, then ``main(events, *args)``; errors go to `events`."""
    try:
        bootstrap(options)
        main(events, *args)
    except BaseException:
        text = traceback.format_exc()
        logger.error("%s %s failed:\n%s", options.role, options.index, text)
        try:
            events.send(("error", text))
        except OSError:
            pass
        raise SystemExit(1) from None
    finally:
        events.close()


class _ParentWatch:
    """`stop` raised, or the manager died (this process was re-parented): checked cheaply."""

    def __init__(self, stop: SharedFlag, every: int = 256) -> None:
        self._stop, self._ppid, self._every, self._calls = stop, os.getppid(), every, 0

    def __call__(self) -> bool:
        self._calls += 1
        if self._calls % self._every == 0 and os.getppid() != self._ppid:
            logger.warning("the manager process is gone; stopping")
            self._stop.set()  # only this process's view matters: the manager is gone
        return self._stop.is_set()


class _ActorReporter:
    """`ActorProgress` writing the actor's counter slot and sending episode returns."""

    def __init__(self, counters: RunCounters, index: int, events: Connection) -> None:
        self._slot, self._index, self._events = counters.actor_steps, index, events
        self._base = int(self._slot[index])  # a restarted actor continues its count

    def on_steps(self, total_steps: int) -> None:
        self._slot[self._index] = self._base + total_steps

    def on_episode(self, episode_return: float, episode_steps: int) -> None:
        self._events.send(("episode", float(episode_return), int(episode_steps)))


class _LearnerReporter:
    """`LearnerProgress` writing the learner's counter slots."""

    def __init__(self, counters: RunCounters) -> None:
        self._counters = counters

    def on_learner_progress(self, runner: LearnerRunner) -> None:
        slots = self._counters.learner
        slots[0], slots[1] = runner.updates, runner.sequences_received
        slots[2], slots[3] = runner.env_steps_received, runner.version
        if "loss" in runner.metrics:
            self._counters.loss.value = runner.metrics["loss"]


def actor_main(events: Connection, conn: Connection, stop: SharedFlag, counters: RunCounters,
               index: int, config: R2D2Config, payload: bytes,
               weights: SharedWeightsHandle, kwargs: dict[str, Any],
               nb_steps: int | None) -> None:
    """Actor process: builds env, policy and channels, then runs an `ActorRunner`.

    Args:
        payload: pickled ``(env_factory, image_model, callbacks, use_numpy_policy)``.
        kwargs: `ActorRunner` keyword arguments (epsilon, seed, ...).
        nb_steps: stop once all actors together took this many env steps.
    """
    from r2d2_agent.actor import make_policy

    env_factory, image_model, callbacks, use_numpy = pickle.loads(payload)
    policy = make_policy(config, image_model, use_numpy)
    env = env_factory()
    sender, subscriber = PipeExperienceSender(conn, stop), SharedWeightsSubscriber(weights)
    runner = ActorRunner(index, config, env, policy, sender, subscriber, callbacks=callbacks,
                         progress=_ActorReporter(counters, index, events), **kwargs)

    stopped = _ParentWatch(stop)

    def should_stop() -> bool:
        return stopped() or (nb_steps is not None and counters.total_steps() >= nb_steps)

    try:
        runner.run(should_stop)
    finally:
        env.close()
        subscriber.close()
        sender.close()
    events.send(("info", {"pid": os.getpid(), "policy": type(policy).__name__,
                          "tensorflow_loaded": "tensorflow" in sys.modules,
                          "steps": runner.steps, "weight_pulls": runner.weight_pulls,
                          "items_sent": runner.items_sent}))


def learner_main(events: Connection, control: Connection, stop: SharedFlag,
                 counters: RunCounters, config: R2D2Config, payload: bytes,
                 kwargs: dict[str, Any]) -> None:
    """Learner process: builds the learner, reports its weight spec, trains.

    Protocol: sends ``("spec", WeightsSpec)`` on `events`, waits for ``("weights",
    handle)`` on `control` (the manager creates and owns the segment), then runs a
    `LearnerRunner` whose receiver takes actor pipes from `control`.

    Args:
        payload: pickled ``(image_model, callbacks, initial_weights, observation_dtype)``.
        kwargs: `LearnerRunner` keyword arguments.
    """
    from r2d2_agent.learner import R2D2Learner

    image_model, callbacks, initial_weights, observation_dtype = pickle.loads(payload)
    learner = R2D2Learner(config, image_model, observation_dtype)
    if initial_weights is not None:
        learner.set_weights(initial_weights)
    events.send(("spec", WeightsSpec.from_arrays(learner.get_weights())))
    stopped = _ParentWatch(stop, every=1)
    while not control.poll(0.1):
        if stopped():
            return
    kind, handle = control.recv()
    if kind != "weights":
        raise RuntimeError(f"expected the weights handle first, got {kind!r}")
    publisher, receiver = AttachedWeightsPublisher(handle), PipeExperienceReceiver(control)
    runner = LearnerRunner(learner, receiver, publisher, callbacks=callbacks,
                           progress=_LearnerReporter(counters), **kwargs)
    try:
        runner.run(_ParentWatch(stop, every=16))
    finally:
        _LearnerReporter(counters).on_learner_progress(runner)
        receiver.close()
        publisher.close()
    events.send(("info", {"pid": os.getpid(), "updates": runner.updates,
                          "sequences": runner.sequences_received}))
