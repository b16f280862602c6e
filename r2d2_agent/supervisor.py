"""One `R2D2Manager.train` call: start, watch, restart and stop the child processes.

The parent waits on every child's process sentinel and event pipe at once
(`multiprocessing.connection.wait`), so a death is seen within one poll (0.1 s). Shutdown
(normal, on error or on Ctrl-C) raises the stop flag, gives children `shutdown_timeout`
seconds, terminates then kills stragglers, reads the final weights from shared memory,
closes every pipe and unlinks the segment, whatever happened before. Starting and stopping
one process is `r2d2_agent.children`; what the run reports is `r2d2_agent.reports`.
"""

from __future__ import annotations

import collections
import logging
import pickle
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np

from r2d2_agent.channels import RunCounters, SharedFlag
from r2d2_agent.children import (
    ChildProcess,
    child_error,
    describe_exit,
    spawn_child,
    terminate,
)
from r2d2_agent.process import ChildOptions, actor_main, learner_main
from r2d2_agent.reports import Progress, ProgressBar, TrainResult
from r2d2_agent.targets import apex_epsilon
from r2d2_agent.weights import SharedWeights, WeightsSpec

logger = logging.getLogger(__name__)

_POLL_S = 0.1


class Supervisor:
    """Runs one training session for `manager` (see `R2D2Manager.train`)."""

    def __init__(self, manager: Any, ctx: BaseContext, nb_steps: int | None,
                 nb_trains: int | None, max_seconds: float | None,
                 on_progress: Callable[[Progress], None] | None) -> None:
        self.m, self.ctx = manager, ctx
        self.nb_steps, self.nb_trains, self.max_seconds = nb_steps, nb_trains, max_seconds
        self.on_progress = on_progress
        n = manager.actor_num
        self.stop, self.counters = SharedFlag(ctx), RunCounters(ctx, n)
        self.learner: ChildProcess | None = None
        self.actors: list[ChildProcess | None] = [None] * n
        self.returns: list[list[float]] = [[] for _ in range(n)]
        self.restarts, self.actor_info = [0] * n, [{} for _ in range(n)]
        self.recent: collections.deque[float] = collections.deque(maxlen=20)
        self.spec: WeightsSpec | None = None
        self.segment: SharedWeights | None = None
        self.control: Connection | None = None
        self.final_weights: list[np.ndarray] | None = None
        self.version, self.reason, self.stopping = 0, "", False
        self.stop_requested = False
        self.t0 = time.monotonic()
        self._actor_blob = pickle.dumps((manager.env_factory, manager.image_model,
                                         manager.callbacks, manager.use_numpy_policy))

    # Public --------------------------------------------------------------------------

    def execute(self) -> TrainResult:
        """Runs to the first limit; always cleans up; returns a `TrainResult`."""
        bar = ProgressBar(self.nb_steps, self.m.progress)
        try:
            self._start_learner()
            while self.spec is None and not self._limit_reached():
                self._pump()
            if self.spec is not None:
                self.segment = SharedWeights.create(self.spec, name_prefix="r2d2")
                self._send_control(("weights", self.segment.handle))
                for i in range(self.m.actor_num):
                    self._start_actor(i)
            while not self._limit_reached():
                self._pump()
                self._report(bar)
        except KeyboardInterrupt:
            self.reason = "interrupted"
            logger.warning("interrupted: stopping the actors and the learner")
        finally:
            bar.close()
            self.close()
        steps = self.counters.total_steps()
        return TrainResult(
            env_steps=steps, learner_updates=self.counters.learner_value("updates"),
            sequences_received=self.counters.learner_value("sequences"),
            weights_version=self.version, elapsed_seconds=time.monotonic() - self.t0,
            stop_reason=self.reason, actor_env_steps=[int(s) for s in self.counters.actor_steps],
            episode_returns=self.returns, actor_restarts=list(self.restarts),
            actor_info=self.actor_info)

    def read_weights(self) -> list[np.ndarray] | None:
        """A consistent copy of the latest published weights (None before the first)."""
        if self.segment is None:
            return None
        try:
            version, arrays = self.segment.read(timeout=1.0)
        except TimeoutError:  # the learner died in the middle of a publish
            logger.warning("shared weights stayed half-written; keeping the previous copy")
            return None
        if version == 0:
            return None
        self.version = version
        return arrays

    def close(self) -> None:
        """Stops every child and releases every resource (idempotent)."""
        if self.stopping:
            return
        self.stopping = True
        self.stop.set()
        children = [c for c in [self.learner, *self.actors] if c is not None]
        interrupted = None
        try:
            deadline = time.monotonic() + self.m.shutdown_timeout
            while any(not c.exited for c in children) and time.monotonic() < deadline:
                self._pump()
        except KeyboardInterrupt as exc:  # a second Ctrl-C: no more patience
            interrupted = exc
        finally:
            try:
                for child in children:
                    terminate(child.process, grace=0.0 if interrupted else 2.0)
                    self._drain(child)
                    child.events.close()
                    child.process.close()
            finally:  # whatever happened above: no pipe and no segment stays behind
                if self.control is not None:
                    self.control.close()
                if self.segment is not None:
                    self.final_weights = self.read_weights()
                    self.segment.close()
                    self.segment.unlink()
        if interrupted is not None:
            raise interrupted

    # Processes -----------------------------------------------------------------------

    def _options(self, role: str, index: int | None, seed: int | None,
                 use_tensorflow: bool, hide_gpu: bool) -> ChildOptions:
        level = logging.getLogger("r2d2_agent").getEffectiveLevel()
        return ChildOptions(role, index, use_tensorflow, hide_gpu, seed, level)

    def _start_learner(self) -> None:
        m = self.m
        control_r, control_w = self.ctx.Pipe(duplex=False)
        blob = pickle.dumps((m.image_model, m.callbacks, m._final_weights, m.observation_dtype))
        kwargs = dict(publish_interval=m.publish_interval, nb_trains=self.nb_trains,
                      env_steps_per_update=m.env_steps_per_update,
                      ratio_tolerance=m.ratio_tolerance)
        options = self._options("learner", None, m.config.seed, True, False)
        self.control = control_w
        try:
            self.learner = spawn_child(self.ctx, "learner", None, options, learner_main,
                                       control_r, self.stop, self.counters, m.config, blob,
                                       kwargs)
        finally:
            control_r.close()

    def _start_actor(self, i: int) -> None:
        m, cfg = self.m, self.m.config
        exp_r, exp_w = self.ctx.Pipe(duplex=False)
        seed = None if cfg.seed is None else cfg.seed + i + m.actor_num * self.restarts[i]
        kwargs = dict(epsilon=apex_epsilon(i, m.actor_num, cfg.epsilon, cfg.epsilon_alpha),
                      seed=seed, observation_dtype=m.observation_dtype,
                      send_batch_size=m.send_batch_size)
        options = self._options("actor", i, seed, not m.use_numpy_policy, m.actors_on_cpu)
        try:
            self.actors[i] = spawn_child(self.ctx, "actor", i, options, actor_main, exp_w,
                                         self.stop, self.counters, i, cfg, self._actor_blob,
                                         self.segment.handle, kwargs, self.nb_steps)
            self._send_control(("connect", i, exp_r))  # the learner reads this actor's pipe
        finally:
            exp_w.close()
            exp_r.close()

    def _send_control(self, message: tuple) -> None:
        try:
            self.control.send(message)
        except OSError:  # the learner is gone; the next _pump reports why
            logger.debug("control pipe closed while sending %s", message[0])

    # Watching ------------------------------------------------------------------------

    def _pump(self) -> None:
        """Waits up to one poll for events or deaths, then handles them."""
        live = [c for c in [self.learner, *self.actors] if c is not None and not c.exited]
        handles = [c.events for c in live if not c.events.closed]
        handles += [c.process.sentinel for c in live]
        if handles:
            wait(handles, _POLL_S)
        else:
            time.sleep(_POLL_S)
        for child in live:
            self._drain(child)
            if child.process.exitcode is not None:
                child.exited = True
                self._on_exit(child)

    def _drain(self, child: ChildProcess) -> None:
        while not child.events.closed:
            try:
                if not child.events.poll(0):
                    return
                message = child.events.recv()
            except (EOFError, OSError):
                child.events.close()
                return
            kind = message[0]
            if kind == "episode":
                self.returns[child.index].append(message[1])
                self.recent.append(message[1])
            elif kind == "spec":
                self.spec = message[1]
            elif kind == "error":
                child.error = message[1]
            elif kind == "info":
                child.info = message[1]
                if child.role == "actor":
                    self.actor_info[child.index] = message[1]

    def _on_exit(self, child: ChildProcess) -> None:
        code = child.process.exitcode
        if child.role == "learner":
            finished = self.nb_trains is not None and self._updates() >= self.nb_trains
            if code == 0 and (finished or self.stopping):
                return
            if self.stopping and code != 0 and child.error is None:
                return  # terminated by the shutdown itself
            raise child_error(child, "learner failed", code)
        if code == 0 or self.stopping:
            return
        i = child.index
        if self.restarts[i] >= self.m.max_actor_restarts:
            raise child_error(child, f"actor {i} died and was already restarted "
                              f"{self.restarts[i]} time(s) (max_actor_restarts="
                              f"{self.m.max_actor_restarts}); stopping the run", code)
        last = (child.error or "").strip().splitlines()[-1:] or ["no traceback"]
        logger.warning("actor %d died (%s: %s); restarting it", i, describe_exit(code),
                       last[0])
        self.restarts[i] += 1
        child.events.close()
        child.process.close()
        self._start_actor(i)

    # Limits and progress -----------------------------------------------------------------

    def _updates(self) -> int:
        return self.counters.learner_value("updates")

    def _limit_reached(self) -> bool:
        if self.stop_requested:
            self.reason = "requested"
        elif self.nb_steps is not None and self.counters.total_steps() >= self.nb_steps:
            self.reason = "nb_steps"
        elif self.nb_trains is not None and self._updates() >= self.nb_trains:
            self.reason = "nb_trains"
        elif self.max_seconds is not None and time.monotonic() - self.t0 >= self.max_seconds:
            self.reason = "max_seconds"
        return bool(self.reason)

    def snapshot(self) -> Progress:
        """The current `Progress`."""
        c = self.counters
        return Progress(
            elapsed_seconds=time.monotonic() - self.t0, env_steps=c.total_steps(),
            actor_env_steps=tuple(int(s) for s in c.actor_steps),
            learner_updates=self._updates(), sequences_received=c.learner_value("sequences"),
            weights_version=c.learner_value("version"), loss=float(c.loss.value),
            episodes=sum(map(len, self.returns)),
            recent_mean_return=float(np.mean(self.recent)) if self.recent else None,
            actor_pids=tuple(None if a is None or a.exited else a.process.pid
                             for a in self.actors),
            learner_pid=self.learner.process.pid if self.learner else None,
            actor_restarts=tuple(self.restarts))

    def _report(self, bar: ProgressBar) -> None:
        progress = self.snapshot()
        bar.update(progress)
        if self.on_progress is not None:
            self.on_progress(progress)
