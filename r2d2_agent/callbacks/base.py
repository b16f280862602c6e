"""`R2D2Callback`: keras-rl callback hooks plus hooks for the distributed roles.

A callback attached to an `R2D2Agent` receives keras-rl's hooks (`on_episode_end`,
`on_step_end`, ...). Attached to an `R2D2Manager`, it also receives the hooks of the
manager (train begin/end), the learner and each actor. Those run in different processes:
a callback object is pickled into every child, so state it keeps in one role is not seen
by another.

A hook can end the whole run cleanly with `self.request_stop(reason)`: the agent's `fit`
stops before its next step; in a manager run, from any process, the parent stops every
process and `train` returns with `stop_reason == "callback"`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from r2d2_agent.compat import rl_callbacks


class R2D2Callback(rl_callbacks.Callback):
    """Base class: override the hooks you need; every hook does nothing by default."""

    _stop_requester: Callable[[str], None] | None = None

    # --- stopping the run (any process) ---
    def request_stop(self, reason: str = "callback") -> None:
        """Ends the run cleanly: `R2D2Agent.fit`/`test` before the next step, or the
        whole `R2D2Manager.train` (from the parent, the learner or any actor).

        Args:
            reason: Why, for the logs and `TrainResult.stop_detail`.

        Raises:
            RuntimeError: Outside a running `fit`, `test` or `train`.
        """
        if self._stop_requester is None:
            raise RuntimeError(
                "request_stop() works from the hooks of a running fit(), test() or "
                "R2D2Manager.train()"
            )
        self._stop_requester(str(reason))

    def set_stop_requester(self, requester: Callable[[str], None] | None) -> None:
        """Called by whoever runs the hooks with the function that ends the run (None
        when the run is over); not for users."""
        self._stop_requester = requester

    def __getstate__(self) -> dict[str, Any]:  # the requester belongs to one process
        state = dict(self.__dict__)
        state.pop("_stop_requester", None)
        return state

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

    def on_r2d2_actor_episode_end(self, actor_index: int, runner: Any, episode: Any) -> None:
        """Actor `actor_index` finished an episode (`episode`: an `EpisodeResult` with
        `episode_return`, `episode_steps`; `runner.steps` is the actor's env steps,
        `runner.epsilon` its exploration rate)."""

    def on_r2d2_actor_end(self, actor_index: int, runner: Any) -> None:
        """Actor `actor_index` is about to stop."""
