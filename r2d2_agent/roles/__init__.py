"""The two roles, the builder that makes them and the loop that runs an actor.

* `R2D2Actor`: epsilon-greedy acting with a carried LSTM state, feeding a sequence adder.
* `R2D2Learner`: replay in, one compiled update per batch, weights out (TensorFlow;
  loaded on first use).
* `R2D2Builder`: where a config becomes policy, adder, replay, learner and actor.
* `EpisodeLoop`: the one episode loop, used by actors, evaluation and `R2D2Agent.fit`.
* `RecurrentState`, `recurrent_step`: acting from a state passed in and returned
  (`R2D2Agent.predict`).
* `EpisodeRecorder`, `StateDiscrepancy`: the recurrent-state diagnostic (is burn-in long
  enough?) on recorded episodes (`roles.state_discrepancy`, `R2D2Agent.state_discrepancy`).

None of them knows whether it runs in one process, several, or on a cluster.
"""

from __future__ import annotations

import importlib
from typing import Any

from r2d2_agent.roles.actor import R2D2Actor
from r2d2_agent.roles.builder import R2D2Builder, resolve_use_numpy
from r2d2_agent.roles.episode_loop import (
    EpisodeLoop,
    EpisodeObserver,
    EpisodeResult,
    Transition,
    play_episodes,
)
from r2d2_agent.roles.prediction import Prediction, RecurrentState, recurrent_step
from r2d2_agent.roles.state_discrepancy import (
    EpisodeRecorder,
    RecordedEpisode,
    StateDiscrepancy,
)

__all__ = [
    "EpisodeLoop",
    "EpisodeRecorder",
    "EpisodeObserver",
    "EpisodeResult",
    "Prediction",
    "R2D2Actor",
    "R2D2Builder",
    "R2D2Learner",
    "RecordedEpisode",
    "RecurrentState",
    "StateDiscrepancy",
    "Transition",
    "play_episodes",
    "recurrent_step",
    "resolve_use_numpy",
]


def __getattr__(name: str) -> Any:
    if name in ("R2D2Learner", "METRIC_NAMES"):
        value = getattr(importlib.import_module("r2d2_agent.roles.learner"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'r2d2_agent.roles' has no attribute {name!r}")
