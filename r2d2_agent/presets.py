"""Tested configurations for small control tasks and memory tasks.

The paper's defaults (`R2D2Config`'s) are sized for Atari with 256 actors. These presets
are what the learning tests and the benchmarks use on CartPole and on memory tasks; each
takes overrides (`memory_config` also the task's observation shape and action count).

Each public `*_config` function is a preset (`r2d2-train --preset <name>` takes it
without the suffix); its docstring lists its values, as does the README's preset table
(`tests/test_presets.py` checks both against the function, and prints what to paste for
a new preset).
"""

from __future__ import annotations

from typing import Any

from r2d2_agent.config import R2D2Config

_CARTPOLE: dict[str, Any] = dict(
    input_shape=(4,),
    nb_actions=2,
    lstm_units=64,
    dense_units=64,
    # Short sequences: 4 burn-in + 8 trained steps (windows every 4 env steps). On
    # CartPole-v1 they took the median of seeds 0-9 from 10,000 env steps to 7,500 and
    # from 21 s to 13 s; the masked task needs the longer window (see _MASKED).
    burnin=4,
    input_length=8,
    multisteps=3,
    gamma=0.99,
    batch_size=32,
    memory_capacity=4_000,
    memory_warmup=50,
    # The ablation in benchmarks/RESULTS.md ("What makes R2D2 fast on CartPole"): a target
    # copy every 10 updates (40 env steps), Adam at 2e-3 and DQN's ε ramp from 1 over the
    # first 5,000 env steps took the median of seeds 0-4 from 32,500 env steps to 10,000 on
    # both CartPole-v1 and the masked CartPole (seeds 0-9: 10,000 and 15,000).
    learning_rate=2e-3,
    target_update_interval=10,
    train_interval=4,
    actor_sync_interval=20,
    epsilon=0.1,
    epsilon_start=1.0,
    epsilon_anneal_steps=5_000,
    # Every env (N per actor, and every actor) explores at that ε: the Ape-X spread from a
    # most exploring env at 0.1 leaves all but a few of N envs nearly greedy: with 4 envs
    # in one actor the masked CartPole's median of seeds 0-4 was 32,500 env steps with the
    # spread and 10,000 with every env at 0.1 (one env: 12,500; RESULTS.md, stop 44).
    epsilon_alpha=0.0,
    # β annealed over 10k updates, as in the ablation; a fixed β solves these tasks about
    # as fast (RESULTS.md, "β: annealed or fixed").
    is_anneal_updates=10_000,
    # Rewards in units of their root mean square, so that the settings above carry to a
    # task whose rewards are 100 times smaller or larger. Where every reward is 1 or -1
    # (CartPole, the masked CartPole) the scale is exactly 1 and a run is bit for bit the
    # run without it (RESULTS.md, stop 57).
    normalize_rewards=True,
)

POLICY_AVERAGE_ENV_STEPS = 1_000
"""Env steps the presets' greedy policy averages the online weights over
(`policy_average_updates` = this // `train_interval`). Once CartPole or the masked CartPole
is solved, the online network's greedy evaluations swing; played with the average, 91%
(CartPole) and 65% (masked) of the evaluations after the first solve stayed at the solved
level, against 65% and 45% with the online weights, over seeds 0-7, at the same median
env steps to the first solve (the same runs read both ways; benchmarks/RESULTS.md, stop
39). Averaging over 2,000 or 3,300 env steps kept a little more (69% / 77% on the masked
task) but came 2,500-7,500 env steps later to the first solve."""


def _with_policy_average(fields: dict[str, Any]) -> R2D2Config:
    """The config of `fields` (a preset's, overrides merged), whose greedy policy averages
    over about `POLICY_AVERAGE_ENV_STEPS` env steps unless the fields set it."""
    config = R2D2Config(**fields)  # validates first: a bad train_interval is named, not divided by
    if "policy_average_updates" in fields:
        return config
    updates = max(1, POLICY_AVERAGE_ENV_STEPS // config.train_interval)
    return config.replace(policy_average_updates=updates)


# The partially observable task: the same settings with a smaller observation and twice
# the sequence (8 burn-in + 16 trained steps): with 4 + 8 its median of seeds 0-4 was
# 15,000 env steps against 10,000 (RESULTS.md, "What makes R2D2 fast on CartPole").
_MASKED: dict[str, Any] = dict(input_shape=(2,), burnin=8, input_length=16)


def cartpole_config(**overrides: Any) -> R2D2Config:
    """R2D2 for gymnasium's `CartPole-v1` (observation (4,), 2 actions).

    Values (every other field keeps `R2D2Config`'s default)::

        input_shape=(4,)
        nb_actions=2
        lstm_units=64
        dense_units=64
        normalize_rewards=True
        multisteps=3
        burnin=4
        input_length=8
        gamma=0.99
        batch_size=32
        memory_capacity=4000
        memory_warmup=50
        is_anneal_updates=10000
        learning_rate=0.002
        target_update_interval=10
        policy_average_updates=250
        actor_sync_interval=20
        epsilon=0.1
        epsilon_start=1.0
        epsilon_anneal_steps=5000
        epsilon_alpha=0.0

    Args:
        **overrides: Any `R2D2Config` field.

    Example:
        >>> config = cartpole_config(seed=0, lstm_units=128)
        >>> config.lstm_units, config.learning_rate, config.seed
        (128, 0.002, 0)
    """
    return _with_policy_average({**_CARTPOLE, **overrides})


def masked_cartpole_config(**overrides: Any) -> R2D2Config:
    """R2D2 for the partially observable CartPole of `r2d2_agent.testing` (observation
    (2,): cart position and pole angle only), which needs the LSTM's memory.

    Also the recipe for other control tasks whose reward is survival (the README's
    "Choosing settings for your task"); with noisy observations add
    `enable_prev_action_reward=True` (the previous action is the noise-free input that
    drives the dynamics): on masked CartPole with noise of std 0.05 it took the best greedy
    normalised mean of seeds 0 / 1 from -0.25 / -0.49 to 0.83 / 0.72 ("The noisy masked
    CartPole" in benchmarks/RESULTS.md), a median of 0.87 over seeds 0-4 against
    RecurrentPPO's 0.10 side by side (stop 56), while without noise it slows the median of
    seeds 0-19 from 12,500 env steps to 16,250.

    Values (every other field keeps `R2D2Config`'s default)::

        input_shape=(2,)
        nb_actions=2
        lstm_units=64
        dense_units=64
        normalize_rewards=True
        multisteps=3
        burnin=8
        input_length=16
        gamma=0.99
        batch_size=32
        memory_capacity=4000
        memory_warmup=50
        is_anneal_updates=10000
        learning_rate=0.002
        target_update_interval=10
        policy_average_updates=250
        actor_sync_interval=20
        epsilon=0.1
        epsilon_start=1.0
        epsilon_anneal_steps=5000
        epsilon_alpha=0.0

    Args:
        **overrides: Any `R2D2Config` field.
    """
    return _with_policy_average({**_CARTPOLE, **_MASKED, **overrides})


# Memory tasks: the masked-CartPole settings (rewards in units of their root mean square
# included: no reward scale is too small for Adam's ε or too large for the values) with
# the choices of the memory-suite ablation (issue 24; the evidence is in memory_config's
# docstring and benchmarks/RESULTS.md, "Memory suite: ablation").
_MEMORY: dict[str, Any] = dict(
    # Without the value rescaling and with γ = 0.95 "repeat the symbol 4 steps back"
    # (a reward every step) went from chance to solved on seeds 0-1; with the rescaling, or
    # with γ 0.97-0.99, it stayed near chance.
    enable_rescaling=False,
    gamma=0.95,
    # One-step returns: n = 3 took that task from 0.95 to 0.28 on seed 0 (and took the
    # masked CartPole from 0.30-0.94 to solved: control tasks keep their own preset).
    multisteps=1,
)

DEFAULT_MEMORY_SPAN = 7
"""`memory_config`'s memory span when none is given (env steps): a trained window of 16."""


def memory_window(memory_span: int) -> dict[str, int]:
    """The sequence fields a memory span asks for.

    A recurrent network learns to keep an observation only if one trained window holds
    both the step that shows it and the step that needs it (the gradient does not reach
    back into the burn-in or across windows), and while it explores the agent lives the
    gap longer than it is (it dawdles in a corridor, waits, turns back). So the trained
    window `input_length` is the smallest power of two above twice the span (and at least
    16). `train_interval` is `3 * input_length // 32` env steps per update (at least 6):
    the learner replays each env step about 341 times (`batch_size` x `input_length` /
    `train_interval`) in windows of 64 steps and more, 171 times in the 32-step window and
    85 times in the 16-step one. Measured on the memory suite (benchmarks/RESULTS.md, stops
    50-59; best greedy normalised mean within 60k env steps, seeds 0-4, a run at 0.9 or
    above "solved"): with a 64-step window, training every 8 env steps instead of 16 took a
    20-step T-maze from 0.40 to 1.00, a cue named 30 steps later from 0.80 to 1.00 and one
    named 20 steps later among 6 symbols from 0.50 to 0.80 (medians, stop 50); every 6
    instead of 8, side by side on one machine, solved 20 of 25 runs of five 64-step tasks
    instead of 17 (each task's median equal or higher) and 8 of 10 runs of a held-out
    24-step T-maze instead of 3 (stops 53-54). The short windows need fewer updates, not
    more: every 6 instead of 4 in the 16- and 32-step windows solved "name the symbol seen 6
    steps ago among 8" on 5 seeds of 5 instead of 1 and "8 steps ago" on 5 instead of 4,
    kept the 5- and 12-step T-mazes and recall 2, 3 and 4 steps back solved on every seed
    (their first solve 2,500 env steps later on the recall tasks, 10,000 later on 4 steps
    back), in 0.6-0.7x the wall, and solved three held-out sizes on every seed; on short
    tasks whose reward comes once, later, the first solve comes later (an 8-step T-maze
    at a median of 12,500 env steps against 7,500, a cue named 10 steps later at 17,500
    against 12,500; stop 59). With 128 steps, every 16 instead of 32 lifted
    the 50-step T-maze from 0.40 to 0.50 and a cue named 60 steps later from -0.10 to 0.20
    (stop 41); every 12 instead of 16 took a 35-step T-maze from 0.30 to 0.60 (higher on 4
    seeds of 5, one solved) and left a cue named 45 steps later (`memory_span=46`) at 0.40
    (stop 54); over the four 128-step tasks' 20 seed pairs the T-mazes' mean best rose from
    0.27 to 0.51 and the cues' stayed at 0.30-0.31 (stop 55). A third more updates cost
    1.3-1.4x the wall of a run.

    Args:
        memory_span: The longest gap, in env steps, between an observation and the step
            whose action depends on it (a T-maze whose cue is 20 steps before the
            junction: 20), >= 0.

    Returns:
        `{"input_length": ..., "train_interval": ...}`.

    Raises:
        ValueError: If `memory_span` is not an int >= 0.

    Example:
        >>> memory_window(4), memory_window(20), memory_window(50)
        ({'input_length': 16, 'train_interval': 6}, {'input_length': 64, 'train_interval': 6},
         {'input_length': 128, 'train_interval': 12})
    """
    if isinstance(memory_span, bool) or not isinstance(memory_span, int) or memory_span < 0:
        raise ValueError(f"memory_span must be an int >= 0 (env steps), got {memory_span!r}")
    length = max(16, 1 << (2 * memory_span).bit_length())  # smallest power of two > 2 span
    return dict(input_length=length, train_interval=max(6, 3 * length // 32))


def memory_config(
    input_shape: tuple[int, ...],
    nb_actions: int,
    *,
    memory_span: int = DEFAULT_MEMORY_SPAN,
    each_step_scored: bool = False,
    **overrides: Any,
) -> R2D2Config:
    """R2D2 for partially observable tasks that need memory (recall a cue, a T-maze,
    name what was seen k steps ago).

    The masked-CartPole preset (rewards in units of their root mean square included:
    `normalize_rewards`, the same updates at rewards x0.01 or x100) with the changes found
    on the memory suite (issue 24, benchmarks/RESULTS.md "Memory suite: what makes recall
    learn"): no value rescaling and γ = 0.95 with one-step returns (a reward that depends
    on each step's action is no longer drowned by the bootstrapped return), and a trained
    window that covers the task's memory span (`memory_span`, see `memory_window`).

    Where it stands (best greedy normalised mean within 60k env steps, median of seeds
    0-4, RecurrentPPO's beside it, on one machine; benchmarks/RESULTS.md stops 54-59, the
    README's "Choosing settings for your task" has the table): "repeat the symbol 4 steps
    back" (a reward every step) 1.00 (0.44); with `each_step_scored=True` 3 steps back
    1.00 (1.00), 8 steps back 1.00 (-0.08), 6 steps back among 8 symbols 1.00 (-0.41);
    T-mazes of 5, 12, 16 and 20 steps 1.00 each (1.00, 0.70, 0.80, 0.70), of 28 steps
    (seeds 0-9) 0.43 (0.05), 35 steps 0.60 (0.10) and 50 steps 0.40 (0.40; both agents at
    the level of a walk to the junction without memory of the cue); cues named 20 steps
    later among 6 symbols 1.00 (0.30), 25 among 5 1.00 (0.30), 30 among 4 1.00 (0.10), 40
    among 3 1.00 (0.10), 45 and 60 among 4 0.40 (0.00) and 0.10 (-0.10). For control
    tasks whose reward is survival (masked CartPole) keep `masked_cartpole_config`: with
    one-step returns this preset is slower and less steady there. See the README's
    "Choosing settings for your task".

    Values (every other field keeps `R2D2Config`'s default)::

        lstm_units=64
        dense_units=64
        enable_rescaling=False
        normalize_rewards=True
        multisteps=1
        burnin=8
        input_length=16
        gamma=0.95
        batch_size=32
        memory_capacity=4000
        memory_warmup=50
        is_anneal_updates=10000
        learning_rate=0.002
        target_update_interval=10
        policy_average_updates=166
        train_interval=6
        actor_sync_interval=20
        epsilon=0.1
        epsilon_start=1.0
        epsilon_anneal_steps=5000
        epsilon_alpha=0.0

    Args:
        input_shape: The shape of one observation (the env's `observation_space.shape`).
        nb_actions: The number of actions (the env's `action_space.n`).
        memory_span: The longest gap, in env steps, between an observation and the step
            whose action needs it; sets `input_length` and `train_interval`
            (`memory_window`; the values above are the default's, 7: a 16-step window).
        each_step_scored: True when every action is scored by its own reward at once and
            does not change what comes next (recall what was seen k steps ago, name what
            is shown, track a signal): then γ = 0, each step's Q-value is the reward its
            action earns, and an update runs no target network (about a quarter less
            time per update). Figures above (among them a recall task it was not built
            on, 6 steps back among 8 symbols). Where wall time counts more than env
            steps, add `drop_covered_windows=True` and 4/3 of `memory_window`'s
            `train_interval` (8 in place of 6): on the five recall tasks the README's
            table sets it on, every seed solved in 0.75-0.84x the wall, the first solves
            earlier on 8 steps back and later among 5 and 8 symbols (RESULTS stop 64).
            Leave it False when a reward comes once, later (a cue named after a delay, a
            T-maze): there γ = 0 lost the cue-30 task (0.00 / -0.10 against 0.80 / 0.80),
            whose values carry the reward back over the delay.
        **overrides: Any other `R2D2Config` field (they win over `memory_span`'s and
            `each_step_scored`'s).

    Example:
        >>> config = memory_config(input_shape=(5,), nb_actions=3, memory_span=20, seed=0)
        >>> config.input_shape, config.input_length, config.train_interval
        ((5,), 64, 6)
    """
    if not isinstance(each_step_scored, bool):
        raise ValueError(f"each_step_scored must be True or False, got {each_step_scored!r}")
    task = dict(input_shape=input_shape, nb_actions=nb_actions)
    window = memory_window(memory_span)
    scored = dict(gamma=0.0) if each_step_scored else {}
    fields = {**_CARTPOLE, **_MASKED, **_MEMORY, **window, **scored, **task, **overrides}
    return _with_policy_average(fields)
