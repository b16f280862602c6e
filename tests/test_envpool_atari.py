"""`EnvPoolAtari` / `EnvPoolVectorEnv`: envpool's Atari batch as a Gymnasium `VectorEnv`.

Most tests run against a fake `envpool` module that behaves as envpool 1.2 does where it
matters (frames of shape `(1, 84, 84)`, seeds fixed when the pool is made with env `j`
at `seed + j`, a reset of some envs returning only their rows with `info["env_id"]`), so
they run without the extra; the last ones use envpool itself when it is installed.
"""

from __future__ import annotations

import pickle
import sys
import types

import gymnasium as gym
import numpy as np
import pytest

from r2d2_agent.envs import EnvPoolAtari
from r2d2_agent.envs.envpool_atari import EnvPoolVectorEnv, envpool_task_id
from r2d2_agent.roles.vector_loop import GymVectorEnvBatch, VectorEpisodeLoop


class FakePool:
    """Frames carry `(seed of the env, its episode step)` in their first two pixels; env
    `j` terminates every `3 + j` steps; reward 1 a step."""

    def __init__(self, task: str, **options) -> None:
        self.task, self.options = task, options
        self.n, self.seed = options["num_envs"], options["seed"]
        self.t = np.zeros(self.n, np.int64)
        self.closed = False

    def _frames(self, ids: np.ndarray) -> np.ndarray:
        frames = np.zeros((len(ids), 1, 84, 84), np.uint8)
        frames[:, 0, 0, 0] = self.seed + ids
        frames[:, 0, 0, 1] = self.t[ids]
        return frames

    def reset(self, env_id=None):
        ids = np.arange(self.n) if env_id is None else np.asarray(env_id)
        self.t[ids] = 0
        return self._frames(ids), {"env_id": ids.astype(np.int32)}

    def step(self, actions):
        assert np.asarray(actions).dtype == np.int32
        ids = np.arange(self.n)
        self.t += 1
        terminated = self.t >= 3 + ids
        info = {"env_id": ids.astype(np.int32)}
        return self._frames(ids), np.ones(self.n, np.float32), terminated, 0 * terminated, info

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_envpool(monkeypatch):
    """A fake `envpool` module; `.pools` lists the pools made, `.specs` the spec options."""
    module = types.ModuleType("envpool")
    module.pools, module.specs = [], []

    def make(task, env_type, **options):
        assert env_type == "gymnasium"
        pool = FakePool(task, **options)
        module.pools.append(pool)
        return pool

    def make_spec(task, **options):
        module.specs.append((task, options))
        return types.SimpleNamespace(gymnasium_action_space=gym.spaces.Discrete(4))

    module.make, module.make_spec = make, make_spec
    monkeypatch.setitem(sys.modules, "envpool", module)
    return module


def test_frames_are_make_ataris_and_the_spaces_are_batched(fake_envpool):
    env = EnvPoolAtari("ALE/Breakout-v5", num_envs=3)()
    assert env.single_observation_space == gym.spaces.Box(0, 255, (84, 84), np.uint8)
    assert env.observation_space.shape == (3, 84, 84)
    assert env.single_action_space == gym.spaces.Discrete(4)
    assert env.action_space == gym.spaces.MultiDiscrete([4, 4, 4])
    frames, _ = env.reset(seed=7)
    assert frames.shape == (3, 84, 84) and frames.dtype == np.uint8
    frames, rewards, terminated, truncated, _ = env.step(np.zeros(3, np.int64))
    assert frames.shape == (3, 84, 84)
    assert frames[:, 0, 1].tolist() == [1, 1, 1]


def test_the_pool_is_made_with_make_ataris_preprocessing(fake_envpool):
    env = EnvPoolAtari("ALE/Pong-v5", num_envs=2, terminal_on_life_loss=True, num_threads=3)()
    env.reset(seed=0)
    (pool,) = fake_envpool.pools
    assert pool.task == "Pong-v5"
    expected = {
        "num_envs": 2,
        "batch_size": 2,
        "num_threads": 3,
        "stack_num": 1,
        "frame_skip": 4,
        "noop_max": 30,
        "img_height": 84,
        "img_width": 84,
        "gray_scale": True,
        "episodic_life": True,
        "reward_clip": False,
        "repeat_action_probability": 0.25,
        "use_fire_reset": False,
        "max_episode_steps": 27_000,
    }
    assert {key: pool.options[key] for key in expected} == expected
    assert fake_envpool.specs[0][0] == "Pong-v5"
    assert "env_type" not in fake_envpool.specs[0][1]


def test_no_pool_is_made_before_the_first_reset(fake_envpool):
    env = EnvPoolAtari("ALE/Breakout-v5", num_envs=2, seed=11)()
    assert fake_envpool.pools == []
    with pytest.raises(RuntimeError, match="reset"):
        env.step([0, 0])
    frames, _ = env.reset()  # unseeded: the factory's seed
    assert frames[:, 0, 0].tolist() == [11, 12]


@pytest.mark.parametrize("seed", [20, [20, 21, 22], np.int64(20)])
def test_a_seeded_reset_makes_the_pool_anew_with_env_j_at_seed_plus_j(fake_envpool, seed):
    env = EnvPoolAtari("ALE/Breakout-v5", num_envs=3)()
    env.reset(seed=5)
    env.step([1, 1, 1])
    frames, _ = env.reset(seed=seed)
    first, second = fake_envpool.pools
    assert first.closed and not second.closed
    assert second.seed == 20
    assert frames[:, 0, 0].tolist() == [20, 21, 22]
    assert frames[:, 0, 1].tolist() == [0, 0, 0]


def test_close_closes_the_pool_once_and_a_closed_env_is_not_reset_again(fake_envpool):
    env = EnvPoolAtari("ALE/Breakout-v5", num_envs=2)()
    env.reset(seed=0)
    env.close()
    env.close()
    (pool,) = fake_envpool.pools
    assert pool.closed and env.closed
    with pytest.raises(RuntimeError, match="closed"):
        env.reset(seed=1)
    assert len(fake_envpool.pools) == 1


@pytest.mark.parametrize("seeds", [[20, 22, 23], [20, 21], []])
def test_seeds_that_do_not_follow_on_are_refused_by_name(fake_envpool, seeds):
    env = EnvPoolAtari("ALE/Breakout-v5", num_envs=3)()
    with pytest.raises(
        ValueError, match=r"follow on from each other, got \[" + ", ".join(map(str, seeds))
    ):
        env.reset(seed=seeds)


def test_a_reset_of_some_envs_returns_all_n_frames(fake_envpool):
    env = EnvPoolAtari("ALE/Breakout-v5", num_envs=3)()
    env.reset(seed=0)
    env.step([0, 0, 0])
    env.step([0, 0, 0])
    frames, info = env.reset(options={"reset_mask": np.array([False, True, False])})
    assert frames.shape == (3, 84, 84)
    assert frames[:, 0, 1].tolist() == [2, 0, 2]  # env 1 reset, the others' latest
    assert info["env_id"].tolist() == [1]
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(seed=1, options={"reset_mask": np.array([True, False, False])})
    with pytest.raises(ValueError, match=r"reset_mask must have shape \(3,\)"):
        env.reset(options={"reset_mask": np.array([True, False])})


def test_the_returned_frames_are_copies(fake_envpool):
    env = EnvPoolAtari("ALE/Breakout-v5", num_envs=2)()
    frames, _ = env.reset(seed=0)
    env.step([0, 0])
    assert frames[:, 0, 1].tolist() == [0, 0]


def test_an_actor_loop_runs_on_it_and_resets_ended_envs_alone(fake_envpool):
    """Through `GymVectorEnvBatch` (an actor's envs) and `VectorEpisodeLoop`: env j's
    episodes last 3 + j steps; each reset env starts again at step 0."""
    env = EnvPoolAtari("ALE/Breakout-v5", num_envs=2)()
    actor = _RecordingActor(2)
    totals = VectorEpisodeLoop(GymVectorEnvBatch(env), actor, seeds=[4, 5]).run(nb_steps=24)
    assert totals.steps == 24
    assert fake_envpool.pools[-1].seed == 4
    assert actor.firsts[:2] == [(0, 4, 0), (1, 5, 0)]
    assert [first for first in actor.firsts if first[0] == 0][1:] == [(0, 4, 0)] * 4
    assert actor.episode_steps[0] == [1, 2, 3] * 4
    assert actor.episode_steps[1][:8] == [1, 2, 3, 4, 1, 2, 3, 4]


class _RecordingActor:
    """A `VectorLoopActor` acting 0 that records each env's first frames and steps."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.firsts: list[tuple[int, int, int]] = []
        self.episode_steps: dict[int, list[int]] = {j: [] for j in range(n)}

    def observe_first(self, env: int, observation) -> None:
        self.firsts.append((env, int(observation[0, 0]), int(observation[0, 1])))

    def select_actions(self) -> np.ndarray:
        return np.zeros(self.n, np.int64)

    def observe_all(self, actions, rewards, next_observations, terminated, truncated) -> None:
        for j in range(self.n):
            self.episode_steps[j].append(int(next_observations[j][0, 1]))


def test_the_factory_pickles_and_checks_its_arguments():
    factory = EnvPoolAtari("ALE/Breakout-v5", num_envs=4, seed=3)
    assert pickle.loads(pickle.dumps(factory)) == factory
    assert envpool_task_id("ALE/Breakout-v5") == envpool_task_id("Breakout-v5") == "Breakout-v5"
    with pytest.raises(ValueError, match="'CartPole-v1'"):
        EnvPoolAtari("CartPole-v1", num_envs=4)
    with pytest.raises(ValueError, match="'ALE/Pong-v4'"):
        EnvPoolAtari("ALE/Pong-v4", num_envs=4)
    with pytest.raises(ValueError, match="num_envs must be >= 1, got 0"):
        EnvPoolAtari("ALE/Pong-v5", num_envs=0)
    with pytest.raises(ValueError, match="num_threads must be >= 0"):
        EnvPoolAtari("ALE/Pong-v5", num_envs=1, num_threads=-1)


def test_without_envpool_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool raises ImportError
    with pytest.raises(ImportError, match=r"r2d2-agent\[envpool\]"):
        EnvPoolAtari("ALE/Breakout-v5", num_envs=2)()


# A raw envpool env (not through EnvPoolVectorEnv) returns only the reset envs' rows.


class _RowsOfTheResetEnvs(gym.vector.VectorEnv):
    """A vector env whose masked reset returns the reset envs' rows, in reverse env order,
    with `info["env_id"]` (`ids=False`: without it)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, n: int, ids: bool = True) -> None:
        self.num_envs, self.ids = n, ids
        self.single_observation_space = gym.spaces.Box(-1e3, 1e3, (1,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.single_action_space = gym.spaces.Discrete(2)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)

    def reset(self, *, seed=None, options=None):
        mask = np.ones(self.num_envs, bool) if options is None else options["reset_mask"]
        ids = np.flatnonzero(mask)[::-1]
        info = {"env_id": ids} if self.ids else {}
        return (100 + ids[:, None]).astype(np.float32), info


def test_the_vector_batch_takes_the_reset_envs_rows_by_env_id():
    batch = GymVectorEnvBatch(_RowsOfTheResetEnvs(4))
    batch.reset(range(4), [None] * 4)
    firsts = batch.reset([1, 3], [None, None])
    assert [float(first[0]) for first in firsts] == [101.0, 103.0]


def test_the_vector_batch_refuses_reset_rows_it_cannot_place():
    batch = GymVectorEnvBatch(_RowsOfTheResetEnvs(4, ids=False))
    with pytest.raises(ValueError, match=r"envs \[1, 3\] returned 2 observations"):
        batch.reset([1, 3], [None, None])


# With envpool itself (the `envpool` extra).


def test_envpool_itself_reproduces_a_seeded_run_and_resets_some_envs():
    pytest.importorskip("envpool")
    runs = []
    for _ in range(2):
        env = EnvPoolAtari("ALE/Breakout-v5", num_envs=2, terminal_on_life_loss=True)()
        frames = [env.reset(seed=[3, 4])[0]]
        actions = np.random.default_rng(0).integers(0, 4, (300, 2))
        ended = None
        for t, action in enumerate(actions):
            step = env.step(action)
            frames.append(step[0])
            done = np.asarray(step[2]) | np.asarray(step[3])
            if done.any() and ended is None:
                ended = (t, done.copy())
                reset, info = env.reset(options={"reset_mask": done})
                assert reset.shape == (2, 84, 84)
                np.testing.assert_array_equal(reset[~done], step[0][~done])
                frames.append(reset)
        env.close()
        assert ended is not None, "a life is lost within 300 random steps of Breakout"
        runs.append(np.stack(frames))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert runs[0].dtype == np.uint8 and runs[0].shape[1:] == (2, 84, 84)
    assert isinstance(EnvPoolAtari("ALE/Breakout-v5", num_envs=1)(), EnvPoolVectorEnv)
