"""Tests of `R2D2Agent.fit` with N envs (`envs_per_actor > 1`): one batched forward pass
per step of all N envs, in the single process.

The main check is table-driven, as in `tests/test_vector_actor.py` (whose test envs it
reuses): the agent fit with N envs of different episode lengths records, env for env and
frame for frame, the sequences one distributed actor of N envs (`ActorRunner`, actor 0 of
a run of one actor) records and those N single-env actors with the same seeds and rates
record. The learner is kept from training (its warm-up is never reached), so every
sequence comes from the agent's initial weights, which the references act with.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from test_agent import ResetRecorder, reset_observations
from test_vector_actor import (
    ENDS_AT_7,
    ENDS_EVERY_STEP,
    FRAME,
    NEVER_ENDS,
    STEPS,
    TRUNCATES,
    Case,
    ScriptedEnv,
    _assert_same_records,
    _FixedWeights,
    _ListSender,
    _single_env_records,
)

from r2d2_agent import R2D2Agent
from r2d2_agent.compat import rl_callbacks
from r2d2_agent.distributed.actor_runner import ActorRunner
from r2d2_agent.distributed.spec import RunSpec
from r2d2_agent.roles import R2D2Builder

ACTIONS = 3
SEED = 7

CASES = [
    Case(
        "ends every step, truncates, never ends",
        (ENDS_EVERY_STEP, TRUNCATES, NEVER_ENDS),
        (),
    ),
    Case(
        "previous action and reward, normalised rewards",
        (NEVER_ENDS, ENDS_EVERY_STEP, TRUNCATES, ENDS_AT_7),
        (),
        (("enable_prev_action_reward", True), ("normalize_rewards", True)),
    ),
    Case(
        "stacked frames, no LSTM",
        (TRUNCATES, ENDS_AT_7, ENDS_EVERY_STEP),
        (),
        (("input_sequence", 2), ("lstm_units", 0)),
    ),
]


def _config(make_config, envs, **overrides):
    fields = {
        "input_shape": (FRAME,),
        "nb_actions": ACTIONS,
        "envs_per_actor": len(envs),
        "sequence_period": 2,
        "memory_capacity": 10_000,
        "memory_warmup": 10_000,  # never reached: the learner does not train
        "epsilon": 0.5,
        "epsilon_alpha": 2.0,
        "seed": SEED,
    }
    return make_config(**(fields | overrides))


def _agent_records(agent, fit_envs, nb_steps):
    """Fits `agent` and returns the sequences it stored, by replay stream."""
    streams: dict[int, list] = {}
    agent.learner.add = lambda record, stream=0: streams.setdefault(stream, []).append(record)
    agent.compile()
    agent.fit(fit_envs, nb_steps=nb_steps, verbose=0)
    return streams


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_n_envs_record_what_a_distributed_actor_and_n_single_env_actors_record(make_config, case):
    config = _config(make_config, case.envs, **dict(case.overrides))
    n = len(case.envs)
    agent = R2D2Agent(config)
    weights = agent.learner.get_weights()
    got = _agent_records(agent, [ScriptedEnv(**kwargs) for kwargs in case.envs], STEPS * n)

    epsilons = agent.vector_epsilons
    assert epsilons == RunSpec(CARTPOLE, R2D2Builder(config), nb_actors=1).actor_epsilon(0)
    assert len(set(epsilons)) == n  # spread: 0.5, ..., 0.5**3
    assert agent.step == STEPS * n and agent.learner.updates == 0
    sender = _ListSender()
    runner = ActorRunner(
        0,
        R2D2Builder(config),
        [ScriptedEnv(**kwargs) for kwargs in case.envs],
        sender,
        _FixedWeights(weights),
        epsilon=epsilons,
        seed=SEED,
    )
    runner.run(lambda: runner.steps >= STEPS * n)
    assert sorted(got) == [j + 1 for j in range(n)]  # env j on replay stream j + 1
    for j in range(n):
        runner_records = [item.record for item in sender.items if item.stream == j]
        _assert_same_records(got[j + 1], runner_records)
        single = _single_env_records(config, case.envs[j], epsilons[j], SEED + j, weights)
        _assert_same_records(got[j + 1], single)


CARTPOLE = functools.partial(gym.make, "CartPole-v1")


def test_a_gymnasium_vector_env_records_what_a_list_of_envs_records(make_config):
    case = CASES[0]
    config = _config(make_config, case.envs)
    n = len(case.envs)
    vector = gym.vector.SyncVectorEnv(
        [functools.partial(ScriptedEnv, **kwargs) for kwargs in case.envs],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    got = _agent_records(R2D2Agent(config), vector, STEPS * n)
    vector.close()
    want = _agent_records(
        R2D2Agent(config), [ScriptedEnv(**kwargs) for kwargs in case.envs], STEPS * n
    )
    for j in range(n):
        _assert_same_records(got[j + 1], want[j + 1])


@pytest.mark.parametrize(
    "mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP]
)
def test_a_gymnasium_vector_env_fit_in_chunks_records_what_one_fit_records(make_config, mode):
    case = CASES[0]
    config = _config(make_config, case.envs)
    n = len(case.envs)
    want = _agent_records(
        R2D2Agent(config), [ScriptedEnv(**kwargs) for kwargs in case.envs], STEPS * n
    )
    vector = gym.vector.SyncVectorEnv(
        [functools.partial(ScriptedEnv, **kwargs) for kwargs in case.envs], autoreset_mode=mode
    )
    agent = R2D2Agent(config)
    got: dict[int, list] = {}
    agent.learner.add = lambda record, stream=0: got.setdefault(stream, []).append(record)
    agent.compile()
    for steps in (STEPS // 2 - 3, 3, STEPS // 2):
        agent.fit(vector, nb_steps=steps * n, verbose=0)
    vector.close()
    for j in range(n):
        _assert_same_records(got[j + 1], want[j + 1])


class _Hooks(rl_callbacks.Callback):
    """Records the keras-rl hooks `fit` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def on_episode_begin(self, episode, logs=None):
        self.calls.append(("episode_begin", episode, logs["env"]))

    def on_episode_end(self, episode, logs=None):
        self.calls.append(("episode_end", episode, logs["env"], logs["nb_episode_steps"]))

    def on_step_begin(self, step, logs=None):
        self.calls.append(("step_begin", logs["env"]))

    def on_step_end(self, step, logs=None):
        self.calls.append(("step_end", logs["env"], logs["episode"], step))


def test_callbacks_see_every_env_step_and_every_env_episode(make_config):
    envs = (ENDS_EVERY_STEP, TRUNCATES, NEVER_ENDS)
    agent = R2D2Agent(_config(make_config, envs))
    agent.compile()
    hooks = _Hooks()
    history = agent.fit(
        [ScriptedEnv(**kwargs) for kwargs in envs], nb_steps=30, callbacks=[hooks], verbose=0
    )
    steps = [c for c in hooks.calls if c[0] == "step_end"]
    assert len(steps) == 30 == len([c for c in hooks.calls if c[0] == "step_begin"])
    assert [c[1] for c in steps] == [0, 1, 2] * 10  # per env step, in env order
    ends = [c for c in hooks.calls if c[0] == "episode_end"]
    assert [(c[2], c[3]) for c in ends if c[2] == 0] == [(0, 1)] * 10
    assert [(c[2], c[3]) for c in ends if c[2] == 1] == [(1, 5)] * 2
    assert not [c for c in ends if c[2] == 2]  # env 2 never ends
    # Episodes are numbered as they begin; each ends after its own steps only.
    begun = [c[1] for c in hooks.calls if c[0] == "episode_begin"]
    assert begun == list(range(len(begun))) and begun[:3] == [0, 1, 2]
    current: dict[int, int] = {}  # each env's running episode
    for call in hooks.calls:
        if call[0] == "episode_begin":
            assert call[2] not in current  # its previous episode ended first
            current[call[2]] = call[1]
        elif call[0] == "step_end":
            assert call[2] == current[call[1]]
        elif call[0] == "episode_end":
            assert call[1] == current.pop(call[2])
    episode_of_env2 = {c[2] for c in steps if c[1] == 2}
    assert episode_of_env2 == {2} and [c[3] for c in steps if c[1] == 2] == list(range(10))
    assert history.history["env"] == [c[2] for c in ends]
    assert agent.episodes == len(ends) == 12


def test_nb_steps_train_interval_and_sync_count_env_steps_of_all_envs(make_config):
    envs = (NEVER_ENDS, TRUNCATES, ENDS_AT_7)
    config = _config(
        make_config,
        envs,
        memory_warmup=4,
        train_interval=2,  # below N = 3: some batched steps train twice
        actor_sync_interval=10,
        epsilon_start=1.0,
        epsilon_anneal_steps=20,
    )
    agent = R2D2Agent(config)
    agent.compile()
    trained_at, synced_at = [], []
    learner_step, sync = agent.learner.step, agent.sync_actor
    agent.learner.step = lambda: (trained_at.append(agent.step), learner_step())[1]
    agent.sync_actor = lambda: (synced_at.append(agent.step), sync())[1]
    agent.fit([ScriptedEnv(**kwargs) for kwargs in envs], nb_steps=100, verbose=0)

    assert agent.step == 102  # checked before each step of the 3 envs: 34 steps
    assert trained_at and trained_at == list(range(trained_at[0], 103, 2))
    assert agent.learner.updates == len(trained_at)
    assert synced_at == [12, 24, 36, 48, 60, 72, 84, 96]  # between batched steps
    # Each env anneals over the agent's env steps (all 3 envs): past the ramp of 20.
    assert agent._vector_actor.epsilons == pytest.approx(agent.vector_epsilons)

    agent.fit([ScriptedEnv(**kwargs) for kwargs in envs], nb_steps=9, verbose=0)
    assert agent.step == 111  # the count goes on over fit calls


def test_a_later_fit_on_the_same_envs_continues_their_episodes(make_config):
    """`fit` in chunks with a `test` between (what `train_until_solved` and users with
    evaluations do) records what one `fit` of the whole records, frame for frame: no
    episode is cut and restarted at a chunk's end."""
    case = CASES[0]  # ends every step, truncates at 5, never ends
    n = len(case.envs)
    config = _config(make_config, case.envs)
    whole = _agent_records(
        R2D2Agent(config), [ScriptedEnv(**kwargs) for kwargs in case.envs], STEPS * n
    )

    agent = R2D2Agent(config)
    chunks: dict[int, list] = {}
    agent.learner.add = lambda record, stream=0: chunks.setdefault(stream, []).append(record)
    agent.compile()
    envs = [ScriptedEnv(**kwargs) for kwargs in case.envs]
    for steps in (STEPS // 2 - 3, 3, STEPS // 2):  # chunks end mid-episode (env 1 at 17, 20)
        agent.fit(envs, nb_steps=steps * n, verbose=0)
        agent.test(ScriptedEnv(**TRUNCATES), nb_episodes=1, visualize=False, verbose=0)
    assert agent.step == STEPS * n
    for j in range(n):
        _assert_same_records(chunks[j + 1], whole[j + 1])


def _never_ending_env_steps(agent, envs, **fit_kwargs):
    """The episode steps env 2 (never ends) takes in one `fit` of 10 steps of 3 envs."""
    hooks = _Hooks()
    agent.fit(envs, nb_steps=30, callbacks=[hooks], verbose=0, **fit_kwargs)
    return [c[3] for c in hooks.calls if c[0] == "step_end" and c[1] == 2]


class _InterruptAt(rl_callbacks.Callback):
    """Presses Ctrl-C at the `step`-th env step (`fit` stops cleanly)."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.steps, self.at = 0, step

    def on_step_end(self, step, logs=None):
        self.steps += 1
        if self.steps == self.at:
            raise KeyboardInterrupt


def test_other_envs_reset_states_or_an_interrupted_fit_start_the_episodes_afresh(make_config):
    envs = (ENDS_EVERY_STEP, TRUNCATES, NEVER_ENDS)
    agent = R2D2Agent(_config(make_config, envs))
    agent.compile()
    fit_envs = [ScriptedEnv(**kwargs) for kwargs in envs]
    assert _never_ending_env_steps(agent, fit_envs) == list(range(10))
    assert _never_ending_env_steps(agent, list(fit_envs)) == list(range(10, 20))  # same envs
    fit_envs[0] = ScriptedEnv(**envs[0])  # the same list, another env in it
    assert _never_ending_env_steps(agent, fit_envs) == list(range(10))
    assert _never_ending_env_steps(agent, [ScriptedEnv(**kwargs) for kwargs in envs]) == list(
        range(10)
    )
    agent.reset_states()
    assert _never_ending_env_steps(agent, fit_envs) == list(range(10))
    agent.fit(fit_envs, nb_steps=30, callbacks=[_InterruptAt(4)], verbose=0)
    assert _never_ending_env_steps(agent, fit_envs) == list(range(10))


@pytest.mark.parametrize("kind", ["list", "vector_env"])
def test_envs_restarted_afresh_are_not_seeded_again(make_config, kind):
    """After `reset_states()` the same envs start new episodes, but from where their
    randomness was: each env's resets over both fits are those of one env seeded once
    with `seed + j` (seeded again, the restart would replay the first fit's starts)."""
    agent = R2D2Agent(make_config(envs_per_actor=2, train_interval=10**6, seed=SEED))
    agent.compile()
    if kind == "list":
        envs = [ResetRecorder(gym.make("CartPole-v1")) for _ in range(2)]
        recorders = envs
    else:
        envs = gym.make_vec(
            "CartPole-v1", num_envs=2, vectorization_mode="sync", wrappers=[ResetRecorder]
        )
        recorders = list(envs.envs)
    agent.fit(envs, nb_steps=60, verbose=0)
    agent.reset_states()
    agent.fit(envs, nb_steps=60, verbose=0)
    for j, recorder in enumerate(recorders):
        assert len(recorder.starts) >= 2
        expected = reset_observations(SEED + j, len(recorder.starts))
        np.testing.assert_array_equal(np.array(recorder.starts), expected)


def test_each_env_anneals_its_epsilon_over_env_steps_of_all_envs(make_config):
    """The ramp lasts `epsilon_anneal_steps` env steps whatever N (as the agent's other
    counts): 30 env steps of 3 envs are 30 steps into a ramp of 90, not 10."""
    from r2d2_agent.math import annealed_epsilon

    envs = (NEVER_ENDS, TRUNCATES, ENDS_AT_7)
    config = _config(make_config, envs, epsilon_start=1.0, epsilon_anneal_steps=90)
    agent = R2D2Agent(config)
    agent.compile()
    agent.fit([ScriptedEnv(**kwargs) for kwargs in envs], nb_steps=30, verbose=0)
    assert agent.step == 30
    want = [annealed_epsilon(1.0, final, 90, 30) for final in agent.vector_epsilons]
    assert agent._vector_actor.epsilons == pytest.approx(want)


def test_the_number_of_envs_must_be_envs_per_actor(make_config):
    agent = R2D2Agent(make_config(envs_per_actor=3))
    agent.compile()
    with pytest.raises(ValueError, match="got one env, but envs_per_actor=3"):
        agent.fit(gym.make("CartPole-v1"), nb_steps=10)
    with pytest.raises(ValueError, match="got 2 envs, but envs_per_actor=3"):
        agent.fit([gym.make("CartPole-v1") for _ in range(2)], nb_steps=10)
    with pytest.raises(ValueError, match="does not take nb_max_episode_steps"):
        agent.fit([gym.make("CartPole-v1") for _ in range(3)], nb_steps=10, nb_max_episode_steps=5)
    with pytest.raises(ValueError, match="test\\(\\) plays one env"):
        agent.test([gym.make("CartPole-v1") for _ in range(3)], nb_episodes=1)
    assert agent.step == 0


def test_cartpole_learns_with_four_envs():
    """A learning smoke test (seconds): 4 CartPole envs, 2,500 env steps, seed 0.

    Random play lasts about 22 steps; measured: the first 10 episodes 21.0 steps on
    average, the last 10 125.9 (seed 1: 19.0 and 100.5), with about 570 updates.
    """
    from r2d2_agent.presets import cartpole_config

    config = cartpole_config(
        seed=0,
        envs_per_actor=4,
        epsilon_anneal_steps=800,  # env steps of the 4 envs
        lstm_units=16,
        dense_units=32,
        batch_size=16,
    )
    agent = R2D2Agent(config)
    agent.compile()
    history = agent.fit([gym.make("CartPole-v1") for _ in range(4)], nb_steps=2_500, verbose=0)
    returns = history.history["episode_reward"]
    assert sorted(set(history.history["env"])) == [0, 1, 2, 3]
    assert agent.learner.updates > 500
    assert np.mean(returns[:10]) < 30 < 60 < np.mean(returns[-10:]), returns


def test_train_until_solved_trains_on_n_envs_and_evaluates_on_one(make_config):
    from r2d2_agent.testing import train_until_solved

    made = []

    def make_env():
        made.append(ScriptedEnv(**ENDS_AT_7))
        return made[-1]

    agent = R2D2Agent(_config(make_config, (ENDS_AT_7,) * 3, memory_warmup=4))
    agent.compile()
    result = train_until_solved(agent, make_env, 60, eval_interval=30, eval_episodes=1)
    assert len(made) == 4  # three to train on, one to evaluate
    assert result["env_steps"] == 60 and [steps for steps, _ in result["evals"]] == [30, 60]
    assert agent.step == 60  # 30 of the 3 envs twice
