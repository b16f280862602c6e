"""R2D2 on an Atari game with an R2D2Manager (needs `pip install -e ".[atari]"`).

    python examples/atari.py --env ALE/RoadRunner-v5 --life-loss --max-seconds 4800
    python examples/atari.py --env ALE/Pong-v5 --paper --actors 8        # the paper's settings
    python examples/atari.py --env ALE/Pong-v5 --actors 8 --envs-per-actor 32  # fast actors
    python examples/atari.py --resume runs/<run>/checkpoints --nb-steps 400000

Frames come from gymnasium's `AtariPreprocessing` (84x84 grayscale, frame skip 4, up to
30 no-op starts, optionally a terminal on each life lost; no reward clipping: R2D2
rescales values instead) and are stored once each, as uint8. R2D2 stacks 4 of them
(`InputType.GRAY_2ch`, `input_sequence=4`; `--no-stack` leaves memory to the LSTM alone).
The image torso is `DQNImageModel` (`--r2d3`: the residual `R2D3ImageModel`).
`--envpool` steps each actor's envs with envpool in C++ (`EnvPoolAtari`, the same
preprocessing; needs `pip install -e ".[envpool]"`).

The default configuration is sized for a small CPU machine (shorter sequences, a smaller
batch and LSTM than the paper, so that a learner update takes a fraction of a second);
`--paper` uses the paper's settings. The replay is the largest that fits in half of this
machine's memory. A run directory holds the logs, TensorBoard summaries, checkpoints and
the learning curve; the script prints where they are.
"""

import argparse
import functools
import logging
import os
import time

import numpy as np

from r2d2_agent import InputType, R2D2Config, R2D2Manager
from r2d2_agent.callbacks import CheckpointCallback, RunLogCallback

# make_atari: AtariPreprocessing (84x84 gray, frame skip 4); EnvPoolAtari: the same for
# all of an actor's envs at once, stepped in C++ by envpool
from r2d2_agent.envs import EnvPoolAtari, make_atari
from r2d2_agent.image_models import DQNImageModel, R2D3ImageModel
from r2d2_agent.replay import largest_memory_capacity

# A CPU-sized R2D2: 10 burn-in + 20 trained + 5 look-ahead steps per sequence, windows
# every 10 steps, 16 sequences per update, LSTM and dense layers of 256. One update per 32
# env steps trains 16 x 20 = 320 steps: each env step is replayed about 10 times (DQN: a
# batch of 32 every 4 steps, 8 times), so that the learner keeps up on a small machine.
CPU_SIZED = dict(
    train_interval=32,
    burnin=10,
    input_length=20,
    multisteps=5,
    sequence_period=10,
    batch_size=16,
    lstm_units=256,
    dense_units=256,
    learning_rate=2.5e-4,
    target_update_interval=250,  # 8,000 env steps, near DQN's 10,000
    memory_warmup=200,
    epsilon_start=1.0,
    epsilon_anneal_steps=50_000,
    epsilon=0.05,
    actor_sync_interval=200,
)
CHECKPOINT_INTERVAL = 1_000  # learner updates between checkpoints


def replay_capacity(config: R2D2Config, requested: int | None = None) -> int:
    """Replay sequences: `requested`, or the largest replay that fits in half the memory.

    A capacity you ask for is kept as it is (the manager refuses one that cannot fit,
    naming `memory_capacity`, before any child starts).
    """
    if requested:
        return requested
    half_memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    capacity = largest_memory_capacity(config, half_memory)
    if capacity < config.batch_size:
        raise SystemExit(f"no replay of {config.batch_size} sequences fits in {half_memory} bytes")
    return capacity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/RoadRunner-v5", help="any ALE game id")
    parser.add_argument("--actors", type=int, default=1, help="actor processes")
    parser.add_argument(
        "--envs-per-actor",
        type=int,
        default=1,
        help="envs each actor steps with one batched forward pass (default 1, the paper's "
        "one env per actor): 32 act about 5x faster per core, for machines whose actors set "
        "the pace (e.g. beside a GPU learner); on a small CPU machine, where the learner sets "
        "it, both learned RoadRunner alike per env step in the same wall (README 'Choosing N')",
    )
    parser.add_argument("--nb-steps", type=int, default=2_000_000, help="env steps in all")
    parser.add_argument("--max-seconds", type=float, default=None, help="wall-time limit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paper", action="store_true", help="the paper's settings")
    parser.add_argument("--r2d3", action="store_true", help="the R2D3 residual torso")
    parser.add_argument("--no-stack", action="store_true", help="1 frame per input (LSTM only)")
    parser.add_argument("--life-loss", action="store_true", help="a life lost ends an episode")
    parser.add_argument(
        "--envpool",
        action="store_true",
        help='step each actor\'s envs in C++ with envpool (pip install "r2d2-agent[envpool]")',
    )
    parser.add_argument("--memory-capacity", type=int, help="replay sequences (default: fit)")
    parser.add_argument("--run-dir", help="run directory (default: runs/<run name>)")
    parser.add_argument("--resume", help="checkpoint file or directory to continue from")
    parser.add_argument("--eval-episodes", type=int, default=3)
    parser.add_argument(
        "--keep-checkpoints",
        type=int,
        default=3,
        help=f"checkpoints kept (one per {CHECKPOINT_INTERVAL:,} updates)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # 1. A picklable env factory: every actor process builds its own env from it (with
    #    --envpool, one vector env of all its envs; the greedy test plays make_atari's).
    env_factory = functools.partial(make_atari, args.env, args.life_loss)
    probe = env_factory()
    nb_actions = int(probe.action_space.n)
    probe.close()
    actor_envs = env_factory
    if args.envpool:
        actor_envs = EnvPoolAtari(args.env, args.envs_per_actor, args.life_loss)

    # 2. Configuration: the paper's or the CPU-sized one, with a replay that fits.
    config = R2D2Config(
        input_shape=(84, 84),
        nb_actions=nb_actions,
        input_type=InputType.GRAY_2ch,
        input_sequence=1 if args.no_stack else 4,
        envs_per_actor=args.envs_per_actor,
        seed=args.seed,
        test_epsilon=0.01,  # as usual on Atari: a game waiting for FIRE cannot stall a test
        **({} if args.paper else CPU_SIZED),
    )
    capacity = replay_capacity(config, args.memory_capacity)
    config = config.replace(memory_capacity=capacity, memory_warmup=min(config.warmup, capacity))
    image_model = R2D3ImageModel() if args.r2d3 else DQNImageModel()

    # 3. Callbacks: the run directory (logs, TensorBoard, learning curve) and checkpoints.
    name = f"{args.env.replace('/', '_')}__r2d2__{args.seed}__{int(time.time())}"
    run_dir = args.run_dir or f"runs/{name}"
    checkpoints = f"{run_dir}/checkpoints"
    callbacks = [
        RunLogCallback(run_dir, plot=True),
        CheckpointCallback(checkpoints, interval=CHECKPOINT_INTERVAL, keep=args.keep_checkpoints),
    ]
    print(f"run directory: {run_dir}", flush=True)

    # 4. Train with the manager; it stops at the first limit reached.
    with R2D2Manager(
        actor_envs, config, actor_num=args.actors, image_model=image_model, callbacks=callbacks
    ) as manager:
        result = manager.train(
            nb_steps=args.nb_steps, max_seconds=args.max_seconds, resume_from=args.resume
        )
        agent = manager.create_test_agent()
    print(
        f"stopped by {result.stop_reason}: {result.env_steps} env steps "
        f"(per actor {result.actor_env_steps}), {result.learner_updates} learner updates "
        f"in {result.elapsed_seconds:.1f} s; recent mean return {result.recent_mean_return()}"
    )

    # 5. Greedy evaluation of the learner's final weights, and where everything is.
    history = agent.test(env_factory(), nb_episodes=args.eval_episodes, visualize=False, verbose=0)
    print(f"greedy evaluation: {np.mean(history.history['episode_reward']):.1f}")
    print(f"checkpoints: {checkpoints}")
    curve = os.path.join(run_dir, "learning_curve.png")
    print(f"learning curve: {curve}" if os.path.exists(curve) else "no learning curve yet")
    again = " --envpool" if args.envpool else ""
    print(f"continue with: python examples/atari.py --resume {checkpoints} --env {args.env}{again}")


if __name__ == "__main__":
    main()
