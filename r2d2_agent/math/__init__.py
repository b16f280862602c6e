"""The R2D2 math as pure functions: numpy here, the same formulas in TensorFlow in `tf_ops`.

Nothing in this package keeps state. The numpy functions serve the actors (initial
priorities), the sequence adder, the learner's host side and the tests; `tf_ops` (which
imports TensorFlow) serves the learner's compiled graph and is tested against them.
"""

from r2d2_agent.math.priorities import importance_weights, sequence_priorities
from r2d2_agent.math.rescaling import (
    RESCALE_EPS,
    inverse_rescale,
    inverse_rescale_float,
    rescale,
    rescale_float,
    sign_float,
)
from r2d2_agent.math.reward_scale import (
    REWARD_SCALE_EPS,
    check_reward_moments,
    merge_reward_moments,
    reward_scale,
)
from r2d2_agent.math.schedules import annealed_epsilon, apex_epsilon, linear_schedule
from r2d2_agent.math.seeding import SEED_LIMIT, resumed_seed
from r2d2_agent.math.targets import action_gaps, n_step_returns, n_step_targets, td_errors

__all__ = [
    "RESCALE_EPS",
    "REWARD_SCALE_EPS",
    "SEED_LIMIT",
    "action_gaps",
    "annealed_epsilon",
    "apex_epsilon",
    "check_reward_moments",
    "importance_weights",
    "inverse_rescale",
    "inverse_rescale_float",
    "linear_schedule",
    "merge_reward_moments",
    "n_step_returns",
    "n_step_targets",
    "rescale",
    "rescale_float",
    "resumed_seed",
    "sign_float",
    "reward_scale",
    "sequence_priorities",
    "td_errors",
]
