"""Tests of acting in N envs with one batched forward pass (`R2D2VectorActor`,
`VectorEpisodeLoop`, `ActorRunner` with `envs_per_actor`).

The main check is table-driven: N envs with different episode lengths (one that ends
every step, one that truncates, one that never ends within the test, ...) stepped by one
vector actor must produce exactly the sequences N separate single-env actors (same seeds,
same ε, the same deterministic weights) produce, frame for frame. Everything the network
does not compute is compared exactly (frames, frame ids, actions, returns, masks, previous
actions and rewards); the stored recurrent state and the initial priority come from a
batch-N instead of a batch-1 matrix product and are compared to float32 precision.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from r2d2_agent.distributed.actor_runner import ActorRunner
from r2d2_agent.distributed.messages import ExperienceSender, WeightsSubscriber
from r2d2_agent.networks.numpy_net import NumpyNetwork, weight_layout
from r2d2_agent.replay import SequenceRecord
from r2d2_agent.roles import R2D2Builder
from r2d2_agent.roles.episode_loop import EpisodeLoop
from r2d2_agent.roles.vector_loop import (
    EnvList,
    GymVectorEnvBatch,
    VectorEpisodeLoop,
    VectorObserver,
)

FRAME = 3  # values per observation of `ScriptedEnv`
ACTIONS = 3


class ScriptedEnv(gym.Env):
    """A seeded env whose episode length is set: it terminates after `terminate_at`
    steps, or is truncated after `truncate_at` steps, or never ends (both None).

    Observations depend on the seed, the step and the actions taken; rewards on the
    action. It returns one observation buffer per episode, overwritten in place on every
    step (as some envs do), so a frame kept without a copy would change under the actor.
    (A new buffer per episode: Gymnasium's SAME_STEP autoreset keeps the last observation
    of an episode by reference across the reset.)
    """

    observation_space = spaces.Box(-np.inf, np.inf, (FRAME,), np.float32)
    action_space = spaces.Discrete(ACTIONS)

    def __init__(self, terminate_at: int | None = None, truncate_at: int | None = None):
        self.terminate_at, self.truncate_at = terminate_at, truncate_at
        self._buffer = np.zeros(FRAME, np.float32)
        self._rng = np.random.default_rng()
        self._t = 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        self._buffer = self._rng.normal(size=FRAME).astype(np.float32)
        return self._buffer, {}

    def step(self, action):
        self._t += 1
        self._buffer[:] = 0.5 * self._buffer + self._rng.normal(size=FRAME) + int(action)
        reward = float(int(action) - 1) + 0.1 * self._t
        terminated = self.terminate_at is not None and self._t >= self.terminate_at
        truncated = self.truncate_at is not None and self._t >= self.truncate_at
        return self._buffer, reward, terminated, truncated, {"t": self._t}


ENDS_EVERY_STEP = {"terminate_at": 1}
TRUNCATES = {"truncate_at": 5}
NEVER_ENDS: dict = {}
ENDS_AT_7 = {"terminate_at": 7}


@dataclass(frozen=True)
class Case:
    name: str
    envs: tuple[dict, ...]  # ScriptedEnv arguments, one per env
    epsilons: tuple[float, ...]
    overrides: tuple[tuple[str, object], ...] = ()  # config fields
    policy: str = "numpy"  # or "keras" (`KerasPolicy`, a compiled tf.function)


CASES = [
    Case("one env", (TRUNCATES,), (0.3,)),
    Case(
        "ends every step, truncates, never ends",
        (ENDS_EVERY_STEP, TRUNCATES, NEVER_ENDS),
        (0.0, 0.2, 0.5),
    ),
    Case(
        "greedy, with previous action and reward",
        (NEVER_ENDS, ENDS_EVERY_STEP, TRUNCATES, ENDS_AT_7),
        (0.0, 0.0, 0.0, 0.0),
        (("enable_prev_action_reward", True),),
    ),
    Case(
        "stacked frames, no LSTM",
        (TRUNCATES, ENDS_AT_7, ENDS_EVERY_STEP, NEVER_ENDS, TRUNCATES),
        (0.4, 0.1, 0.0, 0.3, 1.0),
        (("input_sequence", 2), ("lstm_units", 0)),
    ),
    Case(
        "normalised rewards, with previous action and reward",
        (TRUNCATES, NEVER_ENDS, ENDS_EVERY_STEP),
        (0.1, 0.0, 0.3),
        (("enable_prev_action_reward", True), ("normalize_rewards", True)),
    ),
    Case(
        "Keras policy",
        (ENDS_EVERY_STEP, TRUNCATES, NEVER_ENDS),
        (0.0, 0.2, 0.5),
        (("enable_prev_action_reward", True),),
        policy="keras",
    ),
]
STEPS = 40  # steps of each env
SEED = 11


def _config(make_config, case: Case):
    return make_config(
        input_shape=(FRAME,),
        nb_actions=ACTIONS,
        envs_per_actor=len(case.envs),
        sequence_period=2,
        **dict(case.overrides),
    )


def _weights(config):
    rng = np.random.default_rng(5)
    stats = {"reward_statistics/count": 10.0, "reward_statistics/mean_square": 4.0}  # scale 2
    return [
        np.array(stats[name]) if name in stats else rng.normal(0, 0.5, shape).astype(np.float32)
        for name, shape in weight_layout(config)
    ]


def _record_fields(records: list[SequenceRecord]):
    return [
        (
            {k: v for k, v in r.fields.items() if k != "state"},
            r.frames,
            r.first_frame,
            r.fields["state"],
            r.priority,
        )
        for r in records
    ]


def _assert_same_records(got: list[SequenceRecord], want: list[SequenceRecord]) -> None:
    assert len(got) == len(want) > 0
    for g, w in zip(_record_fields(got), _record_fields(want), strict=True):
        assert g[0].keys() == w[0].keys()
        for key in g[0]:
            np.testing.assert_array_equal(g[0][key], w[0][key], err_msg=key)
        np.testing.assert_array_equal(g[1], w[1])  # the frames themselves
        assert g[2] == w[2]
        np.testing.assert_allclose(g[3], w[3], rtol=1e-5, atol=1e-6)
        assert g[4] == pytest.approx(w[4], rel=1e-4, abs=1e-6)


def _policy(config, weights, kind: str = "numpy"):
    if kind == "numpy":
        return NumpyNetwork(config, weights)
    from r2d2_agent.networks.policies import KerasPolicy

    policy = KerasPolicy(config)
    policy.set_weights(weights)
    return policy


def _single_env_records(config, env_kwargs, epsilon, seed, weights, kind="numpy"):
    """What one `R2D2Actor` in one env records over `STEPS` steps."""
    builder = R2D2Builder(config.replace(envs_per_actor=1))
    records: list[SequenceRecord] = []
    actor = builder.make_actor(
        _policy(builder.config, weights, kind), builder.make_adder(records.append), epsilon, seed
    )
    EpisodeLoop(ScriptedEnv(**env_kwargs), actor, seed=seed).run(nb_steps=STEPS)
    actor.adder.reset()  # nothing more: the run ends mid-episode in both
    return records


@pytest.mark.parametrize("batched", [False, True], ids=["per-env adders", "arrays"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_n_envs_record_what_n_single_env_actors_record(make_config, case, batched):
    config = _config(make_config, case)
    weights = _weights(config)
    builder = R2D2Builder(config)
    n = len(case.envs)
    seeds = [SEED + 100 * j for j in range(n)]
    records: list[list[SequenceRecord]] = [[] for _ in range(n)]
    actor = builder.make_vector_actor(
        _policy(config, weights, case.policy),
        builder.make_vector_adder([records[j].append for j in range(n)], batched=batched),
        case.epsilons,
        seeds,
    )
    envs = EnvList([ScriptedEnv(**kwargs) for kwargs in case.envs])
    totals = VectorEpisodeLoop(envs, actor, seeds=seeds).run(nb_steps=STEPS * n)

    assert totals.steps == STEPS * n
    for j in range(n):
        want = _single_env_records(
            config, case.envs[j], case.epsilons[j], seeds[j], weights, case.policy
        )
        _assert_same_records(records[j], want)


def test_one_batched_forward_pass_per_step(make_config):
    case = CASES[1]
    config = _config(make_config, case)
    builder = R2D2Builder(config)
    policy = NumpyNetwork(config, _weights(config))
    batches = []
    step = policy.step

    def counting_step(obs, *args):
        batches.append(len(obs))
        return step(obs, *args)

    policy.step = counting_step
    actor = builder.make_vector_actor(policy, None, case.epsilons, [1, 2, 3])
    envs = EnvList([ScriptedEnv(**kwargs) for kwargs in case.envs])
    VectorEpisodeLoop(envs, actor, seeds=[1, 2, 3]).run(nb_steps=30)
    assert batches == [3] * 10  # no adder: no bootstrap pass on truncation either


class _Episodes(VectorObserver):
    def __init__(self) -> None:
        self.ended: list[tuple[int, int, bool]] = []  # env, episode steps, terminated

    def on_env_episode_end(self, env, result):
        self.ended.append((env, result.episode_steps, result.terminated))


def test_an_env_that_ends_resets_alone_and_keeps_terminated_apart_from_truncated(make_config):
    case = CASES[1]  # ends every step, truncates at 5, never ends
    config = _config(make_config, case)
    builder = R2D2Builder(config)
    actor = builder.make_vector_actor(NumpyNetwork(config, _weights(config)), None, (0, 0, 0))
    episodes = _Episodes()
    envs = EnvList([ScriptedEnv(**kwargs) for kwargs in case.envs])
    VectorEpisodeLoop(envs, actor, observers=[episodes]).run(nb_steps=3 * 10)
    assert [e for e in episodes.ended if e[0] == 0] == [(0, 1, True)] * 10
    assert [e for e in episodes.ended if e[0] == 1] == [(1, 5, False)] * 2
    assert [e for e in episodes.ended if e[0] == 2] == []


def test_a_continued_run_goes_on_with_the_episodes_in_flight(make_config):
    """Two runs of one loop with `continue_episodes` record what one run of their
    length records, and an episode cut by the first run is reported by the second."""
    case = CASES[1]  # ends every step, truncates at 5, never ends; explores
    config = _config(make_config, case)
    builder = R2D2Builder(config)
    weights = _weights(config)
    n = len(case.envs)
    seeds = [SEED + 100 * j for j in range(n)]

    def recorded(splits):
        records: list[list[SequenceRecord]] = [[] for _ in range(n)]
        actor = builder.make_vector_actor(
            _policy(config, weights, case.policy),
            builder.make_vector_adder([records[j].append for j in range(n)]),
            case.epsilons,
            seeds,
        )
        episodes = _Episodes()
        envs = EnvList([ScriptedEnv(**kwargs) for kwargs in case.envs])
        loop = VectorEpisodeLoop(envs, actor, observers=[episodes], seeds=seeds)
        for k, steps in enumerate(splits):
            loop.run(nb_steps=steps * n, continue_episodes=k > 0)
            assert loop.in_flight
        return records, episodes.ended

    whole, whole_ended = recorded([STEPS])
    parts, parts_ended = recorded([STEPS // 2 - 3, 3, STEPS // 2])  # cuts at steps 17, 20
    assert parts_ended == whole_ended  # env 1's 5-step episodes go across the cuts
    for j in range(n):
        _assert_same_records(parts[j], whole[j])


def test_a_run_without_continue_episodes_starts_every_env_afresh(make_config):
    case = CASES[1]  # ends every step, truncates at 5, never ends
    config = _config(make_config, case)
    actor = R2D2Builder(config).make_vector_actor(
        NumpyNetwork(config, _weights(config)), None, (0, 0, 0)
    )
    episodes = _Episodes()
    envs = EnvList([ScriptedEnv(**kwargs) for kwargs in case.envs])
    loop = VectorEpisodeLoop(envs, actor, observers=[episodes])
    loop.run(nb_steps=3 * 3)
    loop.run(nb_steps=3 * 3)
    assert [e for e in episodes.ended if e[0] == 1] == []  # cut at 3 steps twice, not 5
    loop.run(nb_steps=3 * 3, continue_episodes=True)
    assert [e for e in episodes.ended if e[0] == 1] == [(1, 5, False)]


class _Hooks(VectorObserver):
    """Logs every hook call (episode ends with their whole result)."""

    def __init__(self, log: list) -> None:
        self.log = log

    def on_step_begin(self) -> None:
        self.log.append("begin")

    def on_env_episode_end(self, env, result):
        self.log.append(("episode", env, result))

    def on_step_end(self) -> None:
        self.log.append("end")


class _StepHooks(_Hooks):
    """The same, and every single env step."""

    def on_env_step_end(self, env, episode_step, transition):
        self.log.append(("step", env, episode_step, transition.reward))


def test_the_loop_reports_the_same_episodes_with_or_without_an_observer_of_env_steps(
    make_config,
):
    """Without an `on_env_step_end` observer the loop keeps its counts in arrays; the
    episode ends it reports (returns, lengths, run totals, order) are the same."""
    case = CASES[2]  # never ends, ends every step, truncates at 5, ends at 7
    config = _config(make_config, case)
    builder = R2D2Builder(config)
    weights = _weights(config)
    logs = []
    for hooks in (_Hooks, _StepHooks):
        log: list = []
        actor = builder.make_vector_actor(
            NumpyNetwork(config, weights), None, (0.5,) * 4, [1, 2, 3, 4]
        )
        envs = EnvList([ScriptedEnv(**kwargs) for kwargs in case.envs])
        totals = VectorEpisodeLoop(envs, actor, observers=[hooks(log)], seeds=[5, 6, 7, 8]).run(
            nb_steps=4 * 30
        )
        assert totals.steps == 120 and totals.episodes == 30 + 6 + 4
        logs.append(log)
    without, with_steps = logs
    assert [entry for entry in with_steps if entry[0] != "step"] == without
    results = [entry[2] for entry in without if entry[0] == "episode"]
    assert [r.episode for r in results] == list(range(len(results)))
    # env 1 ends every step: its episode of step t is the run's env step 4 t + 2
    assert [r.total_steps for r in results if r.episode_steps == 1][:3] == [2, 6, 10]
    returns = {}  # env 2's rewards, summed per episode, from the step hooks
    for entry in with_steps:
        if entry[0] == "step" and entry[1] == 2:
            returns.setdefault(len(returns) if entry[2] == 0 else len(returns) - 1, []).append(
                entry[3]
            )
    env2 = [entry[2].episode_return for entry in without if entry[0] == "episode" and entry[1] == 2]
    assert env2 == [sum(rewards) for rewards in returns.values()][: len(env2)]


# --------------------------------------------------------------- Gymnasium vector envs --
@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_a_gymnasium_vector_env_records_what_a_list_of_envs_records(make_config, mode):
    """(With the envs in arrays: the per-env adders' records are the single-env
    actors' by construction, `test_n_envs_record_what_n_single_env_actors_record`.)"""
    case = CASES[1]
    config = _config(make_config, case)
    weights = _weights(config)
    builder = R2D2Builder(config)
    n, seeds = len(case.envs), [3, 4, 5]

    def run(envs):
        records: list[list[SequenceRecord]] = [[] for _ in range(n)]
        actor = builder.make_vector_actor(
            NumpyNetwork(config, weights),
            builder.make_vector_adder([records[j].append for j in range(n)], batched=True),
            case.epsilons,
            seeds,
        )
        VectorEpisodeLoop(envs, actor, seeds=seeds).run(nb_steps=STEPS * n)
        return records

    vector = gym.vector.SyncVectorEnv(
        [functools.partial(ScriptedEnv, **kwargs) for kwargs in case.envs],
        copy=False,  # hands out its own buffer: the actor must copy
        autoreset_mode=gym.vector.AutoresetMode(mode),
    )
    got = run(GymVectorEnvBatch(vector))
    want = run(EnvList([ScriptedEnv(**kwargs) for kwargs in case.envs]))
    vector.close()
    for j in range(n):
        _assert_same_records(got[j], want[j])


# --------------------------------------------------------------------- the runner --------
class _ListSender(ExperienceSender):
    def __init__(self) -> None:
        self.items: list = []

    def send(self, items, timeout=None):
        self.items.extend(items)
        return True


class _FixedWeights(WeightsSubscriber):
    def __init__(self, weights) -> None:
        self._weights, self._pulled = weights, False

    @property
    def version(self) -> int:
        return 1

    def pull_if_newer(self):
        if self._pulled:
            return None
        self._pulled = True
        return self._weights


def test_an_actor_runner_of_n_envs_sends_each_env_on_its_own_stream(make_config):
    case = CASES[1]
    config = _config(make_config, case)
    weights = _weights(config)
    n = len(case.envs)
    sender = _ListSender()
    runner = ActorRunner(
        2,
        R2D2Builder(config),
        [ScriptedEnv(**kwargs) for kwargs in case.envs],
        sender,
        _FixedWeights(weights),
        epsilon=case.epsilons,
        seed=SEED,
        stream=2,
    )
    runner.run(lambda: runner.steps >= STEPS * n)

    assert runner.steps == STEPS * n
    # Every env step is counted once in the experience (the learner's rate limit), up to
    # the steps after each env's last sequence.
    assert 0 < sum(item.env_steps for item in sender.items) <= runner.steps
    assert runner.episodes == STEPS + STEPS // 5  # env 0 every step, env 1 every 5
    for j in range(n):
        got = [item.record for item in sender.items if item.stream == 2 * n + j]
        want = _single_env_records(config, case.envs[j], case.epsilons[j], SEED + j, weights)
        _assert_same_records(got, want)


def test_an_actor_runner_refuses_a_wrong_number_of_envs(make_config):
    config = make_config(envs_per_actor=2)
    with pytest.raises(ValueError, match="1 envs, but envs_per_actor=2"):
        ActorRunner(
            0, R2D2Builder(config), gym.make("CartPole-v1"), _ListSender(), None, epsilon=0.1
        )


def test_a_list_of_per_env_adders_is_refused_with_what_to_pass(make_config):
    config = _config(make_config, CASES[1])
    builder = R2D2Builder(config)
    adders = [builder.make_adder(print) for _ in range(3)]
    with pytest.raises(TypeError, match="make_vector_adder.*got a list of 3"):
        builder.make_vector_actor(NumpyNetwork(config, _weights(config)), adders, (0, 0, 0))


def test_an_adder_of_another_number_of_envs_is_refused(make_config):
    config = _config(make_config, CASES[1])
    builder = R2D2Builder(config)
    adder = builder.make_vector_adder([print, print])
    with pytest.raises(ValueError, match="the adder records 2 envs, got 3 epsilons"):
        builder.make_vector_actor(NumpyNetwork(config, _weights(config)), adder, (0, 0, 0))


def test_set_epsilons_checks_the_count_and_the_range(make_config):
    config = _config(make_config, CASES[1])
    builder = R2D2Builder(config)
    actor = builder.make_vector_actor(NumpyNetwork(config, _weights(config)), None, (0, 0))
    actor.set_epsilons([0.5, 1.0])
    assert actor.epsilons == (0.5, 1.0)
    with pytest.raises(ValueError, match="one epsilon per env: 2 envs, got 3"):
        actor.set_epsilons([0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="epsilon must be in \\[0, 1\\], got 1.5"):
        actor.set_epsilons([0.1, 1.5])
    assert actor.epsilons == (0.5, 1.0)


def test_observe_all_needs_select_actions_before_it(make_config):
    config = _config(make_config, CASES[1])
    builder = R2D2Builder(config)
    actor = builder.make_vector_actor(NumpyNetwork(config, _weights(config)), None, (0, 0))
    for j in range(2):
        actor.observe_first(j, np.zeros(config.input_shape))
    with pytest.raises(RuntimeError, match="needs a select_actions"):
        actor.observe_all([0, 0], [0.0, 0.0], [np.zeros(config.input_shape)] * 2, [0, 0], [0, 0])


def test_envs_per_actor_is_validated(make_config):
    with pytest.raises(ValueError, match="envs_per_actor must be an int >= 1, got 0"):
        make_config(envs_per_actor=0)


# ---------------------------------------------------------------- manager runs (spawn) --
CARTPOLE = functools.partial(gym.make, "CartPole-v1")
CARTPOLE_VEC3 = functools.partial(
    gym.make_vec, "CartPole-v1", num_envs=3, vectorization_mode="sync"
)


def test_a_vector_env_of_another_size_is_rejected_in_the_parent(make_config, no_leftovers):
    from r2d2_agent.distributed import R2D2Manager

    with pytest.raises(ValueError, match="vector env of 3 envs, but envs_per_actor=2"):
        R2D2Manager(CARTPOLE_VEC3, make_config(envs_per_actor=2))


@pytest.mark.parametrize(
    "factory", [CARTPOLE, CARTPOLE_VEC3], ids=["three env factory calls", "a vector env"]
)
def test_a_manager_actor_steps_its_envs_and_counts_all_their_steps(
    make_config, factory, no_leftovers
):
    from r2d2_agent.distributed import R2D2Manager

    config = make_config(envs_per_actor=3, memory_capacity=200, actor_sync_interval=50)
    with R2D2Manager(factory, config, actor_num=1, progress=False) as manager:
        result = manager.train(nb_steps=600, max_seconds=150)
    assert result.stop_reason == "nb_steps"
    assert 600 <= result.env_steps <= 600 + 3 - 1  # checked before each step of 3 envs
    assert result.actor_env_steps == [result.env_steps]
    assert result.sequences_received > 0 and result.learner_updates > 0
    assert len(result.episode_returns[0]) >= 3  # CartPole episodes of all three envs


# ------------------------------------------------------- seeds, ε and streams of a run --
def test_the_ape_x_schedule_spreads_over_all_actors_envs(make_config):
    from r2d2_agent.distributed.spec import RunSpec
    from r2d2_agent.math import apex_epsilon

    config = make_config(envs_per_actor=3, epsilon=0.4, epsilon_alpha=7.0)
    spec = RunSpec(CARTPOLE, R2D2Builder(config), nb_actors=2)
    rates = spec.actor_epsilon(0) + spec.actor_epsilon(1)
    assert rates == tuple(apex_epsilon(i, 6, 0.4, 7.0) for i in range(6))
    assert rates[0] == pytest.approx(0.4) and rates[-1] == pytest.approx(0.4**8)


def test_every_env_of_every_actor_gets_its_own_seed_and_stream(make_config):
    from r2d2_agent.distributed.spec import RunSpec

    config = make_config(envs_per_actor=3, seed=10)
    spec = RunSpec(CARTPOLE, R2D2Builder(config), nb_actors=2)
    seeds = [spec.actor_seed(i, r) + j for r in (0, 1) for i in (0, 1) for j in range(3)]
    streams = [spec.actor_stream(i, r) * 3 + j for r in (0, 1) for i in (0, 1) for j in range(3)]
    assert seeds == list(range(10, 22))  # restarts continue past the first incarnations
    assert streams == list(range(12))


def test_a_resumed_run_counts_its_actors_seeds_from_the_resumed_seed(make_config):
    from r2d2_agent.distributed.spec import RunSpec
    from r2d2_agent.math import resumed_seed

    spec = RunSpec(CARTPOLE, R2D2Builder(make_config(envs_per_actor=3, seed=10)), nb_actors=2)
    base = resumed_seed(10, 4_000)
    assert base != 10
    seeds = [
        spec.actor_seed(i, r, resumed_at=4_000) + j
        for r in (0, 1)
        for i in (0, 1)
        for j in range(3)
    ]
    assert seeds == list(range(base, base + 12))
    assert spec.actor_seed(1, 0, resumed_at=0) == 13  # a fresh run: as before


def test_one_env_per_actor_keeps_the_seeds_and_rates_of_before(make_config):
    from r2d2_agent.distributed.spec import RunSpec

    spec = RunSpec(CARTPOLE, R2D2Builder(make_config(seed=10)), nb_actors=4)
    assert [spec.actor_seed(i, 0) for i in range(4)] == [10, 11, 12, 13]
    assert [spec.actor_seed(i, 1) for i in range(4)] == [14, 15, 16, 17]
    builder = spec.builder
    assert [spec.actor_epsilon(i) for i in range(4)] == [
        (builder.actor_epsilon(i, 4),) for i in range(4)
    ]


def test_each_env_anneals_its_epsilon_over_the_actors_env_steps_of_all_envs(make_config):
    """The ramp lasts `epsilon_anneal_steps` env steps whatever N: with 4 envs, 50 env
    steps of each are 200 of the actor (with N = 4 the masked CartPole then learns as
    with N = 1; a ramp per env's steps, 4 x as long, slowed it: benchmarks/RESULTS.md)."""
    from r2d2_agent.math import annealed_epsilon

    config = make_config(
        input_shape=(FRAME,),
        nb_actions=ACTIONS,
        envs_per_actor=4,
        epsilon_start=1.0,
        epsilon_anneal_steps=400,
    )
    runner = ActorRunner(
        0,
        R2D2Builder(config),
        [ScriptedEnv(**NEVER_ENDS) for _ in range(4)],
        _ListSender(),
        _FixedWeights(_weights(config)),
        epsilon=(0.4, 0.3, 0.2, 0.1),
        seed=0,
    )
    assert runner.epsilons == (1.0, 1.0, 1.0, 1.0)
    runner.run(lambda: runner.steps >= 200)  # 50 steps of each env
    assert runner.epsilons == pytest.approx(
        [annealed_epsilon(1.0, final, 400, 200) for final in (0.4, 0.3, 0.2, 0.1)]
    )


def test_an_async_vector_env_records_what_a_list_of_envs_records(make_config):
    case = CASES[1]
    config = _config(make_config, case)
    weights = _weights(config)
    builder = R2D2Builder(config)
    n, seeds = len(case.envs), [3, 4, 5]

    def run(envs):
        records: list[list[SequenceRecord]] = [[] for _ in range(n)]
        actor = builder.make_vector_actor(
            NumpyNetwork(config, weights),
            builder.make_vector_adder([records[j].append for j in range(n)]),
            case.epsilons,
            seeds,
        )
        VectorEpisodeLoop(envs, actor, seeds=seeds).run(nb_steps=20 * n)
        return records

    vector = gym.vector.AsyncVectorEnv(
        [functools.partial(ScriptedEnv, **kwargs) for kwargs in case.envs], context="fork"
    )
    try:
        got = run(GymVectorEnvBatch(vector))
    finally:
        vector.close()
    want = run(EnvList([ScriptedEnv(**kwargs) for kwargs in case.envs]))
    for j in range(n):
        _assert_same_records(got[j], want[j])


def test_evaluate_asks_for_an_env_when_the_factory_makes_vector_envs(make_config, no_leftovers):
    from r2d2_agent.distributed import R2D2Manager

    config = make_config(envs_per_actor=3)
    manager = R2D2Manager(CARTPOLE_VEC3, config)
    weights = [np.zeros(shape, np.float32) for _, shape in weight_layout(config)]
    with pytest.raises(ValueError, match="pass evaluate\\(env=...\\)"):
        manager.evaluate(1, weights=weights)
    assert len(manager.evaluate(1, env=gym.make("CartPole-v1"), weights=weights)) == 1
