"""The learning curve of a run directory, drawn with matplotlib.

    python -m r2d2_agent.plot RUN_DIR [-o FILE.png] [--window 20] [--metric NAME ...]

Top: episode return against env steps (all actors together): one faint line per actor,
the moving average over all actors' episodes, and the evaluation points when the run has
any. Below: the learner's loss (and mean Q, in return units when the run logged them,
on a second axis) against env steps. Each
`--metric NAME` (a custom metric of `log_metric`, with or without its `custom/` prefix)
adds a panel: its values against env steps, one line per process that logged it.
Without `-o` the picture is written to `RUN_DIR/learning_curve.png`. Also available at the
end of a run as `RunLogCallback(..., plot=True)`.

`plot_state_discrepancy` draws the recurrent-state diagnostic
(`R2D2Agent.state_discrepancy`, Kapturowski et al. 2019, Fig. 1).

This module imports matplotlib (never TensorFlow); the TF-free layers never import it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from r2d2_agent.runlog import RunLog, read_run

__all__ = ["DEFAULT_NAME", "main", "moving_average", "plot_run", "plot_state_discrepancy"]

logger = logging.getLogger(__name__)

DEFAULT_NAME = "learning_curve.png"
"""File name of the picture inside the run directory when no output is given."""


def moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing mean over the last `window` values (fewer at the start)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, values.size + 1)
    start = np.maximum(idx - window, 0)
    return (sums[idx] - sums[start]) / (idx - start)


def _draw_returns(ax, log: RunLog, window: int) -> None:
    episodes = log.episodes_by_time()
    if not episodes:
        ax.text(0.5, 0.5, "no finished episode yet", ha="center", transform=ax.transAxes)
    for index in sorted(log.actors):
        mine = [e for e in episodes if int(e.get("actor", 0)) == index]
        x = [e["total_env_steps"] for e in mine]
        y = [e.get("episode_return") for e in mine]
        ax.plot(x, y, lw=0.8, alpha=0.45, label=f"actor {index}")
    if episodes:
        x = [e["total_env_steps"] for e in episodes]
        y = moving_average([e.get("episode_return") or 0.0 for e in episodes], window)
        ax.plot(x, y, color="black", lw=2.0, label=f"all actors, mean of last {window}")
    if log.evaluations:
        x = [e.get("env_steps", 0) for e in log.evaluations]
        y = [e.get("mean_return") for e in log.evaluations]
        ax.plot(x, y, "o", color="tab:red", ms=6, label="evaluation (mean return)")
    ax.set_xlabel("env steps (all actors)")
    ax.set_ylabel("episode return")
    ax.grid(alpha=0.3)
    if episodes or log.evaluations:
        ax.legend(loc="best", fontsize="small")


def _draw_learner(ax, log: RunLog) -> None:
    records = [r for r in log.learner if r.get("loss") is not None]
    if not records:
        ax.text(0.5, 0.5, "no learner update logged", ha="center", transform=ax.transAxes)
        ax.set_xlabel("env steps")
        return
    use_steps = all("env_steps" in r for r in records)
    x = [r["env_steps"] if use_steps else r.get("updates", 0) for r in records]
    loss = [r["loss"] for r in records]
    ax.plot(x, loss, color="tab:blue", lw=1.2, label="TD loss")
    if min(loss) > 0:
        ax.set_yscale("log")
    ax.set_ylabel("TD loss", color="tab:blue")
    ax.set_xlabel("env steps (all actors)" if use_steps else "learner updates")
    ax.grid(alpha=0.3)
    # Return units when the run logged them (h⁻¹ of the mean), else the network's units.
    field, unit = ("mean_q_return", "return units")
    if any(r.get(field) is None for r in records):
        field, unit = ("mean_q_network", "network units")
    mean_q = [r.get(field) for r in records]
    if all(q is not None for q in mean_q):
        twin = ax.twinx()
        twin.plot(x, mean_q, color="tab:orange", lw=1.0, label="mean Q")
        twin.set_ylabel(f"mean Q ({unit})", color="tab:orange")


def _draw_metric(ax, log: RunLog, name: str) -> None:
    for process, records in sorted(log.metric(name).items()):
        kept = [r for r in records if r.get("value") is not None]
        x = [r.get("env_steps") or 0 for r in kept]
        ax.plot(x, [r["value"] for r in kept], lw=1.0, marker=".", ms=3, label=process)
    ax.set_xlabel("env steps (all actors)")
    ax.set_ylabel(f"custom/{name.removeprefix('custom/')}")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def plot_run(
    run_dir: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    window: int = 20,
    metrics: Sequence[str] = (),
) -> str:
    """Draws the learning curve of `run_dir` into a PNG file.

    Args:
        run_dir: A run directory written by `RunLogCallback`.
        output: The PNG file; `run_dir/learning_curve.png` when None.
        window: Episodes in the moving average.
        metrics: Custom metrics (`log_metric` names, `custom/` prefix optional), one
            panel each.

    Returns:
        The file written.

    Raises:
        FileNotFoundError: If `run_dir` does not exist.
        ValueError: If it holds no run log, `window` is below 1, or a metric was never
            logged (the message lists those that were).
    """
    from matplotlib.figure import Figure

    if window < 1:
        raise ValueError(f"window must be >= 1, got {window!r}")
    log = read_run(run_dir)
    missing = [m for m in metrics if not log.metric(m)]
    if missing:
        raise ValueError(
            f"{run_dir} has no custom metric {', '.join(missing)}; "
            f"logged: {', '.join(log.metric_names) or 'none'}"
        )
    output = os.fspath(output) if output is not None else os.path.join(run_dir, DEFAULT_NAME)
    figure = Figure(figsize=(10, 7.5 + 2.5 * len(metrics)), layout="constrained")
    ax_returns, ax_learner, *ax_metrics = figure.subplots(2 + len(metrics), 1)
    _draw_returns(ax_returns, log, window)
    _draw_learner(ax_learner, log)
    for ax, name in zip(ax_metrics, metrics, strict=True):
        _draw_metric(ax, log, name)
    title = os.path.basename(os.path.normpath(os.fspath(run_dir)))
    if log.info and "config" in log.info:
        config = log.info["config"]
        title += f"  (lstm {config.get('lstm_units')}, lr {config.get('learning_rate')})"
    figure.suptitle(title)
    return _save(figure, output)


_DISCREPANCY_STYLES = {
    # variant: (label, colour, line style) -- stored solid, zero dashed; burn-in darker
    "stored_burnin": ("stored state, burn-in", "tab:blue", "-"),
    "stored": ("stored state, no burn-in", "tab:cyan", "-"),
    "zero_burnin": ("zero state, burn-in", "tab:red", "--"),
    "zero": ("zero state, no burn-in", "tab:orange", "--"),
}


def _save(figure: Any, output: str) -> str:
    """Writes a figure to `output` atomically (temporary file, then rename)."""
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    tmp = f"{output}.{os.getpid()}.tmp.png"
    try:
        figure.savefig(tmp, dpi=100)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return output


def plot_state_discrepancy(
    result: Any,
    path: str | os.PathLike[str],
    title: str | None = None,
    log_scale: bool = False,
    statistic: str = "mean",
) -> str:
    """Draws the recurrent-state diagnostic: mean Q-value discrepancy against the step
    of the trained window, one curve per start (stored or zero state, with or without
    burn-in), as Kapturowski et al. (2019), Fig. 1.

    Args:
        result: A `StateDiscrepancy` (`R2D2Agent.state_discrepancy`): its `by_step`,
            `counts`, `burnin`, `nb_sequences` and `nb_episodes` are used.
        path: The PNG file to write.
        title: The figure's title (default: burn-in and how many sequences).
        log_scale: A logarithmic y axis.
        statistic: "mean" (`by_step`, the paper's) or "median" (`median_by_step`) over
            the sequences.

    Returns:
        The file written.

    Raises:
        ValueError: If `result` holds no variant to draw, or on another `statistic`.
    """
    from matplotlib.figure import Figure

    if statistic not in ("mean", "median"):
        raise ValueError(f'statistic must be "mean" or "median", got {statistic!r}')
    by_step = getattr(result, "by_step" if statistic == "mean" else "median_by_step", None)
    if not by_step or not any(name in by_step for name in _DISCREPANCY_STYLES):
        raise ValueError(f"result has no state discrepancy to draw: {result!r}")
    figure = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = figure.subplots()
    for name, (label, colour, style) in _DISCREPANCY_STYLES.items():
        if name in by_step:
            values = np.asarray(by_step[name], dtype=np.float64)
            ax.plot(np.arange(values.size), values, style, color=colour, marker=".", label=label)
    ax.set_xlabel("step of the trained window (after burn-in)")
    ax.set_ylabel(f"{statistic} ΔQ = ‖q(ĥ) − q(h*)‖₂ / |max q(h*)|")
    if log_scale:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0.0)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    if title is None:
        title = (
            f"recurrent-state discrepancy: burn-in {getattr(result, 'burnin', '?')}, "
            f"{getattr(result, 'nb_sequences', '?')} sequences of "
            f"{getattr(result, 'nb_episodes', '?')} episodes"
        )
    ax.set_title(title, fontsize="medium")
    return _save(figure, os.fspath(path))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: `python -m r2d2_agent.plot RUN_DIR [-o FILE.png] [--metric NAME]`."""
    parser = argparse.ArgumentParser(
        prog="python -m r2d2_agent.plot",
        description="Draw return vs env steps and the learner loss of an r2d2-agent run.",
    )
    parser.add_argument("run_dir", help="a run directory written by RunLogCallback")
    parser.add_argument("-o", "--output", help=f"PNG file (default: RUN_DIR/{DEFAULT_NAME})")
    parser.add_argument("--window", type=int, default=20, help="episodes in the moving average")
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME",
        help="a custom metric (log_metric; e.g. custom/q_spread) in a panel of its own; repeatable",
    )
    args = parser.parse_args(argv)
    try:
        path = plot_run(args.run_dir, args.output, args.window, args.metric)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
