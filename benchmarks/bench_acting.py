"""Env steps/s of one actor process with N envs, beside its env alone and the bare forward pass.

One actor process steps `envs_per_actor` (N) envs and selects all N actions with one
batched forward pass (`R2D2VectorActor` in `VectorEpisodeLoop`, with a
`VectorSequenceAdder` whose sequences go to a list, as an actor's go to its sender). This
measures, in one run and one thread (TensorFlow and BLAS limited to 1 thread), per CPU
second of this process (so that other processes on a shared machine change the figures
little):

* `env_alone`: env steps/s of one env with random actions: the physical limit of one core
  (the median of its measurements before and after each actor measurement);
* `forward[N]`: env steps/s the bare batched forward pass allows (N / seconds per call);
* `actor[N]`: env steps/s of the actor with N envs, and `ratio[N]` = actor / env alone
  (the mean of the env's measurements right before and right after it).

Sizes: "atari" is the paper's network (84x84x4 uint8 frames, DQN torso, LSTM 512, dueling;
Keras policy) on a fake env with the ALE's output (84x84 uint8 frames) whose step costs
`--fake-env-ms` of CPU time (default: what ALE Breakout with the standard preprocessing
costs here, else 1 ms), and on ALE Breakout itself when ale-py is installed
("atari_breakout"), and on ALE Breakout stepped by envpool in one C++ thread
("atari_envpool", `--sizes atari_envpool`, needs the `envpool` extra; the env alone is
then envpool's batch of N, measured before and after each actor); "cartpole" is the
CartPole preset's network (numpy policy) on CartPole-v1. The goal (issue 27): ratio >=
0.6 at Atari size, >= 0.5 at CartPole size.

    python benchmarks/bench_acting.py                      # ~3 minutes
    python benchmarks/bench_acting.py --seconds 1 --ns 1 4 # quick look
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core, before numpy loads its BLAS
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from header import report_header  # noqa: E402

from r2d2_agent.config import InputType, R2D2Config  # noqa: E402
from r2d2_agent.presets import cartpole_config  # noqa: E402
from r2d2_agent.roles.builder import R2D2Builder  # noqa: E402
from r2d2_agent.roles.vector_loop import EnvList, VectorEpisodeLoop, VectorObserver  # noqa: E402


class FakeAtari(gym.Env):
    """ALE-shaped env: 84x84 uint8 frames, 4 actions, episodes of ~`length` steps, each
    step `cost_ms` of busy CPU (an emulator's work), frames from a fixed pool."""

    observation_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, cost_ms: float, length: int = 1000) -> None:
        self.cost = cost_ms / 1e3
        self.length = length
        rng = np.random.default_rng(0)
        self.pool = rng.integers(0, 255, (64, 84, 84), dtype=np.uint8)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None):
        self.t = 0
        return self.pool[0], {}

    def step(self, action: int):
        end = time.process_time() + self.cost
        while time.process_time() < end:
            pass
        self.t += 1
        done = self.t >= self.length
        return self.pool[self.t % 64], 0.0, done, False, {}


def atari_config() -> R2D2Config:
    """The paper's Atari network (the Atari example's `--paper` config)."""
    return R2D2Config(
        input_shape=(84, 84), nb_actions=4, input_type=InputType.GRAY_2ch, input_sequence=4
    )


def timed(seconds: float, step: Any, warmup: int = 3) -> float:
    """Calls of `step` per CPU second of this process over about `seconds` of CPU time
    (after `warmup` calls)."""
    for _ in range(warmup):
        step()
    calls, start = 0, time.process_time()
    while (elapsed := time.process_time() - start) < seconds:
        step()
        calls += 1
    return calls / elapsed


def env_rate(make_env: Any, seconds: float) -> float:
    env = make_env()
    env.reset(seed=0)
    env.action_space.seed(0)

    def step() -> None:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()

    rate = timed(seconds, step, warmup=10)
    env.close()
    return rate


def forward_rate(builder: R2D2Builder, policy: Any, n: int, seconds: float) -> float:
    config = builder.config
    dtype = builder.observation_dtype
    obs = np.zeros((n, *config.network_input_shape), dtype)
    state = np.zeros((n, 2, config.state_size), np.float32)
    return n * timed(seconds, lambda: policy.step(obs, state))


class _Clock(VectorObserver):
    """Counts env steps and CPU seconds from the first step on (not the first resets).

    It counts at the end of each step of all `n` envs, as an actor process's runner does
    (an observer of single env steps would cost the loop its per-env hooks)."""

    def __init__(self, seconds: float, n: int) -> None:
        self.seconds, self.n, self.start, self.steps = seconds, n, None, 0

    def on_step_begin(self) -> None:
        if self.start is None:
            self.start = time.process_time()

    def on_step_end(self) -> None:
        self.steps += self.n

    def elapsed(self) -> float:
        return 0.0 if self.start is None else time.process_time() - self.start

    def should_stop(self) -> bool:
        return self.elapsed() >= self.seconds


def actor_rate(builder: R2D2Builder, policy: Any, make_env: Any, n: int, seconds: float) -> float:
    """Env steps per CPU second of an actor of `n` envs (sequences go to a list)."""
    records: list[Any] = []
    adder = builder.make_vector_adder([records.append] * n)
    epsilons = [builder.actor_epsilon(j, n) for j in range(n)]
    actor = builder.make_vector_actor(policy, adder, epsilons, list(range(n)))
    envs = EnvList([make_env() for _ in range(n)])
    VectorEpisodeLoop(envs, actor, seeds=range(n)).run(nb_steps=3 * n)  # warm-up (tracing)
    records.clear()
    clock = _Clock(seconds, n)
    VectorEpisodeLoop(envs, actor, observers=[clock], seeds=range(n)).run(should_stop=lambda: False)
    envs.close()
    return clock.steps / clock.elapsed()


def measure(name: str, config: R2D2Config, make_env: Any, ns: list[int], seconds: float) -> dict:
    """The env alone, the forward pass and the actor at each N. This box's speed drifts
    by a third within minutes, so the env alone is measured right before and right after
    each actor measurement, and each ratio divides by the mean of those two; `env_alone`
    is the median of all the env's measurements (`env_alone_samples`)."""
    builder = R2D2Builder(config)
    policy = builder.make_policy()
    policy.set_weights(_weights(builder))
    samples = [env_rate(make_env, seconds)]
    out: dict[str, Any] = {
        "policy": type(policy).__name__,
        "env_alone": None,
        "env_alone_samples": samples,
        "forward": {},
        "actor": {},
        "ratio": {},
    }
    for n in ns:
        out["forward"][n] = round(forward_rate(builder, policy, n, seconds), 1)
        before = samples[-1]
        rate = actor_rate(builder, policy, make_env, n, seconds)
        samples.append(env_rate(make_env, seconds))
        alone = (before + samples[-1]) / 2
        out["actor"][n] = round(rate, 1)
        out["ratio"][n] = round(rate / alone, 3)
        print(f"{name} N={n}: actor {rate:.0f} env steps/s ({rate / alone:.2f}x)", file=sys.stderr)
    out["env_alone"] = round(float(np.median(samples)), 1)
    out["env_alone_samples"] = [round(x, 1) for x in samples]
    return out


def envpool_rate(make_env: Any, seconds: float) -> float:
    """Env steps per CPU second (envpool's C++ thread included) of a vector env alone,
    random actions, ended envs reset as an actor resets them."""
    env = make_env()
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    n = env.num_envs

    def step() -> None:
        _, _, terminated, truncated, _ = env.step(rng.integers(0, 4, n))
        ended = np.asarray(terminated) | np.asarray(truncated)
        if ended.any():
            env.reset(options={"reset_mask": ended})

    rate = n * timed(seconds, step, warmup=10)
    env.close()
    return rate


def measure_envpool(config: R2D2Config, env_id: str, ns: list[int], seconds: float) -> dict:
    """`measure` with an actor's N envs in one envpool batch (`EnvPoolAtari`, one C++
    thread): the env alone is that batch of N, measured before and after the actor."""
    from r2d2_agent.envs import EnvPoolAtari
    from r2d2_agent.roles.vector_loop import GymVectorEnvBatch

    builder = R2D2Builder(config)
    policy = builder.make_policy()
    policy.set_weights(_weights(builder))
    out: dict[str, Any] = {
        "policy": type(policy).__name__,
        "env_alone": {},
        "actor": {},
        "ratio": {},
    }
    for n in ns:
        factory = EnvPoolAtari(env_id, num_envs=n)
        before = envpool_rate(factory, seconds)
        records: list[Any] = []
        adder = builder.make_vector_adder([records.append] * n)
        epsilons = [builder.actor_epsilon(j, n) for j in range(n)]
        actor = builder.make_vector_actor(policy, adder, epsilons, list(range(n)))
        envs = GymVectorEnvBatch(factory())
        VectorEpisodeLoop(envs, actor, seeds=range(n)).run(nb_steps=3 * n)  # warm-up
        records.clear()
        clock = _Clock(seconds, n)
        loop = VectorEpisodeLoop(envs, actor, observers=[clock], seeds=range(n))
        loop.run(should_stop=lambda: False)
        envs.close()
        rate = clock.steps / clock.elapsed()
        after = envpool_rate(factory, seconds)
        out["env_alone"][n] = [round(before, 1), round(after, 1)]
        out["actor"][n] = round(rate, 1)
        out["ratio"][n] = round(rate / ((before + after) / 2), 3)
        print(
            f"atari (envpool) N={n}: actor {rate:.0f} env steps/s ({out['ratio'][n]:.2f}x)",
            file=sys.stderr,
        )
    return out


def _weights(builder: R2D2Builder) -> list[np.ndarray]:
    """Small random weights of the acting network's shapes (reward statistics of a
    scale of 1: a random count would be refused)."""
    from r2d2_agent.networks.numpy_net import weight_layout

    stats = {"reward_statistics/count": 1.0, "reward_statistics/mean_square": 1.0}
    rng = np.random.default_rng(0)
    return [
        np.array(stats[name]) if name in stats else rng.normal(0, 0.05, shape).astype(np.float32)
        for name, shape in weight_layout(builder.config)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--ns", type=int, nargs="+", default=[1, 4, 16, 64], help="envs per actor")
    parser.add_argument("--sizes", nargs="+", default=["atari", "cartpole"])
    parser.add_argument("--fake-env-ms", type=float, default=None, help="fake ALE step cost")
    parser.add_argument("--no-ale", action="store_true", help="skip ALE Breakout")
    parser.add_argument("--out", default="benchmarks/out/bench_acting.json")
    args = parser.parse_args()

    from r2d2_agent.compat import tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    out = report_header("bench_acting")
    out["seconds_per_measurement"] = args.seconds
    breakout = None
    if not args.no_ale and "atari" in args.sizes:
        try:
            import functools

            from r2d2_agent.envs import make_atari

            make_atari("ALE/Breakout-v5").close()
            breakout = functools.partial(make_atari, "ALE/Breakout-v5")
        except ImportError:
            print("ale-py not installed: no ALE Breakout figures", file=sys.stderr)
    if "atari" in args.sizes:
        cost = args.fake_env_ms
        if cost is None:
            cost = 1e3 / env_rate(breakout, args.seconds) if breakout else 1.0
        out["fake_env_ms"] = round(cost, 3)
        fake = lambda: FakeAtari(cost)  # noqa: E731
        out["atari"] = measure("atari (fake ALE)", atari_config(), fake, args.ns, args.seconds)
        if breakout is not None:
            out["atari_breakout"] = measure(
                "atari (ALE Breakout)", atari_config(), breakout, args.ns, args.seconds
            )
    if "atari_envpool" in args.sizes:
        out["atari_envpool"] = measure_envpool(
            atari_config(), "ALE/Breakout-v5", args.ns, args.seconds
        )
    if "cartpole" in args.sizes:
        make = lambda: gym.make("CartPole-v1")  # noqa: E731
        config = cartpole_config(seed=0)
        out["cartpole"] = measure("cartpole", config, make, args.ns, args.seconds)
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
