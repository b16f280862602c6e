"""Calling `R2D2Callback` hooks in any process (moved to `r2d2_agent.roles.hooks`, which the
single-process agent shares; re-exported here for the distributed loops and backends)."""

from r2d2_agent.roles.hooks import bind_stop_requester, call_hooks

__all__ = ["bind_stop_requester", "call_hooks"]
