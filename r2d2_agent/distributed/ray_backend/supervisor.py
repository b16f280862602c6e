"""`RaySupervisor`: one `R2D2Manager.train` call on a Ray cluster.

It connects to Ray (or starts a local instance, and then shuts it down at the end; Ray
started by the user is left running), checks that the cluster has the CPUs and GPUs the
run asks for, then starts the run's board, the learner and the actors as Ray actors
(actors spread over the nodes by default). Once per report interval (at most ten times
a second) it reads the board's snapshot (counters, episode returns, stop requests: they
change with the workers' reports) and the state of every worker: a worker that raised or
whose process or node was lost is seen at that poll. An actor is restarted up to
`max_actor_restarts` times; a lost learner stops the run with `R2D2ProcessError` holding
the remote traceback. Shutdown raises the board's stop flag, gives the workers
`shutdown_timeout` seconds, kills what is left, and keeps the learner's final weights.
SIGTERM or SIGHUP to the driver stops the run the same way (the learner writes its final
checkpoint); Ray starts its workers in process groups of their own, so a signal to the
driver's process group does not reach them, and a local Ray started for the run starts
with SIGTERM and SIGHUP blocked, so they do not tear it down either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import ray
from ray import cloudpickle
from ray.exceptions import RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from r2d2_agent.checkpoints import TrainingState
from r2d2_agent.distributed.process_setup import ChildSetup, Deferred
from r2d2_agent.distributed.ray_backend.board import BoardSnapshot, RunBoard
from r2d2_agent.distributed.ray_backend.options import RayOptions
from r2d2_agent.distributed.ray_backend.workers import (
    ActorWorker,
    LearnerOutcome,
    LearnerWorker,
    WorkerPlace,
)
from r2d2_agent.distributed.reports import Progress, R2D2ProcessError
from r2d2_agent.distributed.spec import ActorStart, LearnerStart, RunSpec, TrainLimits
from r2d2_agent.distributed.supervision import BackendSupervisor

__all__ = ["RaySupervisor"]

logger = logging.getLogger(__name__)

_POLL_S = 0.1
_PARENT_PAUSE_S = 2.0  # a longer gap between two watchdog checks: the driver paused
_FIRST_SIGN_S = 60.0  # before its first sign of life a worker gets at least this long
_NICENESS_ENV = "RAY_worker_niceness"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Worker:
    """A started Ray actor of the run: its handle, its `run` call and where it sits.

    `place` is asked before `run` is called: an actor runs its calls in order, so asked
    after, it would only answer once `run` returned.
    """

    def __init__(self, role: str, index: int | None, handle: Any) -> None:
        self.role = role
        self.index = index
        self.handle = handle
        self.place_ref = handle.place.remote()
        self.run_ref: Any = None
        self.place: WorkerPlace | None = None
        self.started_at = time.monotonic()
        self.done = False
        self.last_sign_of_life = self.started_at
        """When the driver last knew the worker alive (its start, then its signs)."""
        self.signed = False
        """Whether this worker gave a sign of life since it started."""
        self.steps_at_start = 0
        """An actor's env steps on the board when it (re)started."""

    @property
    def name(self) -> str:
        return self.role if self.index is None else f"{self.role} {self.index}"


def _remote_error(worker: _Worker, what: str, exc: BaseException) -> R2D2ProcessError:
    """The `R2D2ProcessError` for a worker that raised or was lost."""
    if isinstance(exc, RayTaskError):
        text = _ANSI.sub("", str(exc)).rstrip()  # Ray colours the remote frame's title
        message = f"{what}\n--- traceback from the {worker.name} (Ray actor) ---\n{text}"
        return R2D2ProcessError(message, worker.role, worker.index, None, text)
    where = f" on node {worker.place.hostname}" if worker.place else ""
    message = (
        f"{what}: its Ray actor{where} was lost ({type(exc).__name__}: {exc}); "
        "no traceback (the process was killed, crashed hard, or its node is gone)"
    )
    return R2D2ProcessError(message, worker.role, worker.index, None, None)


class RaySupervisor(BackendSupervisor):
    """Runs one training session of `spec` on Ray (see `R2D2Manager.train`).

    Args:
        spec: The run.
        limits: When to stop.
        initial_weights: Weights the learner starts from, as it publishes them (None:
            fresh ones).
        on_progress: Called in the driver once per `options.report_interval` (at most
            ten times a second) with a `Progress`.
        resume: A checkpoint's state to continue from (counters and learner state).
        address: The Ray cluster to connect to (`ray.init(address=...)`); None: the Ray
            already initialised in this process, else `RAY_ADDRESS`, else a cluster
            `ray start` made on this machine, else a new local instance.
        options: Placement and pacing of the Ray actors.
    """

    def __init__(
        self,
        spec: RunSpec,
        limits: TrainLimits,
        *,
        initial_weights: list[np.ndarray] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        resume: TrainingState | None = None,
        address: str | None = None,
        options: RayOptions | None = None,
    ) -> None:
        super().__init__(
            spec, limits, initial_weights=initial_weights, on_progress=on_progress, resume=resume
        )
        self.address = address
        self.options = options or RayOptions()
        self._poll_s = max(_POLL_S, self.options.report_interval)
        n = spec.nb_actors
        if resume is not None:
            counters = resume.counters
            self._start_counts = (
                tuple(counters.env_steps_per_actor(n)),
                tuple(counters.episodes_per_actor(n)),
                counters.learner_updates,
                counters.sequences_received,
            )
        else:
            self._start_counts = ((0,) * n, (0,) * n, 0, 0)
        self._started_ray = False
        self._board: Any = None
        self._learner: _Worker | None = None
        self._actors: list[_Worker | None] = [None] * n
        self._snapshot: BoardSnapshot | None = None
        self._outcome: LearnerOutcome | None = None
        self._last_watch = time.monotonic()

    # Public ----------------------------------------------------------------------------

    def _prepare(self) -> None:
        # Before the run's SIGTERM/SIGHUP handlers: a local Ray started here installs its
        # own SIGTERM handler in the driver (stop everything and exit), which the run's
        # handlers then replace while the run lasts.
        self._connect()
        self._check_resources()

    def _start(self) -> None:
        self._start_board()
        self._start_learner()
        for i in range(self.spec.nb_actors):
            self._start_actor(i)

    def _counts(self) -> dict[str, Any]:
        snap = self._snapshot
        if snap is None:
            steps, episodes, updates, sequences = self._start_counts
        else:
            steps, episodes = snap.actor_steps, snap.actor_episodes
            updates, sequences = snap.learner.updates, snap.learner.sequences
        return {
            "actor_env_steps": list(steps),
            "learner_updates": updates,
            "sequences_received": sequences,
            "episodes": sum(episodes),
        }

    def read_weights(self) -> list[np.ndarray] | None:
        """A copy of the latest published weights (None before the first)."""
        if self._board is None:
            return None
        try:
            published = ray.get(self._board.weights_if_newer.remote(0), timeout=5.0)
            if published is None:
                return None
            arrays = ray.get(published.refs[0], timeout=30.0)
        except RayError as exc:  # the learner (the owner of the object) or the board is gone
            logger.warning("could not read the published weights: %s", exc)
            return None
        self.version = published.version
        return [np.array(a) for a in arrays]

    def close(self) -> None:
        """Stops every Ray actor of the run and releases Ray if this run started it
        (idempotent)."""
        if self.stopping:
            return
        self.stopping = True
        try:
            if self._board is not None:
                self._board.set_stop.remote()
                self._wait_for_workers(self.spec.options.shutdown_timeout)
                self._refresh()
        finally:
            try:
                self._keep_final_weights()
            finally:
                for worker in [self._learner, *self._actors]:
                    if worker is not None:
                        _kill(worker.handle)
                if self._board is not None:
                    _kill(self._board)
                if self._started_ray:
                    ray.shutdown()

    # Starting --------------------------------------------------------------------------

    def _connect(self) -> None:
        if ray.is_initialized():
            if self.address is not None:
                logger.info("Ray is already initialised; ray_address=%r is not used", self.address)
            return
        if self.address is None and not os.environ.get("RAY_ADDRESS"):
            if _local_cluster_address() is not None:  # `ray start` made one here: join it
                ray.init(address=None, logging_level=logging.WARNING)
                logger.info("joined the Ray cluster running on this machine")
            else:  # a local Ray for this run
                needed = math.ceil(self.options.cpus_needed(self.spec.nb_actors))
                num_cpus = self.options.init_num_cpus or max(os.cpu_count() or 1, needed)
                with _worker_niceness_zero(), _stop_signals_blocked():
                    ray.init(
                        num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING
                    )
        else:
            ray.init(address=self.address, logging_level=logging.WARNING)
        self._started_ray = True  # connected by this run: disconnected at its end

    def _check_resources(self) -> None:
        """Refuses, before any worker starts, a run the cluster cannot place."""
        total = ray.cluster_resources()
        options = self.options
        n = self.spec.nb_actors
        for name, needed in options.resources_needed(n).items():
            have = total.get(name, 0.0)
            if needed > 0 and have + 1e-9 < needed:
                raise ValueError(
                    f"the Ray cluster has {have:g} {name} but the run asks for {needed:g} "
                    f"(learner_num_cpus={options.learner_num_cpus:g}, learner_num_gpus="
                    f"{options.learner_num_gpus:g}, actor_num={n} x actor_num_cpus="
                    f"{options.actor_num_cpus:g}, actor_resources={options.actor_resources}); "
                    "add nodes or ask for less"
                )

    def _start_board(self) -> None:
        steps, episodes, updates, sequences = self._start_counts
        board_class = ray.remote(num_cpus=0, max_restarts=0)(RunBoard)
        self._board = board_class.options(scheduling_strategy=_on_this_node()).remote(
            steps, episodes, updates, sequences, self.limits.nb_steps
        )

    def _setup(self, role: str, index: int | None, use_tf: bool, hide_gpu: bool) -> ChildSetup:
        spec = self.spec
        seed = self.learner_seed if index is None else self.actor_seed(index, self._restarts(index))
        return ChildSetup(
            role,
            index,
            use_tensorflow=use_tf,
            hide_gpu=hide_gpu,
            seed=seed,
            log_level=spec.log_level,
            tf_verbose=spec.options.tf_verbose,
        )

    def _restarts(self, index: int) -> int:
        return self.book.restarts[index]

    def _runtime_env(self) -> dict[str, Any]:
        env = self.options.runtime_env
        return {} if env is None else {"runtime_env": dict(env)}

    def _start_learner(self) -> None:
        spec, options = self.spec, self.options
        learner_class = ray.remote(LearnerWorker)
        placement = {}
        if options.learner_on_driver_node and self._this_node_fits_the_learner():
            placement["scheduling_strategy"] = _on_this_node()
        handle = learner_class.options(
            **placement,
            num_cpus=options.learner_num_cpus,
            num_gpus=options.learner_num_gpus,
            max_concurrency=spec.nb_actors + 4,  # run() + one put_experience per actor
            max_restarts=0,
            name=None,
            **self._runtime_env(),
        ).remote(
            self._setup("learner", None, True, options.learner_num_gpus == 0),
            options.inbox_size * spec.options.send_batch_size,
        )
        start = LearnerStart(spec, self.limits.nb_trains, self._initial_weights, self.resume)
        worker = _Worker("learner", None, handle)
        worker.run_ref = handle.run.remote(
            Deferred(start, cloudpickle.dumps), self._board, options.report_interval
        )
        self._learner = worker

    def _this_node_fits_the_learner(self) -> bool:
        """Whether the driver's node has the CPUs and GPUs the learner asks for."""
        here = ray.get_runtime_context().get_node_id()
        node = next((n for n in ray.nodes() if n.get("NodeID") == here), None)
        resources = {} if node is None else node.get("Resources", {})
        options = self.options
        fits = resources.get("CPU", 0.0) + 1e-9 >= options.learner_num_cpus and (
            resources.get("GPU", 0.0) + 1e-9 >= options.learner_num_gpus
        )
        if not fits:
            logger.info("the driver's node cannot hold the learner (%s); Ray places it", resources)
        return fits

    def _start_actor(self, i: int) -> None:
        spec, options = self.spec, self.options
        restarts = self._restarts(i)
        start = ActorStart(
            spec,
            i,
            self.actor_seed(i, restarts),
            spec.actor_epsilon(i),
            self.limits.nb_steps,
            stream=spec.actor_stream(i, restarts),
        )
        actor_class = ray.remote(ActorWorker)
        handle = actor_class.options(
            num_cpus=options.actor_num_cpus,
            num_gpus=0,
            max_restarts=0,
            scheduling_strategy=options.actor_scheduling,
            resources=dict(options.actor_resources or {}),
            **self._runtime_env(),
        ).remote(
            self._setup("actor", i, not spec.builder.use_numpy_policy, spec.options.actors_on_cpu)
        )
        worker = _Worker("actor", i, handle)
        worker.steps_at_start = self._counts()["actor_env_steps"][i]
        worker.run_ref = handle.run.remote(
            Deferred(start, cloudpickle.dumps),
            self._board,
            self._learner.handle,
            options.report_interval,
            options.send_ahead,
            options.send_interval,
        )
        self._actors[i] = worker

    # Watching --------------------------------------------------------------------------

    def _live(self) -> list[_Worker]:
        return [w for w in [self._learner, *self._actors] if w is not None and not w.done]

    def _poll(self) -> None:
        """Waits up to one poll for a worker to finish, then handles what happened."""
        live = self._live()
        refs = [w.run_ref for w in live] + [w.place_ref for w in live if w.place is None]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=self._poll_s)
        else:
            time.sleep(self._poll_s)
        self._refresh()
        for worker in live:  # the learner first: a lost learner explains the actors' ends
            self._check_placed(worker)
            ready, _ = ray.wait([worker.run_ref], timeout=0)
            if ready:
                worker.done = True
                if worker.role == "learner":
                    self._on_learner_done(worker)
                else:
                    self._on_actor_done(worker)
        self._watch_stalls()

    # The stall watchdog ----------------------------------------------------------------

    def _watch_stalls(self) -> None:
        """Reads every live worker's silence from the board's snapshot; kills and handles
        a worker silent for longer than `stall_timeout`."""
        timeout = self.spec.options.stall_timeout
        now = time.monotonic()
        paused = now - self._last_watch > _PARENT_PAUSE_S
        self._last_watch = now
        if timeout is None or self._snapshot is None:
            return
        silences = dict(self._snapshot.silent_for)
        for worker in self._live():
            silent = silences.get(worker.name)
            if silent is not None and now - silent > worker.started_at:  # this incarnation's
                worker.signed = True
                worker.last_sign_of_life = max(worker.last_sign_of_life, now - silent)
            if paused:
                worker.last_sign_of_life = now
            limit = timeout if worker.signed else max(timeout, _FIRST_SIGN_S)
            if now - worker.last_sign_of_life > limit:
                self._on_stall(worker, now - worker.last_sign_of_life)

    def _on_stall(self, worker: _Worker, silent: float) -> None:
        timeout = self.spec.options.stall_timeout
        logger.error(
            "%s stalled: no sign of life for %.1f s (stall_timeout=%g s; frozen, e.g. by "
            "SIGSTOP, or deadlocked); killing it",
            worker.name,
            silent,
            timeout,
        )
        _kill_worker(worker)
        worker.done = True
        if self.stopping:
            return
        what = (
            f"{worker.name} stalled: no sign of life for {silent:.1f} s "
            f"(stall_timeout={timeout:g} s)"
        )
        if worker.role == "learner":
            raise R2D2ProcessError(f"{what}; its Ray actor was killed", "learner")
        i = worker.index
        if not self.book.may_restart(i):
            raise R2D2ProcessError(f"{what}; " + self.book.restart_refusal(i), "actor", i)
        logger.warning("%s; restarting it", what)
        self.book.restarts[i] += 1
        self._start_actor(i)

    def _refresh(self) -> None:
        """Reads the board: counters, new episode returns, children's stop requests."""
        try:
            snap = ray.get(self._board.snapshot.remote(), timeout=30.0)
        except RayError as exc:
            raise R2D2ProcessError(
                f"the run's board (a Ray actor) was lost: {exc}", "board"
            ) from exc
        self._snapshot = snap
        for index, episode_return in snap.returns:
            self.book.record_episode(index, episode_return)
        for detail in snap.stop_requests:
            self.request_stop("callback", detail)

    def _check_placed(self, worker: _Worker) -> None:
        if worker.place is not None:
            return
        ready, _ = ray.wait([worker.place_ref], timeout=0)
        if ready:
            try:
                worker.place = ray.get(worker.place_ref)
            except RayError:  # the run ref reports it
                worker.place = None
                return
            logger.info(
                "%s runs on %s (pid %d)", worker.name, worker.place.hostname, worker.place.pid
            )
        elif time.monotonic() - worker.started_at > self.options.start_timeout:
            raise R2D2ProcessError(
                f"the {worker.name}'s Ray actor was not started within "
                f"{self.options.start_timeout:g} s (RayOptions.start_timeout); the cluster's "
                f"free resources: {ray.available_resources()}",
                worker.role,
                worker.index,
            )

    def _on_learner_done(self, worker: _Worker) -> None:
        try:
            self._keep_outcome(worker, ray.get(worker.run_ref))
        except RayError as exc:
            raise _remote_error(worker, "learner failed", exc) from None

    def _keep_outcome(self, worker: _Worker, outcome: LearnerOutcome) -> None:
        self._outcome = outcome
        self.book.learner_info = _with_place(dataclasses.asdict(outcome.summary), worker)

    def _on_actor_done(self, worker: _Worker) -> None:
        i = worker.index
        try:
            summary = ray.get(worker.run_ref)
        except (RayTaskError, RayActorError) as exc:
            if self.stopping:
                return
            steps = self._counts()["actor_env_steps"][i]
            if isinstance(exc, RayTaskError) and steps == worker.steps_at_start:
                raise _remote_error(
                    worker,
                    f"actor {i} failed before it reported any env step: a start-up "
                    "failure, which a restart would repeat, so it is not restarted",
                    exc,
                ) from None
            if not self.book.may_restart(i):
                raise _remote_error(worker, self.book.restart_refusal(i), exc) from None
            first_line = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
            logger.warning("actor %d failed (%s); restarting it", i, first_line[0])
            _kill(worker.handle)
            self.book.restarts[i] += 1
            self._start_actor(i)
            return
        self.book.actor_info[i] = _with_place(dataclasses.asdict(summary), worker)

    def _wait_for_workers(self, timeout: float) -> None:
        """Waits up to `timeout` seconds for the workers' `run` calls, keeping results; a
        worker inside a declared long operation (the learner writing its final
        checkpoint) gets longer, as long as it is not stalled."""
        deadline = time.monotonic() + timeout
        while self._live():
            if time.monotonic() >= deadline and not self._busy_workers():
                break
            live = self._live()
            ray.wait([w.run_ref for w in live], num_returns=len(live), timeout=_POLL_S)
            for worker in live:
                if ray.wait([worker.run_ref], timeout=0)[0]:
                    worker.done = True
                    self._collect_at_shutdown(worker)

    def _busy_workers(self) -> list[_Worker]:
        """Live workers inside a declared long operation and not stalled (refreshes the
        board's snapshot)."""
        try:
            self._refresh()
        except R2D2ProcessError:  # the board is gone: nothing to wait for
            return []
        self._watch_stalls()
        busy = set(self._snapshot.busy) if self._snapshot is not None else set()
        return [w for w in self._live() if w.name in busy]

    def _collect_at_shutdown(self, worker: _Worker) -> None:
        try:
            if worker.role == "learner":
                self._keep_outcome(worker, ray.get(worker.run_ref))
            else:
                self._on_actor_done(worker)
        except RayError as exc:
            logger.debug("%s ended with %s at shutdown", worker.name, type(exc).__name__)

    def _keep_final_weights(self) -> None:
        if self._outcome is None:
            self.final_weights = self.read_weights()
            return
        self.final_weights = [np.array(a) for a in self._outcome.weights]
        if self._snapshot is not None:  # the learner's last report came before it returned
            self.version = self._snapshot.learner.version

    # Limits and progress ---------------------------------------------------------------

    def snapshot(self) -> Progress:
        """The current `Progress`."""
        snap = self._snapshot
        return self.book.progress(
            env_steps=sum(snap.actor_steps) if snap else 0,
            actor_env_steps=tuple(snap.actor_steps) if snap else (0,) * self.spec.nb_actors,
            learner_updates=snap.learner.updates if snap else 0,
            sequences_received=snap.learner.sequences if snap else 0,
            weights_version=snap.learner.version if snap else 0,
            loss=snap.learner.loss if snap else math.nan,
            episodes=sum(snap.actor_episodes) if snap else 0,
            actor_pids=tuple(
                w.place.pid if w is not None and w.place and not w.done else None
                for w in self._actors
            ),
            learner_pid=self._learner.place.pid if self._learner and self._learner.place else None,
        )


def _local_cluster_address() -> str | None:
    """The address of the cluster `ray start` made on this machine, if any: what
    `ray.init()` would join. Asked beforehand because `ray.init(num_cpus=...)` refuses to
    join one, and a refused `ray.init` leaves the process unable to start Ray actors
    (Ray 2.60). Uses Ray's own lookup (a private helper); if that moves, a local Ray is
    started instead."""
    try:
        from ray._private.services import find_bootstrap_address

        return find_bootstrap_address(None)
    except Exception as exc:  # noqa: BLE001 - any failure of a private helper: no cluster
        logger.debug("could not look for a local Ray cluster: %s", exc)
        return None


def _with_place(info: dict[str, Any], worker: _Worker) -> dict[str, Any]:
    """A summary's dict with the worker's node id and host name, when known."""
    if worker.place is not None:
        info.update(node_id=worker.place.node_id, hostname=worker.place.hostname)
    return info


def _on_this_node() -> NodeAffinitySchedulingStrategy:
    """Ray placement on the driver's node. Hard: Ray 2.60 did not keep zero-CPU actors
    on the node of a soft affinity (half of them went elsewhere in a loopback cluster)."""
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


@contextlib.contextmanager
def _worker_niceness_zero() -> Iterator[None]:
    """Ray starts its workers at niceness 15 unless `RAY_worker_niceness` says otherwise;
    the actors and the learner are the run's work, so a local Ray started for the run
    gets 0 (the environment is restored after the start; a user's own setting wins)."""
    previous = os.environ.get(_NICENESS_ENV)
    os.environ.setdefault(_NICENESS_ENV, "0")
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_NICENESS_ENV, None)


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """Blocks SIGTERM and SIGHUP in this thread while a local Ray starts: its processes
    (GCS, raylet, agents) inherit the mask, so a SIGTERM sent to the driver's whole process
    group (they share it) stays pending in them instead of tearing Ray down before the
    learner's final checkpoint; `ray.shutdown()` still ends them (SIGKILL after its grace
    period). The driver's own handlers get any such signal when the mask is restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _kill_worker(worker: _Worker) -> None:
    """Kills a worker's Ray actor, and its process too when it runs on this machine (a
    stopped process may not answer Ray's own kill): the process of that id here must be a
    Ray worker ("ray::..."), so another machine's id never kills a process of this one."""
    _kill(worker.handle)
    place = worker.place
    if place is None or place.hostname != os.uname().nodename:
        return
    try:
        with open(f"/proc/{place.pid}/cmdline", "rb") as cmdline:
            if not cmdline.read().startswith(b"ray::"):
                return
        os.kill(place.pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass


def _kill(handle: Any) -> None:
    try:
        ray.kill(handle, no_restart=True)
    except (RayError, ValueError) as exc:  # already gone
        logger.debug("ray.kill: %s", exc)
