"""`R2D2Callback`: keras-rl callback hooks plus hooks for the distributed roles.

A callback attached to an `R2D2Agent` receives keras-rl's hooks (`on_episode_end`,
`on_step_end`, ...). Attached to an `R2D2Manager`, it also receives the hooks of the
manager (train begin/end), the learner and each actor. Those run in different processes:
a callback object is pickled into every child, so state it keeps in one role is not seen
by another.
"""

from __future__ import annotations

from typing import Any

from r2d2_agent.compat import rl_callbacks


class R2D2Callback(rl_callbacks.Callback):
    """Base class: override the hooks you need; every hook does nothing by default."""

    # --- manager (parent process) ---
    def on_r2d2_train_begin(self) -> None:
        """The manager is about to start its processes."""

    def on_r2d2_train_end(self) -> None:
        """The manager's run ended (all processes stopped)."""

    # --- learner process ---
    def on_r2d2_learner_begin(self, learner: Any) -> None:
        """The learner is built (weights can be loaded here)."""

    def on_r2d2_learner_end(self, learner: Any) -> None:
        """The learner is about to stop (weights can be saved here)."""

    def on_r2d2_learner_train_begin(self, learner: Any) -> None:
        """Before one learner update."""

    def on_r2d2_learner_train_end(self, learner: Any) -> None:
        """After one learner update (`learner.updates` counts them)."""

    # --- actor processes ---
    def on_r2d2_actor_begin(self, actor_index: int, runner: Any) -> None:
        """Actor `actor_index` is built."""

    def on_r2d2_actor_end(self, actor_index: int, runner: Any) -> None:
        """Actor `actor_index` is about to stop."""
