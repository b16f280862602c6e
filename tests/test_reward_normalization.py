"""Learning that does not depend on the reward's scale (`R2D2Config.normalize_rewards`).

Rewards are divided by the root mean square of every reward seen. Checked here: the math
against brute force; the statistics as network weights (their place, dtype, the numpy
network, get/set, weight files, checkpoints); each reward counted once by the adder's
records; the adder's initial priorities, the learner's losses and a whole agent's run are
the same with rewards x0.01, x1 and x100 (and differ without the switch, so the checks
can fail); with rewards of ±1 the switch changes no bit of an update; the user's Q-values
in return units; the presets.
"""

from __future__ import annotations

import dataclasses
import functools

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent import R2D2Agent, R2D2Config, R2D2Manager
from r2d2_agent.checkpoints import (
    IncompatibleCheckpointError,
    check_compatible,
    read_checkpoint,
)
from r2d2_agent.compat import set_global_seed, tf
from r2d2_agent.math import REWARD_SCALE_EPS, merge_reward_moments, reward_scale
from r2d2_agent.networks import NumpyNetwork, weight_layout
from r2d2_agent.networks.keras_net import RewardStatistics
from r2d2_agent.presets import masked_cartpole_config, memory_config
from r2d2_agent.replay import SequenceAdder, SequenceLayout
from r2d2_agent.roles import R2D2Actor, R2D2Builder

SCALES = (0.01, 1.0, 100.0)


# The math ------------------------------------------------------------------------------


def brute_scale(rewards):
    rewards = np.asarray(rewards, np.float64)
    if rewards.size == 0 or not np.any(rewards):
        return 1.0
    return float(np.sqrt(np.mean(rewards**2)))


@pytest.mark.parametrize("seed", range(4))
def test_reward_scale_is_the_root_mean_square(seed):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(loc=rng.normal(), scale=10.0 ** rng.uniform(-3, 3), size=50)
    scale = reward_scale(len(rewards), float(np.mean(rewards**2)))
    assert scale == pytest.approx(brute_scale(rewards), rel=1e-12)


@pytest.mark.parametrize("rewards", [[], [0.0], [0.0] * 7], ids=["empty", "one_zero", "zeros"])
def test_no_reward_or_all_zero_rewards_give_scale_one(rewards):
    mean_square = float(np.mean(np.square(rewards))) if rewards else 0.0
    assert reward_scale(len(rewards), mean_square) == 1.0


def test_a_constant_reward_is_its_own_scale():
    assert reward_scale(5, 0.25) == 0.5  # rewards of 0.5 (or -0.5): std 0, scale 0.5
    assert reward_scale(3, (2 * REWARD_SCALE_EPS) ** 2) == pytest.approx(2 * REWARD_SCALE_EPS)


@pytest.mark.parametrize(
    ("count", "mean_square"), [(-1, 1.0), (1, -0.5), (float("nan"), 1.0), (1, float("inf"))]
)
def test_bad_moments_are_refused(count, mean_square):
    with pytest.raises(ValueError, match="reward count|mean square"):
        reward_scale(count, mean_square)
    with pytest.raises(ValueError, match="reward count|mean square"):
        merge_reward_moments(0, 0.0, count, mean_square)


@pytest.mark.parametrize(
    "cuts",
    [[], [0], [1], [0, 0, 5], [3, 3, 3, 50], list(range(0, 200, 7)), [199]],
    ids=["whole", "empty_first", "one_first", "empty_chunks", "repeats", "many", "one_last"],
)
def test_merging_chunks_gives_the_moments_of_all_rewards(cuts):
    rng = np.random.default_rng(len(cuts))
    rewards = rng.normal(loc=3.0, scale=2.0, size=200) * 1e-3
    count, mean_square = 0.0, 0.0
    for chunk in np.split(rewards, cuts):
        chunk_ms = float(np.mean(chunk**2)) if chunk.size else 0.0
        count, mean_square = merge_reward_moments(count, mean_square, chunk.size, chunk_ms)
    assert count == len(rewards)
    assert mean_square == pytest.approx(float(np.mean(rewards**2)), rel=1e-12)
    assert reward_scale(count, mean_square) == pytest.approx(brute_scale(rewards), rel=1e-12)


def test_merging_nothing_gives_nothing():
    assert merge_reward_moments(0, 0.0, 0, 0.0) == (0.0, 0.0)
    assert merge_reward_moments(4, 2.0, 0, 0.0) == (4.0, 2.0)


@pytest.mark.parametrize(
    "chunks",
    [[(0, 0.0)], [(3, 12.0)], [(0, 0.0), (5, 0.7)], [(4, 1e-9), (0, 0.0), (7, 3e4), (1, 2.5)]],
    ids=["nothing", "first", "empty_then_first", "mixed"],
)
def test_the_graphs_merge_gives_the_same_bits_as_merge_reward_moments(chunks):
    rng = np.random.default_rng(len(chunks))
    chunks = chunks + [
        (int(n), float(s))
        for n, s in zip(rng.integers(0, 50, 30), rng.random(30) * 50, strict=True)
    ]
    stats = RewardStatistics.create()
    merge = tf.function(stats.merge_in_graph)
    count, mean_square = 0.0, 0.0
    for n, sum_square in chunks:
        merge(tf.constant(float(n), tf.float64), tf.constant(sum_square, tf.float64))
        if n:
            count, mean_square = merge_reward_moments(count, mean_square, n, sum_square / n)
        assert (float(stats.count.numpy()), float(stats.mean_square.numpy())) == (
            count,
            mean_square,
        )
    assert count > 0  # the loop merged something


def test_the_learner_refuses_non_finite_reward_moments_before_its_update(config):
    # The adders refuse such rewards; a record made elsewhere must not reach the graph,
    # which merges the moments unchecked.
    cfg = config.replace(memory_warmup=8)
    builder = R2D2Builder(cfg)
    learner = builder.make_learner()
    records = []
    run_episodes(builder.make_adder(records.append), cfg, [np.full(20, 0.5), np.full(20, 0.5)])
    records[-1] = dataclasses.replace(records[-1], reward_sum_square=float("inf"))
    for record in records:
        learner.add(record)
    before = learner.online.get_weights()  # (the learner's own would merge the moments)
    with pytest.raises(ValueError, match="mean square of rewards must be finite"):
        learner.step()
    after = learner.online.get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


# The statistics as network weights ---------------------------------------------------


@pytest.fixture(scope="module")
def config(make_config):
    """The tiny CartPole config with normalised rewards and previous action/reward input."""
    return make_config(normalize_rewards=True, enable_prev_action_reward=True)


def test_config_refuses_a_non_bool_switch(make_config):
    with pytest.raises(ValueError, match="normalize_rewards must be True or False, got 'yes'"):
        make_config(normalize_rewards="yes")


def test_the_statistics_are_the_last_weights_float64_and_the_numpy_layout_has_them(config):
    network = R2D2Builder(config).make_learner().online
    names = [w.name.split(":")[0].replace("lstm_cell/", "") for w in network.model.weights]
    assert names[-2:] == ["reward_statistics/count", "reward_statistics/mean_square"]
    assert [(n, tuple(w.shape)) for n, w in zip(names, network.model.weights, strict=True)] == (
        weight_layout(config)
    )
    arrays = network.get_weights()
    assert [a.dtype for a in arrays[-2:]] == [np.float64, np.float64]
    assert all(a.dtype == np.float32 for a in arrays[:-2])
    assert not any("reward_statistics" in v.name for v in network.model.trainable_variables)
    plain = config.replace(normalize_rewards=False)
    assert weight_layout(plain) == weight_layout(config)[:-2]


def _rewards_into(learner, rewards):
    """Hands `rewards` to the learner's statistics as an actor's records would."""
    rewards = np.asarray(rewards, np.float64)
    learner._new_rewards[0] += rewards.size
    learner._new_rewards[1] += float(np.sum(rewards**2))


@pytest.mark.parametrize("rewards", [[0.0, 0.0], [0.3, -0.1, 2.0], [1e6, -3e5]])
def test_the_layers_scale_in_the_graph_equals_the_numpy_scale(config, rewards):
    learner = R2D2Builder(config).make_learner()
    _rewards_into(learner, rewards)
    assert learner.reward_scale == pytest.approx(brute_scale(rewards), rel=1e-12)
    in_graph = float(learner.online.reward_statistics.scale().numpy())
    assert in_graph == pytest.approx(brute_scale(rewards), rel=1e-6)


def test_the_statistics_round_trip_through_weights_files_checkpoints_and_set_weights(
    config, tmp_path
):
    set_global_seed(0)
    agent = R2D2Agent(config)
    agent.compile()
    _rewards_into(agent.learner, [3.0, -4.0])  # rms sqrt(12.5)
    scale = np.sqrt(12.5)
    weights = agent.learner.get_weights()  # flushes
    assert float(weights[-2]) == 2.0 and float(weights[-1]) == 12.5
    agent.save_weights(str(tmp_path / "w.h5"))
    path = agent.save_checkpoint(str(tmp_path / "c.h5"))
    fresh = R2D2Agent(config)
    assert fresh.learner.reward_scale == 1.0
    fresh.load_weights(str(tmp_path / "w.h5"))
    assert fresh.learner.reward_scale == pytest.approx(scale)
    assert fresh.actor.policy.reward_scale == pytest.approx(scale)  # synced to the actor
    restored = R2D2Agent(config)
    restored.learner.restore(read_checkpoint(path))
    assert restored.learner.reward_scale == pytest.approx(scale)
    other = R2D2Agent(config)
    other.learner.set_weights(weights)
    assert [float(w) for w in other.learner.get_weights()[-2:]] == [2.0, 12.5]
    assert float(other.learner.target.model.weights[-1].numpy()) == 12.5
    numpy_net = NumpyNetwork(config, weights)
    assert numpy_net.reward_scale == pytest.approx(scale)


def test_a_checkpoint_with_the_other_setting_is_refused_naming_it(config, tmp_path):
    agent = R2D2Agent(config.replace(normalize_rewards=False))
    state = read_checkpoint(agent.save_checkpoint(str(tmp_path / "c.h5")))
    with pytest.raises(IncompatibleCheckpointError, match="normalize_rewards: False"):
        check_compatible(state, config)
    old = dict(state.config)
    del old["normalize_rewards"]  # a checkpoint from before the field: its default
    check_compatible(
        type(state)(**{**vars(state), "config": old}), config.replace(normalize_rewards=False)
    )


# Records: each reward once -----------------------------------------------------------


def run_episodes(adder, config, rewards_per_episode, seed=0, reset_after=None):
    """Plays episodes of the given rewards into `adder` with random frames and Q-values
    (the same for every call with the same seed), the last one terminated."""
    rng = np.random.default_rng(seed)
    for rewards in rewards_per_episode:
        adder.add_first(rng.normal(size=config.input_shape))
        for t, reward in enumerate(rewards):
            end = t == len(rewards) - 1
            adder.add(
                int(rng.integers(config.nb_actions)),
                float(reward),
                rng.normal(size=config.input_shape),
                terminated=end,
                truncated=False,
                state=rng.normal(size=(2, config.state_size)).astype(np.float32),
                q_values=rng.normal(size=config.nb_actions),
            )
            if reset_after is not None and t == reset_after:
                adder.reset()
                break


def make_adder(config, records, normalize=True):
    layout = SequenceLayout.from_config(config)
    return SequenceAdder(
        records.append,
        layout,
        gamma=config.gamma,
        priority_eta=config.priority_eta,
        rescaling=True,
        normalize_rewards=normalize,
    )


def test_each_reward_is_counted_by_one_record_only(config):
    rng = np.random.default_rng(1)
    episodes = [rng.normal(size=size) for size in (1, 5, 23, 40)]
    records = []
    adder = make_adder(config, records)
    run_episodes(adder, config, episodes)
    assert config.period < config.input_length  # windows overlap
    assert sum(r.reward_count for r in records) == sum(len(e) for e in episodes)
    all_rewards = np.concatenate(episodes)
    assert sum(r.reward_sum_square for r in records) == pytest.approx(np.sum(all_rewards**2))
    assert adder.reward_scale == pytest.approx(brute_scale(all_rewards))


def test_the_rewards_of_a_dropped_episode_go_with_the_next_record(config):
    records = []
    adder = make_adder(config, records)
    run_episodes(adder, config, [np.full(30, 2.0)], reset_after=2)  # 3 rewards, no record
    assert records == []
    run_episodes(adder, config, [np.full(4, 1.0)])
    assert sum(r.reward_count for r in records) == 7
    assert sum(r.reward_sum_square for r in records) == pytest.approx(3 * 4.0 + 4 * 1.0)


@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "raw"])
def test_the_adders_initial_priorities_do_not_depend_on_the_reward_scale(config, normalize):
    base = [np.random.default_rng(2).normal(loc=0.5, size=size) for size in (30, 17)]
    priorities = {}
    for scale in SCALES:
        records = []
        run_episodes(make_adder(config, records, normalize), config, [r * scale for r in base])
        priorities[scale] = np.array([r.priority for r in records])
    same = [np.allclose(priorities[s], priorities[1.0], rtol=1e-9) for s in SCALES]
    assert all(same) == normalize, priorities  # raw rewards: other priorities


# The learner: the same updates at every reward scale -----------------------------------


def learner_losses(config, scale, updates=6, base=None):
    """Losses of `updates` updates of a seeded learner fed the same episodes with rewards
    `base` (default: normal draws) times `scale` (uniform sampling, so the draws do not
    depend on the priorities)."""
    set_global_seed(0)
    builder = R2D2Builder(config)
    learner = builder.make_learner()
    if base is None:
        base = [np.random.default_rng(3).normal(loc=0.3, size=size) for size in (25, 40, 9, 33)]
    run_episodes(builder.make_adder(learner.add), config, [r * scale for r in base])
    assert learner.ready
    return [learner.step()["loss"] for _ in range(updates)], learner


@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "raw"])
def test_the_learners_losses_do_not_depend_on_the_reward_scale(config, normalize):
    cfg = config.replace(normalize_rewards=normalize, priority_exponent=0.0, memory_warmup=8)
    scales = SCALES if normalize else (1.0, 100.0)
    losses = {scale: learner_losses(cfg, scale)[0] for scale in scales}
    same = [np.allclose(losses[s], losses[1.0], rtol=1e-4, atol=1e-7) for s in scales]
    assert all(same) == normalize, losses
    assert len(set(np.round(losses[1.0], 6))) > 1  # the loss moves: the updates change weights


@pytest.mark.parametrize("magnitude", [1.0, 0.5], ids=["unit", "half"])
def test_with_unit_rewards_the_switch_changes_no_bit_of_an_update(config, magnitude):
    """The control presets normalise: where every reward is +1 or -1 (CartPole's +1 a
    step) the scale is exactly 1 and the learner's updates are those without the switch,
    bit for bit; rewards of another size make them differ (the check can fail)."""
    signs = [np.random.default_rng(5).choice([-1.0, 1.0], size=n) for n in (25, 40, 9, 33)]
    base = [magnitude * s for s in signs]
    cfg = config.replace(priority_exponent=0.0, memory_warmup=8)
    normalized, learner = learner_losses(cfg, 1.0, base=base)
    raw, _ = learner_losses(cfg.replace(normalize_rewards=False), 1.0, base=base)
    assert learner.reward_scale == magnitude
    assert (normalized == raw) == (magnitude == 1.0), (normalized, raw)


def test_the_learners_reward_scale_is_the_rms_of_every_reward_received(config):
    cfg = config.replace(priority_exponent=0.0, memory_warmup=8)
    _, learner = learner_losses(cfg, 100.0, updates=1)
    base = [np.random.default_rng(3).normal(loc=0.3, size=size) for size in (25, 40, 9, 33)]
    assert learner.reward_scale == pytest.approx(brute_scale(np.concatenate(base) * 100.0))


# Acting: the previous reward in units of the scale -------------------------------------


class _RecordingPolicy:
    reward_scale = 10.0

    def __init__(self):
        self.rewards = []

    def step(self, obs, state, prev_action=None, prev_reward=None):
        self.rewards.append(float(prev_reward[0]))
        return np.zeros((1, 2), np.float32), state

    def set_weights(self, weights):
        pass


def test_the_actor_divides_the_previous_reward_by_the_policys_scale(config):
    policy = _RecordingPolicy()
    actor = R2D2Actor(config, policy, None, epsilon=0.0)
    actor.observe_first(np.zeros(4))
    actor.observe(actor.select_action(), 5.0, np.zeros(4), False, False)
    actor.select_action()
    assert policy.rewards == [0.0, 0.5]


# A whole agent -------------------------------------------------------------------------


class Recall(gym.Env):
    """Recall the cue of the first step: observation one-hot (cue 0, cue 1, blank); every
    step pays `scale` for the cue's action and `-scale` for the other."""

    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, scale=1.0, length=6):
        self.scale, self.length = scale, length

    def _obs(self, index):
        obs = np.zeros(3, np.float32)
        obs[index] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        return self._obs(self.cue), {}

    def step(self, action):
        self.t += 1
        reward = self.scale if action == self.cue else -self.scale
        return self._obs(2), reward, self.t >= self.length, False, {}


def agent_run(scale, nb_steps=1_200):
    config = memory_config(
        (3,), 2, seed=0, burnin=2, input_length=6, memory_warmup=20, epsilon_anneal_steps=600
    )
    agent = R2D2Agent(config)
    agent.compile()
    losses = []
    step = agent.learner.step

    def recorded_step():
        metrics = step()
        losses.append(metrics["loss"])
        return metrics

    agent.learner.step = recorded_step
    agent.fit(Recall(scale), nb_steps=nb_steps, verbose=0)
    env = Recall(scale)
    actions, q_values = [], []
    for episode in range(4):
        observation, _ = env.reset(seed=100 + episode)
        state, done = None, False
        while not done:
            action, q, state = agent.predict(observation, state)
            actions.append(action)
            q_values.append(q)
            observation, _, done, _, _ = env.step(action)
    return np.array(losses), actions, np.array(q_values), agent


def test_an_agent_learns_alike_with_rewards_x001_and_x100():
    small_losses, small_actions, small_q, small = agent_run(0.01)
    large_losses, large_actions, large_q, large = agent_run(100.0)
    assert len(small_losses) > 100
    np.testing.assert_allclose(small_losses, large_losses, rtol=1e-3, atol=1e-6)
    assert small_actions == large_actions
    assert small.learner.reward_scale == pytest.approx(0.01)  # every reward is ±scale
    assert large.learner.reward_scale == pytest.approx(100.0)
    # The user's Q-values are in return units: 10,000 times larger with rewards x10,000.
    np.testing.assert_allclose(large_q, small_q * 1e4, rtol=1e-3)
    obs = np.array([1.0, 0.0, 0.0], np.float32)
    np.testing.assert_allclose(
        large.compute_q_values(obs), small.compute_q_values(obs) * 1e4, rtol=1e-3
    )


def test_a_distributed_run_brings_the_actors_rewards_into_the_weights(no_leftovers):
    config = memory_config(
        (3,), 2, seed=0, burnin=2, input_length=6, memory_warmup=20, memory_capacity=200
    )
    manager = R2D2Manager(functools.partial(Recall, 100.0), config, actor_num=1, progress=False)
    with manager:
        manager.train(nb_steps=300, max_seconds=120)
    assert float(manager.latest_weights()[-2]) >= 100  # rewards counted by the learner
    # every reward is ±100: the test agent, holding the learner's weights, has scale 100
    assert manager.create_test_agent().learner.reward_scale == pytest.approx(100.0)


# The preset ----------------------------------------------------------------------------


def test_memory_config_is_the_masked_cartpole_preset_with_the_memory_suites_changes():
    config = memory_config(input_shape=(7,), nb_actions=4, lstm_units=32)
    masked = masked_cartpole_config()
    assert (config.input_shape, config.nb_actions, config.lstm_units) == ((7,), 4, 32)
    assert config.normalize_rewards and masked.normalize_rewards and config.multisteps == 1
    assert not config.enable_rescaling and config.gamma == 0.95
    assert config.adam_epsilon == 1e-3
    changed = {
        "input_shape",
        "nb_actions",
        "lstm_units",
        "multisteps",
        "enable_rescaling",
        "gamma",
        "train_interval",  # memory_window's: 6 in the 16-step window (masked: 4)
        "policy_average_updates",  # about 1,000 env steps at either interval
    }
    assert (config.train_interval, masked.train_interval) == (6, 4)
    for name in masked.to_dict():
        if name not in changed:
            assert getattr(config, name) == getattr(masked, name), name
    assert isinstance(config, R2D2Config)
