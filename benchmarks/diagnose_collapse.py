"""Why a solved masked CartPole falls off again: what changes before a collapse.

Trains the single-process agent (the masked-CartPole preset, or `--set` overrides) and
every `--interval` env steps records, beside a greedy evaluation of `--episodes`
episodes on an env of its own:

* `mean_return`: the greedy evaluation's mean return;
* `q_mean`: the mean greedy Q-value of the states the evaluation visited (network units);
* `gap_median`, `gap_small`: the median action gap `|Q(s, a0) - Q(s, a1)|` over those
  states (network units), and the share of them with a gap under `--small-gap`;
* `replay_terminal_share`: the share of live replay sequences that hold an episode's
  termination (a failure: CartPole's truncation at 500 steps is not one);
* `train_return`: the mean return of the training episodes (ε-greedy) that ended since
  the previous record.

The question it answers: does a collapse follow the replay running out of failures, the
values drifting, or the action gap closing? Prints one JSON object per record, then a
summary. Usage::

    python benchmarks/diagnose_collapse.py --seed 0 --budget 60000
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from r2d2_agent import R2D2Agent
from r2d2_agent.callbacks import R2D2Callback
from r2d2_agent.envs import make_masked_cartpole
from r2d2_agent.presets import masked_cartpole_config
from r2d2_agent.roles import R2D2Actor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overrides import parse_overrides  # noqa: E402


class Diagnosis(R2D2Callback):
    """Records the figures of the module docstring every `interval` env steps."""

    def __init__(self, interval: int, episodes: int, small_gap: float, seed: int) -> None:
        super().__init__()
        self.interval, self.episodes, self.small_gap = interval, episodes, small_gap
        self.eval_env = make_masked_cartpole()
        self.seed = seed
        self.records: list[dict] = []
        self._train_returns: list[float] = []

    def on_episode_end(self, episode: int, logs: dict | None = None) -> None:
        if logs and "episode_reward" in logs:
            self._train_returns.append(float(logs["episode_reward"]))

    def on_step_end(self, step: int, logs: dict | None = None) -> None:
        agent = self.model
        if agent.step % self.interval == 0:
            self.records.append(self.record(agent))
            print(json.dumps(self.records[-1]), flush=True)

    def record(self, agent: R2D2Agent) -> dict:
        learner = agent.learner
        actor = R2D2Actor(learner.config, learner.policy_factory(), None, 0.0, self.seed)
        actor.set_weights(learner.get_weights())
        returns, qs = [], []
        for episode in range(self.episodes):
            seed = 10_000 * (1 + len(self.records)) + episode
            obs, _ = self.eval_env.reset(seed=seed)
            actor.observe_first(obs)
            total, done = 0.0, False
            while not done:
                qs.append(actor.q_values())  # what the greedy action is chosen from
                action = actor.select_action()
                obs, reward, terminated, truncated, _ = self.eval_env.step(action)
                actor.observe(action, reward, obs, terminated, truncated)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
        q = np.asarray(qs)
        gap = np.abs(q[:, 0] - q[:, 1])
        state = learner.replay.export_state(copy=False)
        live = state["sequences.live"][: state["sequences.size"]]
        discounts = state["sequences.items.bootstrap_discount"][: state["sequences.size"]]
        masks = state["sequences.items.mask"][: state["sequences.size"]]
        terminal = ((discounts == 0.0) & (masks > 0)).any(axis=1)
        record = {
            "env_steps": int(agent.step),
            "updates": int(learner.updates),
            "mean_return": float(np.mean(returns)),
            "q_mean": float(q.max(axis=1).mean()),
            "gap_median": float(np.median(gap)),
            "gap_small": float(np.mean(gap < self.small_gap)),
            "replay_terminal_share": float(terminal[live].mean()) if live.any() else 0.0,
            "train_return": float(np.mean(self._train_returns)) if self._train_returns else None,
        }
        self._train_returns = []
        return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=60_000, help="env steps")
    parser.add_argument("--interval", type=int, default=2_500, help="env steps")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--small-gap", type=float, default=0.01)
    parser.add_argument("--set", nargs="*", default=[], help="R2D2Config field=value")
    args = parser.parse_args()
    config = masked_cartpole_config(seed=args.seed, **parse_overrides(args.set))
    agent = R2D2Agent(config)
    agent.compile()
    diagnosis = Diagnosis(args.interval, args.episodes, args.small_gap, args.seed)
    agent.fit(make_masked_cartpole(), nb_steps=args.budget, verbose=0, callbacks=[diagnosis])
    print(json.dumps({"seed": args.seed, "records": diagnosis.records}))


if __name__ == "__main__":
    main()
