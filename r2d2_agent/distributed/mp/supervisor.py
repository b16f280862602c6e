"""`Supervisor`: one `R2D2Manager.train` call on multiprocessing: start, watch, restart and
stop the child processes.

The parent waits on every child's process sentinel and event pipe at once
(`multiprocessing.connection.wait`), so a death is seen within one poll (0.1 s). Shutdown
(normal, on error, on Ctrl-C, SIGTERM or SIGHUP) raises the stop flag, gives the children
`shutdown_timeout` seconds, kills stragglers, reads the final weights from shared memory,
closes every pipe and unlinks the segment, whatever happened before.
Before the learner starts, the segments of runs that were killed (SIGKILL, their resource
tracker with them) are removed: `r2d2_agent.leftovers` checks that their owner is dead.
Starting and stopping one process is `children`; what the run reports is
`r2d2_agent.distributed.reports`.

The stall watchdog (`stall_timeout`): every child beats in its slot of the shared
`Heartbeats` (its loop once per step or iteration; a keep-alive thread during declared
long operations, see `Liveness`). At every poll the parent notes when each child's beat
count last changed; a child silent for longer than `stall_timeout` is killed (SIGKILL,
which also ends a SIGSTOPped process) and then handled as dead: an actor is restarted, the
learner stops the run with `R2D2ProcessError`. A pause of the parent itself (a slow
`on_progress`, the whole group stopped with Ctrl-Z) does not count as the children's
silence. At shutdown, a child still inside a long operation (the learner writing its final
checkpoint) gets time past `shutdown_timeout` for as long as it is not stalled.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from r2d2_agent.checkpoints import TrainingState
from r2d2_agent.distributed.messages import (
    ActorSummary,
    ChildFailed,
    ConnectActor,
    EpisodeFinished,
    LearnerSummary,
    StopRequested,
    WeightsLayout,
    WeightsSegment,
)
from r2d2_agent.distributed.mp.bootstrap import ChildSetup, Deferred, Pulse
from r2d2_agent.distributed.mp.children import ChildProcess, child_error, spawn_child, terminate
from r2d2_agent.distributed.mp.entrypoints import actor_main, learner_main
from r2d2_agent.distributed.mp.shared_state import Heartbeats, RunCounters, SharedFlag
from r2d2_agent.distributed.mp.shared_weights import SharedWeights, WeightsSpec
from r2d2_agent.distributed.mp.temp_folder import use_owner_tagged_folder
from r2d2_agent.distributed.reports import MAIN_GUARD_HINT, Progress, describe_exit
from r2d2_agent.distributed.spec import ActorStart, LearnerStart, RunSpec, TrainLimits
from r2d2_agent.distributed.supervision import BackendSupervisor
from r2d2_agent.leftovers import reclaim_mp_folders, reclaim_segments

__all__ = ["Supervisor"]

logger = logging.getLogger(__name__)

_POLL_S = 0.1
_PARENT_PAUSE_S = 2.0
"""A gap between two watchdog checks longer than this is a pause of the parent itself
(a slow `on_progress`, the group stopped with Ctrl-Z): the children's silence restarts
from zero."""
_FIRST_BEAT_S = 60.0
"""Before its first beat a child gets at least this long: starting a Python process and
importing its modules precede the child's own code (its start-up then beats as busy), and
take several seconds on a loaded machine."""


class Supervisor(BackendSupervisor):
    """Runs one training session of `spec` on multiprocessing (see `R2D2Manager.train`).

    Args:
        spec: The run.
        limits: When to stop.
        initial_weights: Weights the learner starts from, as it publishes them (None:
            fresh ones).
        on_progress: Called in the parent about ten times a second with a `Progress`.
        ctx: The multiprocessing context; `spawn` when None.
        resume: A checkpoint's state to continue from: the counters start from its
            counts (per actor, see `TrainingCounters.env_steps_per_actor`) and the
            learner gets it in its `LearnerStart`.
    """

    def __init__(
        self,
        spec: RunSpec,
        limits: TrainLimits,
        *,
        initial_weights: list[np.ndarray] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        ctx: BaseContext | None = None,
        resume: TrainingState | None = None,
    ) -> None:
        super().__init__(
            spec, limits, initial_weights=initial_weights, on_progress=on_progress, resume=resume
        )
        self.ctx = ctx or multiprocessing.get_context("spawn")
        n = spec.nb_actors
        self.stop = SharedFlag(self.ctx)
        self.counters = RunCounters(self.ctx, n)
        self.heartbeats = Heartbeats(self.ctx, 1 + n)  # slot 0: the learner; 1 + i: actor i
        self._last_watch = time.monotonic()
        if resume is not None:  # before any child starts: the parent is the only writer
            c = resume.counters
            for i, (steps, episodes) in enumerate(
                zip(c.env_steps_per_actor(n), c.episodes_per_actor(n), strict=True)
            ):
                self.counters.set_actor_steps(i, steps)
                self.counters.set_actor_episodes(i, episodes)
            self.counters.set_learner(updates=c.learner_updates, sequences=c.sequences_received)
        self.learner: ChildProcess | None = None
        self.actors: list[ChildProcess | None] = [None] * n
        self.weights_spec: WeightsSpec | None = None
        self.segment: SharedWeights | None = None
        self.control: Connection | None = None

    # Public --------------------------------------------------------------------------

    def _start(self) -> None:
        reclaim_segments()  # those of runs killed before they could unlink them; never a live one's
        reclaim_mp_folders()  # likewise
        use_owner_tagged_folder()  # not an anonymous pymp-<random> a SIGKILL would leave
        self._start_learner()
        while self.weights_spec is None and not self._limit_reached():
            self._poll()
        if self.weights_spec is not None:
            self.segment = SharedWeights.create(self.weights_spec, name_prefix="r2d2")
            self._send_control(WeightsSegment(self.segment.handle))
            for i in range(self.spec.nb_actors):
                self._start_actor(i)

    def _counts(self) -> dict[str, Any]:
        counters = self.counters
        return {
            "actor_env_steps": counters.all_actor_steps(),
            "learner_updates": counters.learner_value("updates"),
            "sequences_received": counters.learner_value("sequences"),
            "episodes": sum(counters.all_actor_episodes()),
        }

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
            deadline = time.monotonic() + self.spec.options.shutdown_timeout
            waited_for_busy = False
            while any(not c.exited for c in children):
                if time.monotonic() >= deadline:
                    busy = [c for c in children if not c.exited and self._busy(c)]
                    if not busy:
                        break
                    if not waited_for_busy:
                        waited_for_busy = True
                        logger.warning(
                            "%s still busy (e.g. writing its final checkpoint) after "
                            "shutdown_timeout=%g s; waiting while it shows signs of life",
                            ", ".join(c.name for c in busy),
                            self.spec.options.shutdown_timeout,
                        )
                self._poll()
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

    def _start_learner(self) -> None:
        spec = self.spec
        control_r, control_w = self.ctx.Pipe(duplex=False)
        start = LearnerStart(spec, self.limits.nb_trains, self._initial_weights, self.resume)
        setup = ChildSetup(
            "learner",
            None,
            use_tensorflow=True,
            seed=self.learner_seed,
            log_level=spec.log_level,
            tf_verbose=spec.options.tf_verbose,
        )
        self.control = control_w
        self.heartbeats.reset(0)
        try:
            self.learner = spawn_child(
                self.ctx,
                "learner",
                None,
                setup,
                learner_main,
                Deferred(start),
                control_r,
                self.stop,
                self.counters,
                pulse=Pulse(self.heartbeats, 0),
            )
        finally:
            control_r.close()

    def _start_actor(self, i: int) -> None:
        spec = self.spec
        exp_r, exp_w = self.ctx.Pipe(duplex=False)
        restarts = self.book.restarts[i]
        seed = self.actor_seed(i, restarts)
        start = ActorStart(
            spec,
            i,
            seed,
            spec.actor_epsilon(i),
            self.limits.nb_steps,
            stream=spec.actor_stream(i, restarts),
        )
        setup = ChildSetup(
            "actor",
            i,
            use_tensorflow=not spec.builder.use_numpy_policy,
            hide_gpu=spec.options.actors_on_cpu,
            seed=seed,
            log_level=spec.log_level,
            tf_verbose=spec.options.tf_verbose,
        )
        self.heartbeats.reset(1 + i)
        try:
            self.actors[i] = spawn_child(
                self.ctx,
                "actor",
                i,
                setup,
                actor_main,
                Deferred(start),
                self.segment.handle,
                exp_w,
                self.stop,
                self.counters,
                pulse=Pulse(self.heartbeats, 1 + i),
            )
            self.actors[i].steps_at_start = self.counters.actor_steps(i)
            self._send_control(ConnectActor(i, exp_r))  # the learner reads this actor's pipe
        finally:
            exp_w.close()
            exp_r.close()

    def _send_control(self, message: WeightsSegment | ConnectActor) -> None:
        # Pickled first, outside the `try`: handing a pipe over (`ConnectActor`) starts
        # multiprocessing's resource sharer, whose failure (an OSError too) must raise,
        # not pass for a learner that is gone and leave the actor unread.
        payload = ForkingPickler.dumps(message)
        try:
            self.control.send_bytes(payload)
        except OSError:  # the learner is gone; the next _poll reports why
            logger.debug("control pipe closed while sending %s", type(message).__name__)

    # Watching ------------------------------------------------------------------------

    def _poll(self) -> None:
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
        self._watch_stalls([c for c in live if not c.exited])

    # The stall watchdog ----------------------------------------------------------------

    @staticmethod
    def _slot(child: ChildProcess) -> int:
        return 0 if child.index is None else 1 + child.index

    def _busy(self, child: ChildProcess) -> bool:
        """Whether `child` is inside a declared long operation."""
        return self.heartbeats.busy(self._slot(child))

    def _watch_stalls(self, children: list[ChildProcess]) -> None:
        """Kills and handles every child silent for longer than `stall_timeout`."""
        timeout = self.spec.options.stall_timeout
        now = time.monotonic()
        paused = now - self._last_watch > _PARENT_PAUSE_S
        self._last_watch = now
        if timeout is None:
            return
        for child in children:
            beats = self.heartbeats.beats(self._slot(child))
            limit = timeout if child.beats else max(timeout, _FIRST_BEAT_S)
            if beats != child.beats or paused:
                child.beats = beats
                child.last_sign_of_life = now
            elif now - child.last_sign_of_life > limit:
                self._on_stall(child, now - child.last_sign_of_life)

    def _on_stall(self, child: ChildProcess, silent: float) -> None:
        timeout = self.spec.options.stall_timeout
        child.stalled_for = silent
        logger.error(
            "%s stalled: no sign of life for %.1f s (stall_timeout=%g s; frozen, e.g. by "
            "SIGSTOP, or deadlocked); killing it",
            child.name,
            silent,
            timeout,
        )
        terminate(child.process, grace=0.0)  # SIGKILL: a stopped process ends too
        self._drain(child)
        child.exited = True
        if self.stopping:
            return
        if child.role == "learner":
            raise child_error(
                child,
                f"learner stalled: no sign of life for {silent:.1f} s "
                f"(stall_timeout={timeout:g} s); it was killed",
                child.process.exitcode,
            )
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
            self._handle(child, message)

    def _handle(self, child: ChildProcess, message: Any) -> None:
        if isinstance(message, EpisodeFinished):
            self.book.record_episode(child.index, message.episode_return)
        elif isinstance(message, WeightsLayout):
            self.weights_spec = message.spec
        elif isinstance(message, ChildFailed):
            child.error = message.traceback
        elif isinstance(message, ActorSummary):
            child.summary = message
            self.book.actor_info[child.index] = dataclasses.asdict(message)
        elif isinstance(message, LearnerSummary):
            child.summary = message
            self.book.learner_info = dataclasses.asdict(message)
        elif isinstance(message, StopRequested):
            self.request_stop("callback", message.reason)
        else:
            logger.warning("ignoring an unknown message from the %s: %r", child.name, message)

    def _on_exit(self, child: ChildProcess) -> None:
        code = child.process.exitcode
        if code == 1 and child.error is None and not self.stopping and not child.beats:
            if not self.heartbeats.beats(self._slot(child)):  # its own code never ran
                raise child_error(
                    child,
                    f"the {child.name} process failed while it started, before its own code "
                    f"ran; most often: {MAIN_GUARD_HINT}",
                    code,
                    "its traceback went to stderr",
                )
        if child.role == "learner":
            if code == 0 and (
                self.book.trains_done(self.counters.learner_value("updates")) or self.stopping
            ):
                return
            if self.stopping and code != 0 and child.error is None:
                return  # terminated by the shutdown itself
            raise child_error(child, "learner failed", code)
        if code == 0 or self.stopping:
            return
        i = child.index
        if child.error is not None and self.counters.actor_steps(i) == child.steps_at_start:
            raise child_error(
                child,
                f"actor {i} failed before its first env step: a start-up failure, which "
                "a restart would repeat, so it is not restarted",
                code,
            )
        stalled = "" if child.stalled_for is None else f"stalled for {child.stalled_for:.0f} s; "
        if not self.book.may_restart(i):
            raise child_error(child, stalled + self.book.restart_refusal(i), code)
        last = (child.error or "").strip().splitlines()[-1:] or ["no traceback"]
        if stalled:
            last = [f"silent for {child.stalled_for:.1f} s, killed by the stall watchdog"]
        logger.warning("actor %d died (%s: %s); restarting it", i, describe_exit(code), last[0])
        self.book.restarts[i] += 1
        child.events.close()
        child.process.close()
        self._start_actor(i)

    # Limits and progress ---------------------------------------------------------------

    def snapshot(self) -> Progress:
        """The current `Progress`."""
        counters = self.counters
        return self.book.progress(
            env_steps=counters.total_steps(),
            actor_env_steps=tuple(counters.all_actor_steps()),
            learner_updates=counters.learner_value("updates"),
            sequences_received=counters.learner_value("sequences"),
            weights_version=counters.learner_value("version"),
            loss=counters.loss,
            episodes=sum(counters.all_actor_episodes()),
            actor_pids=tuple(None if a is None or a.exited else a.process.pid for a in self.actors),
            learner_pid=self.learner.process.pid if self.learner else None,
        )
