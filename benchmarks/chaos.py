"""Benchmark: a chaos run. CartPole trains with the manager for `--minutes` while faults are
injected; what each fault costs, and whether anything is left behind.

The run is a script of its own (this file with `--child`, in a session of its own, as a
scheduler starts a job): two numpy actors and a learner on the CartPole preset, a
`CheckpointCallback` every `--checkpoint-interval` learner updates with the replay
(`save_replay=True`, so a resumed run samples at once and a checkpoint being written is a
file worth reclaiming). After each fault that ends the run, the next run resumes from the
checkpoint directory, as a scheduler's restart would. Faults, at fractions of the time:

* ``actor_sigkill`` (0.10, 0.18, 0.75): SIGKILL to one actor; the manager restarts it.
* ``learner_sigstop`` (0.28): SIGSTOP to the learner, held past the manager's stall
  timeout (`--stall-timeout`); the run must end with an error naming the learner, then
  resume. Skipped (and said so) if `R2D2Manager` has no stall-timeout argument.
* ``group_sigterm`` (0.45): SIGTERM to the run's whole process group (what `docker stop`,
  systemd, Kubernetes and Slurm send), then a resume.
* ``group_sigkill`` (0.62, 0.87): SIGKILL to the whole group (the resource tracker dies
  too), the first one while a checkpoint is being written if one starts within a few
  seconds (it polls for the temp file), then a resume.

For each fault: how long the run was down (`seconds_down`: from the fault to env steps
growing again; for an actor, that actor's steps), env steps discarded (counted by the
faulted run but not in the checkpoint the next run resumed from; for an actor kill, its
unsent part of a sequence is not measured), env steps idle (the rate before the fault
times the time down: steps not made), their sum `env_steps_lost`, and the segments and
temp files the faulted run left (before the next run starts, and after it did). At the
end: every checkpoint file loadable, the segments of every run and the temp files in the
checkpoint directory left (0 expected), processes left, and a greedy evaluation of the
final weights (10 episodes; solved at a mean >= 475). Greedy evaluations every
`--eval-interval` env steps along the way (in the run's parent, numpy policy) tell when
CartPole was first solved and how often it stayed so; `--no-faults` is the control, the
same run without any fault.

Usage::

    nice -n 5 python benchmarks/chaos.py                 # 10 minutes, the RESULTS.md run
    nice -n 5 python benchmarks/chaos.py --no-faults     # the control
    python benchmarks/chaos.py --minutes 2               # run_all's quick pass
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import gymnasium as gym

from r2d2_agent.callbacks import CheckpointCallback
from r2d2_agent.checkpoints import CheckpointError, checkpoint_files, read_checkpoint
from r2d2_agent.distributed import R2D2Manager, R2D2ProcessError
from r2d2_agent.leftovers import find_segments, find_temp_files
from r2d2_agent.presets import cartpole_config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from header import report_header  # noqa: E402

CARTPOLE = functools.partial(gym.make, "CartPole-v1")
SOLVED = 475.0
SCHEDULE = (
    (0.10, "actor_sigkill", 0),
    (0.18, "actor_sigkill", 1),
    (0.28, "learner_sigstop", None),
    (0.45, "group_sigterm", None),
    (0.62, "group_sigkill", "during_save"),
    (0.75, "actor_sigkill", 0),
    (0.87, "group_sigkill", None),
)
"""(fraction of the run's time, fault, argument)."""


def stall_argument() -> str | None:
    """The name of `R2D2Manager`'s stall-timeout argument, None if it has none."""
    names = inspect.signature(R2D2Manager.__init__).parameters
    return next((n for n in names if "stall" in n or "watchdog" in n), None)


# ----------------------------------------------------------------- the run (child) ----
def _emit(kind: str, data: dict) -> None:
    print(f"{kind} {json.dumps(data)}", flush=True)


def child(args: argparse.Namespace) -> int:
    """One run: trains until `--seconds`, printing PROGRESS lines (5 a second), then RESULT
    (and, with `--evaluate`, a greedy evaluation), or ERROR if the manager raised."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    kwargs = {}
    if args.stall_timeout and stall_argument():
        kwargs[stall_argument()] = args.stall_timeout
    checkpoints = CheckpointCallback(
        args.checkpoints, interval=args.checkpoint_interval, keep=3, save_replay=True
    )
    manager = R2D2Manager(
        CARTPOLE,
        cartpole_config(seed=args.seed),
        actor_num=2,
        callbacks=[checkpoints],
        progress=False,
        **kwargs,
    )
    last, next_eval = [0.0], [0]

    def on_progress(p) -> None:
        if p.env_steps >= next_eval[0] and p.weights_version > 0:  # numpy policy, no TF here
            if next_eval[0] > 0:
                returns = manager.evaluate(10, seed=10_000)
                _emit("EVAL", {"env_steps": p.env_steps, "mean": statistics.mean(returns)})
            next_eval[0] = (p.env_steps // args.eval_interval + 1) * args.eval_interval
        now = time.monotonic()
        if now - last[0] >= 0.2:
            last[0] = now
            fields = ("env_steps", "learner_updates", "learner_pid", "recent_mean_return")
            data = {name: getattr(p, name) for name in fields}
            data.update(
                actor_env_steps=list(p.actor_env_steps),
                actor_pids=list(p.actor_pids),
                actor_restarts=list(p.actor_restarts),
            )
            _emit("PROGRESS", data)

    try:
        with manager:
            result = manager.train(
                nb_steps=10**9,
                max_seconds=args.seconds,
                on_progress=on_progress,
                resume_from=args.checkpoints if args.resume else None,
            )
            out = {
                "stop_reason": result.stop_reason,
                "env_steps": result.env_steps,
                "learner_updates": result.learner_updates,
                "actor_restarts": result.actor_restarts,
            }
            if args.evaluate and result.stop_reason == "max_seconds":
                out["eval_returns"] = manager.evaluate(10, seed=10_000)
    except R2D2ProcessError as exc:
        _emit("ERROR", {"error": str(exc)[-1500:]})
        return 1
    _emit("RESULT", out)
    return 0


# ----------------------------------------------------------------- the harness --------
class Run:
    """One run of the child script, in a session of its own, its lines read by a thread."""

    def __init__(self, args: argparse.Namespace, index: int, seconds: float, resume: bool):
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            "--checkpoints",
            args.checkpoints,
            "--seconds",
            f"{seconds:.1f}",
            "--seed",
            str(args.seed),
            "--checkpoint-interval",
            str(args.checkpoint_interval),
            "--stall-timeout",
            str(args.stall_timeout),
            "--eval-interval",
            str(args.eval_interval),
            "--evaluate",
        ]
        if resume:
            command.append("--resume")
        self.index = index
        self.log = os.path.join(args.workdir, f"run-{index}.log")
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                start_new_session=True,
            )  # fmt: skip
        self.started = time.monotonic()
        self.progress: list[tuple[float, dict]] = []
        self.evals: list[dict] = []
        self.result: dict | None = None
        self.error: dict | None = None
        self.pids: set[int] = set()
        self.ended: str | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            kind, _, text = line.partition(" ")
            if kind == "PROGRESS":
                data = json.loads(text)
                self.progress.append((time.monotonic(), data))
                self.pids.update(p for p in [data["learner_pid"], *data["actor_pids"]] if p)
            elif kind == "EVAL":
                self.evals.append(json.loads(text))
            elif kind == "RESULT":
                self.result = json.loads(text)
            elif kind == "ERROR":
                self.error = json.loads(text)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def last(self) -> dict | None:
        return self.progress[-1][1] if self.progress else None

    def max_steps(self) -> int:
        return max((p["env_steps"] for _, p in self.progress), default=0)

    def wait_for(self, predicate, timeout: float) -> tuple[float, dict] | None:
        """The first progress line from now on that satisfies `predicate` (None on timeout
        or exit)."""
        seen, deadline = len(self.progress), time.monotonic() + timeout
        while time.monotonic() < deadline:
            while seen < len(self.progress):
                when, data = self.progress[seen]
                seen += 1
                if predicate(data):
                    return when, data
            if self.proc.poll() is not None and seen == len(self.progress):
                return None
            time.sleep(0.05)
        return None

    def rate(self, key=lambda p: p["env_steps"], window: float = 30.0) -> float:
        """Env steps per second over the last `window` seconds of progress."""
        if len(self.progress) < 2:
            return 0.0
        end_t, end = self.progress[-1]
        start_t, start = next(
            ((t, p) for t, p in self.progress if t >= end_t - window), self.progress[0]
        )
        return (key(end) - key(start)) / max(end_t - start_t, 1e-9)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, IndexError):
        return False


def _leftovers(checkpoints: str, pids: set[int]) -> dict:
    segments = [s for s in find_segments() if s.pid in pids]
    temps = find_temp_files(checkpoints)
    return {"segments": len(segments), "temp_files": len(temps)}


def _load_latest(checkpoints: str, report: dict) -> int:
    """Env steps of the directory's latest checkpoint (counted as a load), 0 if none."""
    if not checkpoint_files(checkpoints):
        return 0
    report["checkpoints_checked"] += 1
    try:
        steps = read_checkpoint(checkpoints).counters.env_steps
    except CheckpointError as exc:
        report["checkpoint_errors"].append(str(exc))
        return 0
    report["checkpoints_loadable"] += 1
    return steps


class Chaos:
    """Runs the schedule; `report` is the JSON printed at the end."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.total = args.minutes * 60.0
        self.t0 = time.monotonic()
        self.runs: list[Run] = []
        self.report = {
            **report_header("chaos"),
            "minutes": args.minutes,
            "no_faults": args.no_faults,
            "seed": args.seed,
            "stall_argument": stall_argument(),
            "stall_timeout_s": args.stall_timeout,
            "checkpoint_interval_updates": args.checkpoint_interval,
            "faults": [],
            "checkpoints_checked": 0,
            "checkpoints_loadable": 0,
            "checkpoint_errors": [],
        }

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def start_run(self, resume: bool) -> Run:
        seconds = max(self.total - self.elapsed(), 20.0)
        run = Run(self.args, len(self.runs), seconds, resume)
        self.runs.append(run)
        return run

    def resume(self, record: dict, faulted: Run, fault_time: float) -> Run:
        """Counts what `faulted` left, resumes from the latest checkpoint, and records the
        time down and the env steps discarded."""
        faulted.proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in faulted.pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        record["processes_left"] = sum(_alive(p) for p in faulted.pids)
        record["left_before_resume"] = _leftovers(self.args.checkpoints, {faulted.pid})
        resumed_steps = _load_latest(self.args.checkpoints, self.report)
        record["resumed_from_env_steps"] = resumed_steps
        record["env_steps_discarded"] = max(faulted.max_steps() - resumed_steps, 0)
        run = self.start_run(resume=resumed_steps > 0)
        up = run.wait_for(lambda p: p["env_steps"] > resumed_steps, 180)
        if up is not None:
            record["seconds_down"] = round(up[0] - fault_time, 1)
            time.sleep(2.0)  # the learner's CheckpointCallback reclaims when it begins
        record["left_after_resume"] = _leftovers(self.args.checkpoints, {faulted.pid})
        return run

    # Faults --------------------------------------------------------------------------
    def actor_sigkill(self, run: Run, record: dict, index: int) -> Run:
        last = run.last
        pid, restarts = last["actor_pids"][index], last["actor_restarts"][index]
        rate = run.rate(lambda p: p["actor_env_steps"][index])
        os.kill(pid, signal.SIGKILL)
        fault_time = time.monotonic()
        record.update(target=f"actor {index}", pid=pid, env_steps_per_s_before=round(rate, 1))
        restarted = run.wait_for(lambda p: p["actor_restarts"][index] > restarts, 120)
        if restarted is not None:
            steps = restarted[1]["actor_env_steps"][index]
            up = run.wait_for(lambda p: p["actor_env_steps"][index] > steps, 120)
            if up is not None:
                record["seconds_down"] = round(up[0] - fault_time, 1)
        record["env_steps_discarded"] = None  # its unsent part of a sequence: not measured
        record["recovered"] = "seconds_down" in record
        return run

    def learner_sigstop(self, run: Run, record: dict, _: object) -> Run:
        pid = run.last["learner_pid"]
        record.update(target="learner", pid=pid, env_steps_per_s_before=round(run.rate(), 1))
        os.kill(pid, signal.SIGSTOP)
        fault_time = time.monotonic()
        try:
            run.proc.wait(self.args.stall_timeout + 120)
        except subprocess.TimeoutExpired:
            record["hung"] = True
            os.kill(pid, signal.SIGCONT)
            os.killpg(run.pid, signal.SIGKILL)
        record["detected_after_s"] = round(time.monotonic() - fault_time, 1)
        record["run_error_names_learner"] = bool(run.error and "learner" in run.error["error"])
        run.ended = "stall error" if run.error else f"exit {run.proc.returncode}"
        new = self.resume(record, run, fault_time)
        record["recovered"] = "seconds_down" in record and not record.get("hung", False)
        return new

    def group_sigterm(self, run: Run, record: dict, _: object) -> Run:
        record.update(target="group", pid=run.pid, env_steps_per_s_before=round(run.rate(), 1))
        os.killpg(run.pid, signal.SIGTERM)
        fault_time = time.monotonic()
        try:
            run.proc.wait(120)
        except subprocess.TimeoutExpired:
            record["hung"] = True
            os.killpg(run.pid, signal.SIGKILL)
        record["stopped_after_s"] = round(time.monotonic() - fault_time, 1)
        record["exit_code"] = run.proc.returncode
        record["stop_reason"] = run.result["stop_reason"] if run.result else None
        run.ended = f"SIGTERM: {record['stop_reason'] or f'exit {run.proc.returncode}'}"
        new = self.resume(record, run, fault_time)
        record["recovered"] = "seconds_down" in record and not record.get("hung", False)
        return new

    def group_sigkill(self, run: Run, record: dict, when: str | None) -> Run:
        record.update(target="group", pid=run.pid, env_steps_per_s_before=round(run.rate(), 1))
        record["during_checkpoint_save"] = False
        if when == "during_save":  # wait (a little) for a checkpoint being written
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if any(n.endswith(".tmp") for n in os.listdir(self.args.checkpoints)):
                    record["during_checkpoint_save"] = True
                    break
                time.sleep(0.002)
        os.killpg(run.pid, signal.SIGKILL)
        fault_time = time.monotonic()
        run.ended = "SIGKILL"
        new = self.resume(record, run, fault_time)
        record["recovered"] = "seconds_down" in record
        return new

    # The schedule --------------------------------------------------------------------
    def wait_until(self, run: Run, at: float) -> Run:
        """Waits for the schedule's time, restarting a run that ended unexpectedly; then
        for a run that has trained past its first checkpoint."""
        while True:
            if run.proc.poll() is not None:  # an unexpected end: record it, resume
                run.ended = run.ended or f"unexpected exit {run.proc.returncode}"
                self.report.setdefault("unexpected_ends", []).append(
                    {"run": run.index, "exit_code": run.proc.returncode, "error": run.error}
                )
                run = self.start_run(resume=bool(checkpoint_files(self.args.checkpoints)))
            if self.elapsed() >= at and run.last and checkpoint_files(self.args.checkpoints):
                return run
            time.sleep(0.1)

    def run(self) -> dict:
        os.makedirs(self.args.checkpoints, exist_ok=True)
        run = self.start_run(resume=False)
        for fraction, fault, argument in () if self.args.no_faults else SCHEDULE:
            record = {"fault": fault}
            if fault == "learner_sigstop" and stall_argument() is None:
                record["skipped"] = "R2D2Manager has no stall-timeout argument"
                self.report["faults"].append(record)
                continue
            run = self.wait_until(run, fraction * self.total)
            record["at_s"] = round(self.elapsed(), 1)
            record["run"] = run.index
            record["env_steps_at_fault"] = run.last["env_steps"]
            run = getattr(self, fault)(run, record, argument)
            rate = record.get("env_steps_per_s_before", 0.0)
            idle = round(rate * record.get("seconds_down", 0.0))
            record["env_steps_idle"] = idle
            record["env_steps_lost"] = idle + (record["env_steps_discarded"] or 0)
            self.report["faults"].append(record)
            print(json.dumps(record), file=sys.stderr, flush=True)
        run.proc.wait(self.total + 300)
        run.ended = run.result["stop_reason"] if run.result else f"exit {run.proc.returncode}"
        time.sleep(1.0)
        return self.finish(run)

    def finish(self, last: Run) -> dict:
        report, ckdir = self.report, self.args.checkpoints
        for _, path in checkpoint_files(ckdir):
            report["checkpoints_checked"] += 1
            try:
                read_checkpoint(path)
                report["checkpoints_loadable"] += 1
            except CheckpointError as exc:
                report["checkpoint_errors"].append(str(exc))
        injected = [f for f in report["faults"] if "skipped" not in f]
        lost: dict[str, list[int]] = {}
        for f in injected:
            lost.setdefault(f["fault"], []).append(f["env_steps_lost"])
        every_pid = set().union(*(r.pids for r in self.runs))
        left = _leftovers(ckdir, {r.pid for r in self.runs})
        returns = (last.result or {}).get("eval_returns")
        evals = [(e["env_steps"], round(e["mean"], 1)) for r in self.runs for e in r.evals]
        first = next((i for i, (_, mean) in enumerate(evals) if mean >= SOLVED), None)
        report.update(
            evals_during=evals,
            first_solved_env_steps=None if first is None else evals[first][0],
            evals_solved_after_first=None
            if first is None
            else f"{sum(mean >= SOLVED for _, mean in evals[first:])} of {len(evals) - first}",
        )
        report.update(
            faults_injected=len(injected),
            faults_recovered=sum(bool(f.get("recovered")) for f in injected),
            runs=len(self.runs),
            runs_completed=sum(r.proc.returncode == 0 for r in self.runs),
            run_endings=[r.ended for r in self.runs],
            env_steps_final=(last.result or {}).get("env_steps"),
            learner_updates_final=(last.result or {}).get("learner_updates"),
            env_steps_lost_per_fault={k: statistics.median(v) for k, v in lost.items()},
            env_steps_lost_total=sum(sum(v) for v in lost.values()),
            segments_left=left["segments"],
            temp_files_left=left["temp_files"],
            processes_left=sum(_alive(p) for p in every_pid | {r.pid for r in self.runs}),
            eval_returns=returns,
            eval_mean=None if not returns else round(statistics.mean(returns), 1),
            solved_at_end=bool(returns) and statistics.mean(returns) >= SOLVED,
            seconds=round(self.elapsed(), 1),
        )
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the chaos run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--stall-timeout", type=float, default=30.0, help="the manager's, in seconds"
    )
    parser.add_argument(
        "--checkpoint-interval", type=int, default=100, help="learner updates between saves"
    )
    parser.add_argument(
        "--eval-interval", type=int, default=5_000, help="env steps between greedy evaluations"
    )
    parser.add_argument(
        "--no-faults", action="store_true", help="the control: the same run, no fault injected"
    )
    parser.add_argument("--workdir", default=None, help="where checkpoints and logs go")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoints", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--evaluate", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.exit(child(args))
    with tempfile.TemporaryDirectory(prefix="r2d2-chaos-") as tmp:
        args.workdir = args.workdir or tmp
        os.makedirs(args.workdir, exist_ok=True)
        args.checkpoints = os.path.join(args.workdir, "checkpoints")
        chaos = Chaos(args)
        try:
            report = chaos.run()
        finally:
            for run in chaos.runs:  # whatever happened: no run stays behind
                if run.proc.poll() is None:
                    os.killpg(run.pid, signal.SIGKILL)
                    run.proc.wait()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
