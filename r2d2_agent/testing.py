"""Testing utilities: the partially observable CartPole and the benchmark protocol.

Importing this module registers `"r2d2_agent/MaskedCartPole-v1"` with Gymnasium.
`train_until_solved` runs the peers' protocol (a greedy 10-episode evaluation every 2,500
training env steps, solved at a mean return of 475).
"""

from r2d2_agent.envs.masked_cartpole import (
    KEPT_INDICES,
    MASKED_CARTPOLE_ID,
    MaskedCartPole,
    make_masked_cartpole,
    register_envs,
)
from r2d2_agent.keras_rl.evaluation import train_until_solved

__all__ = [
    "KEPT_INDICES",
    "MASKED_CARTPOLE_ID",
    "MaskedCartPole",
    "make_masked_cartpole",
    "register_envs",
    "train_until_solved",
]
