"""Tests of `r2d2_agent.roles.actor.R2D2Actor`: ε-greedy choice, recurrent state, frame
stacking and what reaches the sequence adder.

A fake policy (`CountingPolicy`) makes every quantity predictable: its Q-values are a
function of the observation and its recurrent state counts the steps since the episode
start, so the state stored with each sequence tells at which step it was taken.
"""

from __future__ import annotations

import numpy as np
import pytest

from r2d2_agent.roles import R2D2Actor, R2D2Builder
from r2d2_agent.testing import SequenceRecorder

UNITS = 2

COUNTING = dict(
    input_shape=(3,),
    nb_actions=3,
    lstm_units=UNITS,
    dense_units=4,
    multisteps=1,
    sequence_period=2,
    enable_rescaling=False,
)
"""On top of `make_config`'s tiny config: as many observation values as actions (the
`CountingPolicy`'s Q-values are the newest frame), a 2-unit state, 1-step returns and a new
sequence every 2 steps, which the expected sequences below are worked out for."""


@pytest.fixture(scope="module")
def config_for(make_config):
    """Factory: the `COUNTING` config with `changes` applied."""
    return lambda **changes: make_config(**{**COUNTING, **changes})


class CountingPolicy:
    """Q = the newest frame of the observation; next state = state + 1."""

    def __init__(self):
        self.seen_obs: list[np.ndarray] = []
        self.seen_states: list[np.ndarray] = []

    def step(self, obs, state):
        self.seen_obs.append(np.array(obs))
        self.seen_states.append(np.array(state))
        q = np.asarray(obs, np.float64)[:, -1].reshape(len(obs), -1)
        return q, state + 1.0

    def set_weights(self, weights):
        pass


@pytest.mark.parametrize(
    ("obs", "best"), [([0.1, 0.9, 0.3], 1), ([5.0, -1.0, 2.0], 0), ([0.0, 0.0, 7.0], 2)]
)
def test_greedy_actor_picks_argmax_of_q(config_for, obs, best):
    actor = R2D2Actor(config_for(), CountingPolicy(), None, epsilon=0.0, seed=0)
    actor.observe_first(np.array(obs))
    assert actor.select_action() == best


def test_epsilon_one_picks_actions_uniformly(config_for):
    nb_actions, draws = 4, 4000
    actor = R2D2Actor(
        config_for(nb_actions=nb_actions, input_shape=(nb_actions,)),
        CountingPolicy(),
        None,
        epsilon=1.0,
        seed=123,
    )
    actor.observe_first(np.array([9.0, 0.0, 0.0, 0.0]))  # greedy would always pick 0
    counts = np.bincount([actor.select_action() for _ in range(draws)], minlength=nb_actions)
    np.testing.assert_allclose(counts / draws, 0.25, atol=0.03)


def test_epsilon_outside_unit_interval_is_rejected(config_for):
    with pytest.raises(ValueError, match="epsilon"):
        R2D2Actor(config_for(), CountingPolicy(), None, epsilon=1.5)


def _two_episodes(actor):
    """Three steps of one episode, then the first step of the next."""
    frame = np.zeros(3)
    actor.observe_first(frame)
    for _ in range(3):
        actor.observe(actor.select_action(), 0.0, frame, False, False)
    actor.observe_first(frame)
    actor.select_action()


def test_recurrent_state_is_carried_across_steps(config_for):
    policy = CountingPolicy()
    _two_episodes(R2D2Actor(config_for(), policy, None, epsilon=0.0))
    assert [float(s[0, 0, 0]) for s in policy.seen_states[:3]] == [0.0, 1.0, 2.0]


def test_recurrent_state_is_reset_at_observe_first(config_for):
    policy = CountingPolicy()
    _two_episodes(R2D2Actor(config_for(), policy, None, epsilon=0.0))
    assert [float(s[0, 0, 0]) for s in policy.seen_states] == [0.0, 1.0, 2.0, 0.0]


def test_policy_gets_a_state_of_batch_hidden_and_cell_rows(config_for):
    policy = CountingPolicy()
    _two_episodes(R2D2Actor(config_for(), policy, None, epsilon=0.0))
    assert all(s.shape == (1, 2, UNITS) for s in policy.seen_states)


def test_frames_are_stacked_after_zeros_in_order(config_for):
    policy = CountingPolicy()
    actor = R2D2Actor(config_for(input_sequence=3), policy, None, epsilon=0.0)
    frames = [np.full(3, float(i)) for i in (1, 2, 3, 4)]
    actor.observe_first(frames[0])
    for frame in frames[1:]:
        actor.observe(actor.select_action(), 0.0, frame, False, False)
    actor.select_action()
    newest_first_values = [obs[0, :, 0].tolist() for obs in policy.seen_obs]
    assert newest_first_values == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]


def test_frame_stack_is_cleared_at_the_next_episode(config_for):
    actor = R2D2Actor(config_for(input_sequence=2), CountingPolicy(), None, epsilon=0.0)
    actor.observe_first(np.full(3, 1.0))
    actor.observe(actor.select_action(), 0.0, np.full(3, 2.0), True, False)
    actor.observe_first(np.full(3, 5.0))
    np.testing.assert_array_equal(actor.stacked_observation(), [np.zeros(3), np.full(3, 5.0)])


def test_select_action_before_observe_first_raises(config_for):
    actor = R2D2Actor(config_for(), CountingPolicy(), None, epsilon=0.0)
    with pytest.raises(RuntimeError, match="observe_first"):
        actor.select_action()


def test_select_action_after_episode_end_raises(config_for):
    actor = R2D2Actor(config_for(), CountingPolicy(), None, epsilon=0.0)
    actor.observe_first(np.zeros(3))
    actor.observe(actor.select_action(), 1.0, np.zeros(3), True, False)
    with pytest.raises(RuntimeError):
        actor.select_action()


def test_q_values_do_not_advance_the_state(config_for):
    policy = CountingPolicy()
    actor = R2D2Actor(config_for(), policy, None, epsilon=0.0)
    actor.observe_first(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(actor.q_values(), actor.q_values())
    actor.select_action()
    assert [float(s[0, 0, 0]) for s in policy.seen_states] == [0.0, 0.0, 0.0]


def _sequences_of_a_12_step_episode(config):
    """What the adder emits for an episode of 12 steps whose observation at step t is t
    everywhere: (sequence, priority) pairs, and the window starts they should have."""
    recorder = SequenceRecorder(config.input_sequence)
    adder = R2D2Builder(config).make_adder(recorder)
    actor = R2D2Actor(config, CountingPolicy(), adder, epsilon=0.0)
    episode_steps = 12
    actor.observe_first(np.full(3, 0.0))
    for t in range(1, episode_steps + 1):
        actor.observe(actor.select_action(), 1.0, np.full(3, float(t)), False, False)
    last_start = episode_steps - config.input_length - config.multisteps
    emitted = list(zip(recorder.sequences, recorder.priorities, strict=True))
    return emitted, list(range(0, last_start + 1, config.period))


def test_sequences_reach_the_sink_with_the_state_of_their_first_step(config_for):
    """Window q stores the state before step max(q - burnin, 0), which is that step number."""
    config = config_for()
    emitted, starts = _sequences_of_a_12_step_episode(config)
    b = config.burnin
    assert len(emitted) == len(starts)
    for (seq, _), q in zip(emitted, starts, strict=True):
        first_real = max(q - b, 0)
        np.testing.assert_array_equal(seq["state"], np.full((2, UNITS), float(first_real)))
        assert seq["obs"][b][0, 0] == q  # the trained window starts at step q
        assert seq["obs"][b - (q - first_real)][0, 0] == first_real


def test_sequences_reach_the_sink_with_finite_priorities(config_for):
    emitted, _ = _sequences_of_a_12_step_episode(config_for())
    assert emitted and all(np.isfinite(priority) for _, priority in emitted)


def _sequences_of_a_terminated_3_step_episode(config):
    recorder = SequenceRecorder(config.input_sequence)
    adder = R2D2Builder(config).make_adder(recorder)
    actor = R2D2Actor(config, CountingPolicy(), adder, epsilon=0.0)
    actor.observe_first(np.zeros(3))
    for t in range(1, 4):  # 3 steps: shorter than one window
        actor.observe(actor.select_action(), 1.0, np.full(3, float(t)), t == 3, False)
    return recorder.sequences


def test_remaining_sequences_are_emitted_padded_on_termination(config_for):
    config = config_for()
    emitted = _sequences_of_a_terminated_3_step_episode(config)
    assert len(emitted) == 2  # windows starting at steps 0 and 2 (period 2)
    np.testing.assert_array_equal(emitted[0]["mask"], [1, 1, 1, 0])
    np.testing.assert_array_equal(emitted[1]["mask"], [1, 0, 0, 0])
    assert emitted[1]["obs"][config.burnin][0, 0] == 2.0


def test_last_step_of_a_terminated_episode_does_not_bootstrap(config_for):
    emitted = _sequences_of_a_terminated_3_step_episode(config_for())
    assert emitted[1]["bootstrap_discount"][0] == 0.0
