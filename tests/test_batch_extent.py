"""Tests of `r2d2_agent.replay.extent` (cutting a batch to its real steps) and of the
learner's update on cut batches: the same update as on the whole windows."""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent.replay import BatchExtent, SequenceLayout, batch_extent, length_step, trim_batch
from r2d2_agent.roles import R2D2Builder


def make_layout(burnin=3, input_length=16, multisteps=2, input_sequence=1, period=8):
    return SequenceLayout(
        frame_shape=(2,),
        frame_dtype=np.float32,
        input_sequence=input_sequence,
        state_size=4,
        burnin=burnin,
        input_length=input_length,
        multisteps=multisteps,
        period=period,
        prev_action_reward=True,
    )


@pytest.mark.parametrize(
    ("input_length", "step"), [(4, 8), (8, 8), (16, 8), (32, 8), (64, 16), (80, 20), (128, 32)]
)
def test_length_step_is_a_quarter_of_the_window_and_at_least_8(input_length, step):
    assert length_step(input_length) == step


@pytest.mark.parametrize(
    ("real_steps", "burnin_real", "expected"),
    [
        # real trained steps of each sequence, real burn-in steps of each -> extent
        ((16, 3), (0, 0), BatchExtent(0, 16)),  # one sequence runs to the window's end
        ((5, 3), (0, 0), BatchExtent(0, 8)),  # rounded up to the step of 8
        ((8, 1), (0, 0), BatchExtent(0, 8)),  # exactly a multiple
        ((9, 1), (0, 0), BatchExtent(0, 16)),
        ((5, 3), (0, 2), BatchExtent(3, 8)),  # one real burn-in step keeps all of it
        ((0, 0), (0, 0), BatchExtent(0, 8)),  # nothing real: the smallest extent
    ],
)
def test_batch_extent_ends_at_the_last_real_step_of_any_sequence(real_steps, burnin_real, expected):
    layout = make_layout()
    mask = np.zeros((len(real_steps), 16), np.float32)
    burnin_mask = np.zeros((len(real_steps), 3), np.float32)
    for row, (steps, burn) in enumerate(zip(real_steps, burnin_real, strict=True)):
        mask[row, :steps] = 1.0
        burnin_mask[row, 3 - burn :] = 1.0
    assert batch_extent(layout, mask, burnin_mask) == expected


def numbered_batch(layout, rows=2):
    """A batch whose every entry says where it lies: field value = 1000 * row + index
    along the field's step axis (frames: their index in the frame list)."""
    spec = {name: v for name, v in layout.field_spec().items() if name != "frame_ids"}
    spec["frames"] = ((layout.frames_per_sequence, *layout.frame_shape), layout.frame_dtype)
    batch = {}
    for name, (shape, dtype) in spec.items():
        index = np.arange(shape[0]) if name != "state" else np.zeros(shape[0])
        values = 1000 * np.arange(rows)[:, None] + index[None, :]
        batch[name] = np.broadcast_to(
            values.reshape(rows, shape[0], *([1] * (len(shape) - 1))), (rows, *shape)
        ).astype(dtype)
    return batch


@pytest.mark.parametrize("input_sequence", [1, 4])
def test_trim_batch_keeps_the_kept_burnin_the_trained_steps_and_the_look_ahead(input_sequence):
    layout = make_layout(input_sequence=input_sequence)  # b 3, L 16, n 2: T = 21
    batch = numbered_batch(layout)
    cut = trim_batch(layout, batch, BatchExtent(burnin=0, input_length=8))
    # Observations 3 .. 12 (the 8 trained steps and 2 look-ahead ones after the burn-in).
    np.testing.assert_array_equal(cut["obs_mask"][1], 1000 + np.arange(3, 13))
    np.testing.assert_array_equal(cut["prev_actions"][0], np.arange(3, 13))
    np.testing.assert_array_equal(cut["prev_rewards"][0], np.arange(3, 13))
    # Their stacks: frames 3 .. 12 + S - 1.
    np.testing.assert_array_equal(cut["frames"][0, :, 0], np.arange(3, 13 + input_sequence - 1))
    assert cut["burnin_mask"].shape == (2, 0)
    for name in ("actions", "returns", "bootstrap_discount", "bootstrap_index", "mask"):
        np.testing.assert_array_equal(cut[name][1], 1000 + np.arange(8))
    np.testing.assert_array_equal(cut["state"], batch["state"])
    with_burnin = trim_batch(layout, batch, BatchExtent(burnin=3, input_length=8))
    np.testing.assert_array_equal(with_burnin["obs_mask"][0], np.arange(0, 13))
    np.testing.assert_array_equal(with_burnin["burnin_mask"][0], np.arange(3))
    np.testing.assert_array_equal(
        with_burnin["frames"][0, :, 0], np.arange(0, 13 + input_sequence - 1)
    )


def test_trim_batch_returns_a_whole_extent_as_it_is():
    layout = make_layout()
    batch = numbered_batch(layout)
    assert trim_batch(layout, batch, BatchExtent(burnin=3, input_length=16)) is batch


@pytest.mark.parametrize("extent", [BatchExtent(4, 8), BatchExtent(0, 0), BatchExtent(0, 17)])
def test_trim_batch_refuses_an_extent_outside_the_layout(extent):
    layout = make_layout()
    with pytest.raises(ValueError, match="outside the layout"):
        trim_batch(layout, numbered_batch(layout), extent)


def test_trim_batch_refuses_a_field_it_does_not_know():
    layout = make_layout()
    batch = {**numbered_batch(layout), "extra": np.zeros((2, 21))}
    with pytest.raises(ValueError, match="'extra'"):
        trim_batch(layout, batch, BatchExtent(0, 8))


def short_episode_batch(config, real_steps, seed=0):
    """A sampled-form batch of windows that start at their episode's first step (no real
    burn-in) and end after `real_steps[i]` steps (terminated), zero padded after."""
    layout = SequenceLayout.from_config(config)
    rng = np.random.default_rng(seed)
    spec = {name: v for name, v in layout.field_spec().items() if name != "frame_ids"}
    rows = len(real_steps)
    batch = {name: np.zeros((rows, *shape), dtype) for name, (shape, dtype) in spec.items()}
    frames = np.zeros((rows, layout.frames_per_sequence, *layout.frame_shape), np.float32)
    b, n = config.burnin, config.multisteps
    for row, steps in enumerate(real_steps):
        real = slice(b, b + steps + 1)  # observations s_0 .. s_E
        frames[row, real] = rng.normal(size=(steps + 1, *layout.frame_shape))
        batch["obs_mask"][row, real] = 1.0
        batch["actions"][row, :steps] = rng.integers(config.nb_actions, size=steps)
        batch["returns"][row, :steps] = rng.normal(size=steps)
        k = np.minimum(n, steps - np.arange(steps))
        batch["bootstrap_index"][row] = np.arange(config.input_length)
        batch["bootstrap_index"][row, :steps] += k
        ends = np.arange(steps) + k == steps  # bootstraps on the terminal observation
        batch["bootstrap_discount"][row, :steps] = np.where(ends, 0.0, config.gamma**k)
        batch["mask"][row, :steps] = 1.0
    batch["frames"] = frames
    return batch


def test_the_update_on_a_cut_batch_is_the_update_on_its_whole_windows(make_config):
    config = make_config(
        burnin=4, input_length=32, multisteps=2, batch_size=4, target_update_interval=100
    )
    cut_learner = R2D2Builder(config).make_learner()
    whole_learner = R2D2Builder(config).make_learner()
    whole_learner.set_weights(cut_learner.get_weights())
    batch = short_episode_batch(config, real_steps=[3, 11, 7, 1])
    weights = np.array([1.0, 0.5, 0.8, 0.3], np.float32)

    before = cut_learner.get_weights()
    priorities = cut_learner.learn(batch, weights)
    assert list(cut_learner._train) == [BatchExtent(burnin=0, input_length=16)]

    arrays = [batch[name] for name in whole_learner._fields]
    loss, whole_priorities, mean_q = whole_learner._compiled_update()(
        *arrays, weights, whole_learner._take_new_rewards()
    )
    np.testing.assert_allclose(priorities, whole_priorities.numpy(), rtol=1e-5, atol=1e-7)
    assert cut_learner.last_metrics["loss"] == pytest.approx(float(loss), rel=1e-5)
    assert cut_learner.last_metrics["mean_q"] == pytest.approx(float(mean_q), rel=1e-5)
    for cut, whole in zip(cut_learner.get_weights(), whole_learner.get_weights(), strict=True):
        np.testing.assert_allclose(cut, whole, rtol=1e-5, atol=1e-7)
    moved = [not np.allclose(a, b) for a, b in zip(cut_learner.get_weights(), before, strict=True)]
    assert any(moved)  # the update trained


def test_a_learner_fed_by_an_actor_on_short_episodes_cuts_its_batches_and_trains_alike(
    make_config,
):
    # Episodes of 2 to 6 steps (terminated) in windows of 4 + 32 + 2 steps: every window
    # starts at its episode's first step, so the learner drops the burn-in and unrolls
    # 8 trained steps instead of 32, and its update matches the update on whole windows.
    config = make_config(burnin=4, input_length=32, sequence_period=16, multisteps=2, batch_size=8)
    builder = R2D2Builder(config)
    learner = builder.make_learner()
    whole = builder.make_learner()
    whole.set_weights(learner.get_weights())
    policy = builder.make_policy()
    policy.set_weights(learner.get_weights())
    actor = builder.make_actor(policy, builder.make_adder(learner.add), 1.0, 0)
    rng = np.random.default_rng(0)
    while not learner.ready:
        steps = int(rng.integers(2, 7))
        actor.observe_first(rng.normal(size=config.input_shape))
        for t in range(1, steps + 1):
            obs = rng.normal(size=config.input_shape)
            actor.observe(actor.select_action(), float(rng.normal()), obs, t == steps, False)
    _, batch, _ = learner.replay.sample(config.batch_size)
    weights = np.linspace(0.2, 1.0, config.batch_size).astype(np.float32)

    priorities = learner.learn(batch, weights)
    assert list(learner._train) == [BatchExtent(burnin=0, input_length=8)]
    arrays = [batch[name] for name in whole._fields]
    _, whole_priorities, _ = whole._compiled_update()(*arrays, weights, whole._take_new_rewards())
    np.testing.assert_allclose(priorities, whole_priorities.numpy(), rtol=1e-5, atol=1e-7)
    for cut, full in zip(learner.get_weights(), whole.get_weights(), strict=True):
        np.testing.assert_allclose(cut, full, rtol=1e-5, atol=1e-7)
