"""Tests of `r2d2_agent.roles.learner.R2D2Learner`: warm-up, target copies, priorities, IS
weights, burn-in and learning.

Configs are tiny (LSTM 8, dense 8, burn-in 2, 4 trained steps) so one compiled update takes
milliseconds, but tracing the LSTM update graph takes seconds: the LSTM tests therefore share
one learner (`shared`), reset to the same initial weights before each use, and give it a
`FixedReplay`, which always returns the same batch with chosen sampling probabilities, so that
losses can be compared on identical data. It trains with plain SGD, whose update is
proportional to the gradient (Adam's first step is nearly sign(gradient)).
"""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent.compat import keras
from r2d2_agent.math import importance_weights
from r2d2_agent.replay import SequenceLayout, SequenceRecord, SequenceReplay
from r2d2_agent.roles import R2D2Builder


@pytest.fixture(scope="module")
def learner_config(make_config):
    """Factory: the tiny CartPole config with 1-step returns (`multisteps=1`), as the
    constant-reward test states (the look-ahead of each sequence is then one step)."""
    return lambda **changes: make_config(**{"multisteps": 1, **changes})


def make_sequence(config, rng, reward=None, discount=None):
    """One random but well-formed sequence as the replay samples it: the fields of the
    config's `SequenceLayout` but `frame_ids`, and its `T + S - 1` frames."""
    layout = SequenceLayout.from_config(config)
    spec = layout.field_spec()
    seq = {name: np.zeros(shape, dtype) for name, (shape, dtype) in spec.items()}
    del seq["frame_ids"]
    length = config.input_length
    frames_shape = (layout.frames_per_sequence, *layout.frame_shape)
    seq["frames"] = rng.normal(size=frames_shape).astype(np.float32)
    seq["obs_mask"][:] = 1.0
    seq["burnin_mask"][:] = 1.0
    seq["state"][:] = rng.normal(scale=0.3, size=seq["state"].shape)
    seq["actions"][:] = rng.integers(config.nb_actions, size=length)
    seq["returns"][:] = rng.normal(size=length) if reward is None else reward
    seq["bootstrap_discount"][:] = config.gamma**config.multisteps if discount is None else discount
    seq["bootstrap_index"][:] = np.arange(length) + config.multisteps
    seq["mask"][:] = 1.0
    return seq


def make_learner(config, **kwargs):
    return R2D2Builder(config).make_learner(**kwargs)


def as_record(sequence, priority, first_frame):
    """The sampled-form `sequence` as an adder record that brings its own frames, with ids
    `first_frame, first_frame + 1, ...`."""
    fields = {k: v for k, v in sequence.items() if k != "frames"}
    fields["frame_ids"] = first_frame + np.arange(len(sequence["frames"]))
    return SequenceRecord(fields, priority, sequence["frames"], first_frame)


def fill(replay_or_learner, config, count, seed=0, priority=1.0, **kwargs):
    """Adds `count` random sequences (each with frames of its own)."""
    rng = np.random.default_rng(seed)
    first_frame = 0
    for _ in range(count):
        sequence = make_sequence(config, rng, **kwargs)
        replay_or_learner.add(as_record(sequence, priority, first_frame))
        first_frame += len(sequence["frames"])


def stack(sequences):
    return {name: np.stack([s[name] for s in sequences]) for name in sequences[0]}


class FixedReplay:
    """Replay stand-in: `sample` always returns `batch` with `probabilities`."""

    def __init__(self, batch, probabilities):
        self.batch = batch
        self.probabilities = np.asarray(probabilities, np.float64)
        self.updates = []

    def __len__(self):
        return len(self.probabilities)

    def add(self, sequence, priority):
        raise AssertionError("not used")

    def batch_spec(self):
        return {k: (v.shape[1:], v.dtype) for k, v in self.batch.items()}

    def sample(self, batch_size):
        assert batch_size == len(self.probabilities)
        indices = np.arange(batch_size)
        return indices, {k: v.copy() for k, v in self.batch.items()}, self.probabilities

    def update_priorities(self, indices, priorities):
        self.updates.append((np.asarray(indices), np.asarray(priorities)))


def weights_equal(a, b, atol=0.0):
    if len(a) != len(b):
        return False
    return all(np.allclose(x, y, rtol=0.0, atol=atol) for x, y in zip(a, b, strict=True))


def test_step_before_warmup_raises_runtime_error(learner_config):
    learner = make_learner(learner_config(lstm_units=0, memory_warmup=5))
    fill(learner, learner.config, 4)
    assert not learner.ready
    with pytest.raises(RuntimeError, match="warm-up"):
        learner.step()


def test_trace_builds_the_graph_the_first_step_runs_without_changing_anything(learner_config):
    learner = make_learner(learner_config(lstm_units=0))
    weights = learner.get_weights()
    learner.trace()  # before any data
    traces = learner.update_traces
    assert traces == 1 and learner.updates == 0 and weights_equal(learner.get_weights(), weights)
    fill(learner, learner.config, 8)
    learner.step()
    assert learner.update_traces == traces


def test_the_first_update_traces_its_graph_once(learner_config):
    # The optimizer's slots exist before the first trace; a first trace that created them
    # would make TensorFlow trace the update a second time (2 s more at start-up).
    learner = make_learner(learner_config())
    assert learner.config.enable_lstm
    fill(learner, learner.config, 8)
    learner.step()
    learner.step()
    assert learner.update_traces == 1


def test_an_optimizer_set_later_still_traces_the_update_once(learner_config):
    # As `R2D2Agent.compile(optimizer)` does: the setter creates the new optimizer's slots.
    learner = make_learner(learner_config())
    learner.optimizer = keras.optimizers.Adam(1e-3)
    fill(learner, learner.config, 8)
    learner.step()
    learner.step()
    assert learner.update_traces == 1
    assert int(learner.optimizer.iterations.numpy()) == 2


def test_an_optimizer_set_after_updates_is_the_one_the_next_update_uses(learner_config):
    # A traced update holds the optimizer it was traced with; the setter makes a new trace.
    learner = make_learner(learner_config(lstm_units=0))
    fill(learner, learner.config, 8)
    learner.step()
    learner.optimizer = keras.optimizers.SGD(0.0)
    weights = learner.get_weights()
    learner.step()
    assert weights_equal(learner.get_weights(), weights)
    assert int(learner.optimizer.iterations.numpy()) == 1


def test_learn_refuses_a_batch_of_another_size_naming_both(learner_config):
    learner = make_learner(learner_config(lstm_units=0))
    rng = np.random.default_rng(0)
    size = learner.config.batch_size
    batch = stack([make_sequence(learner.config, rng) for _ in range(size - 1)])
    with pytest.raises(ValueError, match=rf"batch_size = {size} .*shape \({size - 1},\)"):
        learner.learn(batch, np.ones(size - 1))
    assert learner.updates == 0


def test_target_is_copied_only_every_target_update_interval_updates(learner_config):
    learner = make_learner(learner_config(lstm_units=0, target_update_interval=3))
    fill(learner, learner.config, 8)
    initial = learner.target.get_weights()
    learner.step()
    assert not weights_equal(learner.online.get_weights(), initial)
    assert weights_equal(learner.target.get_weights(), initial)
    learner.step()
    assert weights_equal(learner.target.get_weights(), initial)
    learner.step()
    assert weights_equal(learner.target.get_weights(), learner.online.get_weights())
    assert not weights_equal(learner.target.get_weights(), initial)


def test_step_updates_the_sampled_priorities_in_replay(learner_config):
    learner = make_learner(learner_config(lstm_units=0, batch_size=16))
    fill(learner, learner.config, 16, priority=1.0)
    _, _, before = learner.replay.sample(64)
    assert np.allclose(before, 1.0 / 16)  # all priorities equal before the update
    metrics = learner.step()
    _, _, after = learner.replay.sample(64)
    assert not np.allclose(after, 1.0 / 16)
    assert metrics["mean_priority"] != pytest.approx(1.0)


# Shared LSTM learner ---------------------------------------------------------------------

SGD_RATE = 0.2


class Shared:
    """One traced LSTM learner for several tests; `use` resets it."""

    def __init__(self, config):
        self.config = config
        self.learner = make_learner(config, optimizer=keras.optimizers.SGD(SGD_RATE))
        self.initial = self.learner.get_weights()

    def use(self, replay):
        learner = self.learner
        learner.set_weights(self.initial)
        learner.replay = replay
        learner.updates = 0
        return learner

    def random_batch(self, seed):
        rng = np.random.default_rng(seed)
        return stack([make_sequence(self.config, rng) for _ in range(self.config.batch_size)])


@pytest.fixture(scope="module")
def shared(learner_config):
    """Without rescaling and gradient clipping, so that losses compare exactly."""
    return Shared(learner_config(enable_rescaling=False, clipnorm=None))


def fixed(batch, probabilities=(0.25,) * 4):
    return FixedReplay(batch, probabilities)


def test_learner_writes_back_its_td_priorities(shared):
    replay = fixed(shared.random_batch(1))
    shared.use(replay).step()
    ((indices, priorities),) = replay.updates
    assert list(indices) == [0, 1, 2, 3]
    assert priorities.shape == (4,) and np.all(priorities > 0)


def test_learner_reports_the_mean_of_the_priorities_it_wrote(shared):
    replay = fixed(shared.random_batch(1))
    metrics = shared.use(replay).step()
    ((_, priorities),) = replay.updates
    assert metrics["mean_priority"] == pytest.approx(float(priorities.mean()), rel=1e-6)


def test_equal_sampling_probabilities_give_unit_importance_weights():
    np.testing.assert_array_equal(importance_weights(np.full(4, 0.25), 4, 0.6), np.ones(4))


def test_importance_weights_scale_the_loss(shared):
    """Four identical sequences: the weighted loss is mean(w) times the unweighted one."""
    one = make_sequence(shared.config, np.random.default_rng(2))
    batch = stack([one] * 4)
    loss_equal = shared.use(fixed(batch)).step()["loss"]
    probabilities = np.array([0.1, 0.2, 0.4, 0.3])
    loss_skewed = shared.use(fixed(batch, probabilities)).step()["loss"]
    beta = shared.config.is_exponent  # at update 0
    w = (probabilities / probabilities.min()) ** -beta
    assert loss_equal > 0
    assert loss_skewed == pytest.approx(w.mean() * loss_equal, rel=1e-5)


def _burnin_losses(shared, burnin_mask):
    """Losses on two batches that differ only in their burn-in observations."""
    batch = shared.random_batch(3)
    batch["burnin_mask"][:] = burnin_mask
    other = {k: v.copy() for k, v in batch.items()}
    other["frames"][:, : shared.config.burnin] += 1.0  # S = 1: frame p is observation p
    return shared.use(fixed(batch)).step()["loss"], shared.use(fixed(other)).step()["loss"]


def test_burnin_observations_change_the_loss(shared):
    # The same tolerance as the masked case below: the update is deterministic far below
    # it, and how much the burn-in moves the loss depends on the initial weights (by
    # about 1e-4 relative, in one ordering of the suite).
    loss_a, loss_b = _burnin_losses(shared, burnin_mask=1.0)
    assert loss_a != pytest.approx(loss_b, rel=1e-6)


def test_masked_burnin_observations_do_not_change_the_loss(shared):
    loss_a, loss_b = _burnin_losses(shared, burnin_mask=0.0)
    assert loss_a == pytest.approx(loss_b, rel=1e-6)


def test_burnin_gets_no_gradient(shared):
    """An update with burn-in equals one without burn-in that starts from the burnt-in state.

    If gradient flowed through the burn-in unroll, the LSTM and encoder weights would get
    extra gradient and the two SGD updates would differ.
    """
    batch = shared.random_batch(4)
    with_burnin = shared.use(fixed(batch))
    b = shared.config.burnin
    obs = batch["frames"][:, :, None]  # S = 1: (B, T, 1, *frame)
    _, (h, c) = with_burnin.online.unroll(
        obs[:, :b],
        (batch["state"][:, 0], batch["state"][:, 1]),
        batch["burnin_mask"] > 0.5,
    )
    no_burnin_batch = dict(
        batch,
        frames=batch["frames"][:, b:],
        obs_mask=batch["obs_mask"][:, b:],
        burnin_mask=batch["burnin_mask"][:, :0],
        state=np.stack([h.numpy(), c.numpy()], axis=1),
    )
    no_burnin = make_learner(
        shared.config.replace(burnin=0),
        optimizer=keras.optimizers.SGD(SGD_RATE),
        replay=fixed(no_burnin_batch),
    )
    no_burnin.set_weights(shared.initial)
    loss_a = with_burnin.step()["loss"]
    loss_b = no_burnin.step()["loss"]
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    assert not weights_equal(with_burnin.get_weights(), shared.initial)
    assert weights_equal(with_burnin.get_weights(), no_burnin.get_weights(), atol=1e-5)


def test_learner_fits_constant_rewards(shared):
    """gamma = 0 (bootstrap discount 0), n = 1, every reward 1, no rescaling: Q -> 1."""
    replay = SequenceReplay(SequenceLayout.from_config(shared.config), 64, 0.9, seed=0)
    fill(replay, shared.config, 16, seed=5, reward=1.0, discount=0.0)
    learner = shared.use(replay)
    first = learner.step()["mean_q"]
    for _ in range(300):
        metrics = learner.step()
    assert abs(first - 1.0) > 0.1  # it did not start there
    assert metrics["mean_q"] == pytest.approx(1.0, abs=0.1)
    assert metrics["loss"] < 1e-2


def _counting_unroll(network):
    """Counts the calls of `network.unroll` (made while the update is traced)."""
    calls = []
    unroll = network.unroll

    def counted(*args, **kwargs):
        calls.append(args[0].shape[1])  # the steps unrolled
        return unroll(*args, **kwargs)

    network.unroll = counted
    return calls


def _train_on_one_batch(learners, batch, after_step=None, steps=3):
    """`steps` updates of each learner, all on `batch` (each its own `FixedReplay`);
    `after_step(learner)` runs after each update."""
    probabilities = np.full(len(batch["actions"]), 1.0 / len(batch["actions"]))
    for learner in learners:
        learner.replay = FixedReplay(batch, probabilities)
        for _ in range(steps):
            learner.step()
            if after_step is not None:
                after_step(learner)


def _assert_same_updates(a, b, initial):
    """`a` and `b` learned (away from `initial`) the same weights and priorities, but
    for float rounding (a changed graph rounds differently)."""
    assert weights_equal(a.get_weights(), b.get_weights(), atol=1e-6)
    assert not weights_equal(a.get_weights(), initial, atol=1e-4)  # they learned
    for (_, x), (_, y) in zip(a.replay.updates, b.replay.updates, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"enable_rescaling": True},
        {"enable_prev_action_reward": True},
        {"advantage_learning": 0.5},  # its gaps need the target network, not the look-ahead
    ],
)
def test_with_gamma_0_the_update_runs_no_target_network_and_learns_the_same(
    learner_config, changes
):
    """γ = 0 (`each_step_scored`): every bootstrap discount is 0, so the update skips the
    look-ahead and (without advantage learning) the target network; it must change the
    weights and priorities as the full update does on the same batch (γ = 1e-30 takes
    the full path)."""
    changes = dict(enable_rescaling=False, clipnorm=None, multisteps=2, burnin=3) | changes
    skipping = make_learner(
        learner_config(gamma=0.0, **changes), optimizer=keras.optimizers.SGD(0.1)
    )
    full = make_learner(learner_config(gamma=1e-30, **changes), optimizer=keras.optimizers.SGD(0.1))
    initial = skipping.get_weights()
    full.set_weights(initial)
    rng = np.random.default_rng(3)
    config = skipping.config
    batch = stack([make_sequence(config, rng, discount=0.0) for _ in range(config.batch_size)])
    target_calls = {id(x): _counting_unroll(x.target) for x in (skipping, full)}
    online_calls = {id(x): _counting_unroll(x.online) for x in (skipping, full)}
    _train_on_one_batch((skipping, full), batch)
    length, burnin = config.input_length, config.burnin
    assert target_calls[id(full)] == [burnin, length + 2]
    assert target_calls[id(skipping)] == ([burnin, length] if config.advantage_learning else [])
    assert online_calls[id(full)] == [burnin, length + 2]
    assert online_calls[id(skipping)] == [burnin, length]  # no look-ahead
    _assert_same_updates(skipping, full, initial)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"enable_rescaling": True, "enable_double_dqn": False},
        {"enable_prev_action_reward": True},
        {"advantage_learning": 0.5},
        {"gamma": 0.0, "advantage_learning": 0.5},  # the target network for the gaps only
    ],
)
def test_with_a_target_copy_every_update_the_online_network_stands_in_for_it(
    learner_config, changes
):
    """`target_update_interval=1`: the target network holds the online weights at every
    update, so the update runs the online network alone and must change the weights and
    priorities as an update that runs a target network copied before each update does.
    Nothing is copied after an update; a checkpoint gets the copy."""
    changes = dict(clipnorm=None, multisteps=2, burnin=3, gamma=0.9) | changes
    sgd = keras.optimizers.SGD
    alone = make_learner(learner_config(target_update_interval=1, **changes), optimizer=sgd(0.1))
    copied = make_learner(
        learner_config(target_update_interval=10**6, **changes), optimizer=sgd(0.1)
    )
    initial = alone.get_weights()
    copied.set_weights(initial)
    rng = np.random.default_rng(5)
    config = alone.config
    batch = stack([make_sequence(config, rng) for _ in range(config.batch_size)])
    target_calls = {id(x): _counting_unroll(x.target) for x in (alone, copied)}

    def copy_into_target(learner):  # what interval 1 does after every update
        if learner is copied:
            learner.update_target()

    _train_on_one_batch((alone, copied), batch, copy_into_target)
    assert target_calls[id(alone)] == []
    assert len(target_calls[id(copied)]) == 2  # burn-in and the trained (+ look-ahead) steps
    _assert_same_updates(alone, copied, initial)
    assert not weights_equal(alone.target.get_weights(), alone.online.get_weights())  # no copy
    state = alone.save()  # a checkpoint holds the target the next update would read
    assert weights_equal(state.target_weights, alone.online.get_weights())
    assert weights_equal(alone.target.get_weights(), alone.online.get_weights())


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_advantage_learning_widens_the_gap_to_its_fixed_point(learner_config, alpha):
    """γ = 0, n = 1, no rescaling, reward 1 for action 0 and 0 for action 1: plain
    targets fit Q(., 1) = 0; advantage learning fits (0 - α 1) / (1 - α) = -1 at α = 0.5
    (the bandit of `test_advantage_learning_iterated_reaches_its_fixed_point`)."""
    config = learner_config(
        enable_rescaling=False, clipnorm=None, advantage_learning=alpha, target_update_interval=5
    )
    replay = SequenceReplay(SequenceLayout.from_config(config), 64, 0.9, seed=0)
    rng = np.random.default_rng(7)
    sequences, first_frame = [], 0
    for _ in range(16):
        sequence = make_sequence(config, rng, discount=0.0)
        sequence["returns"][:] = (sequence["actions"] == 0).astype(np.float32)
        replay.add(as_record(sequence, 1.0, first_frame))
        sequences.append(sequence)
        first_frame += len(sequence["frames"])
    learner = make_learner(config, optimizer=keras.optimizers.Adam(0.01), replay=replay)
    for _ in range(600):
        learner.step()
    batch = stack(sequences)  # the values it was trained on: both actions' at every step
    b, length = config.burnin, config.input_length
    _, state = learner.online.unroll(
        batch["frames"][:, :b, None], (batch["state"][:, 0], batch["state"][:, 1])
    )
    q = learner.online.unroll(batch["frames"][:, b : b + length, None], state)[0].numpy()
    assert np.median(q[..., 0]) == pytest.approx(1.0, abs=0.1)
    assert np.median(q[..., 1]) == pytest.approx(-alpha / (1.0 - alpha), abs=0.1)


def test_beta_stays_at_beta0_by_default(learner_config):
    learner = make_learner(learner_config())
    learner.updates = 10**6
    assert learner.beta == learner.config.is_exponent


def test_beta_reaches_one_after_is_anneal_updates(learner_config):
    learner = make_learner(learner_config(is_anneal_updates=100))
    learner.updates = 50
    assert learner.beta == pytest.approx((learner.config.is_exponent + 1.0) / 2)
    learner.updates = 100
    assert learner.beta == pytest.approx(1.0)


def test_learning_rate_is_constant_by_default(learner_config):
    learner = make_learner(learner_config(learning_rate=1e-3))
    fill(learner, learner.config, 8)
    for _ in range(3):
        learner.step()
        assert float(learner.optimizer.learning_rate) == pytest.approx(1e-3)


# lr(k) = 1e-3 + (1e-4 - 1e-3) min(k / 4, 1) at the update that starts with k earlier ones.
ANNEALED = [1e-3, 7.75e-4, 5.5e-4, 3.25e-4, 1e-4, 1e-4]


def annealed_learner(learner_config):
    return make_learner(
        learner_config(learning_rate=1e-3, learning_rate_final=1e-4, learning_rate_anneal_updates=4)
    )


def test_learning_rate_anneals_linearly_over_learner_updates(learner_config):
    learner = annealed_learner(learner_config)
    fill(learner, learner.config, 8)
    used = []
    for _ in ANNEALED:
        learner.step()
        used.append(float(learner.optimizer.learning_rate))
    assert used == pytest.approx(ANNEALED, rel=1e-6)


def test_a_restored_learner_continues_the_learning_rate_ramp(learner_config):
    first = annealed_learner(learner_config)
    fill(first, first.config, 8)
    for _ in range(2):
        first.step()
    resumed = annealed_learner(learner_config)
    resumed.restore(first.save(replay=True))
    resumed.step()
    assert float(resumed.optimizer.learning_rate) == pytest.approx(ANNEALED[2], rel=1e-6)
