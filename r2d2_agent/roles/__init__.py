"""The two roles, the builder that makes them and the loop that runs an actor.

* `R2D2Actor`: epsilon-greedy acting with a carried LSTM state, feeding a sequence adder.
* `R2D2Learner`: replay in, one compiled update per batch, weights out (TensorFlow;
  loaded on first use).
* `R2D2Builder`: where a config becomes policy, adder, replay, learner and actor.
* `EpisodeLoop`: the one episode loop, used by evaluation and `R2D2Agent.fit`.
* `VectorEpisodeLoop`, `R2D2VectorActor`: N envs per actor, one batched forward pass per
  step (distributed actors; `EnvList`, `GymVectorEnvBatch` hold the envs).
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
from r2d2_agent.roles.vector_actor import R2D2VectorActor
from r2d2_agent.roles.vector_loop import (
    EnvList,
    GymVectorEnvBatch,
    VectorEpisodeLoop,
    VectorObserver,
)

__all__ = [
    "EnvList",
    "EpisodeLoop",
    "EpisodeRecorder",
    "EpisodeObserver",
    "EpisodeResult",
    "Prediction",
    "R2D2Actor",
    "GymVectorEnvBatch",
    "R2D2Builder",
    "R2D2Learner",
    "R2D2VectorActor",
    "RecordedEpisode",
    "RecurrentState",
    "StateDiscrepancy",
    "Transition",
    "VectorEpisodeLoop",
    "VectorObserver",
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
