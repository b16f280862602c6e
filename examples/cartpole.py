"""R2D2 on CartPole-v1 with an R2D2Manager: 2 actor processes + 1 learner process.

    python examples/cartpole.py --actors 2 --nb-steps 60000 --seed 0
    python examples/cartpole.py --masked            # only cart position and pole angle seen
    python examples/cartpole.py --env Acrobot-v1    # another env with a vector observation
    python examples/cartpole.py --nb-steps 90000 --resume runs/<run>/checkpoints  # continue
    python examples/cartpole.py --backend ray       # actors and learner as Ray actors
    python examples/cartpole.py --backend ray --ray-address auto   # on a running cluster

Arguments -> env factory -> config -> manager -> train (progress bar, a run directory of
logs and TensorBoard summaries, checkpoints; a greedy evaluation every 2,500 env steps that
stops the run once it reaches the env's reward threshold, 475 on CartPole-v1) -> a test
agent with the learner's weights -> greedy evaluation -> the learning curve
(`python -m r2d2_agent.plot RUN_DIR` redraws it).
"""

import argparse
import functools
import logging
import time

import gymnasium as gym
import numpy as np

from r2d2_agent import R2D2Manager
from r2d2_agent.callbacks import CheckpointCallback, RunLogCallback
from r2d2_agent.plot import plot_run
from r2d2_agent.presets import cartpole_config, masked_cartpole_config
from r2d2_agent.testing import make_masked_cartpole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1", help="a gymnasium id (vector obs)")
    parser.add_argument("--masked", action="store_true", help="the partially observable task")
    parser.add_argument("--actors", type=int, default=2, help="actor processes")
    # The preset solves CartPole in about 7,500 env steps; with its fixed learning rate a
    # much longer run can drift off its best policy (at 60,000 a demo ended at 117).
    parser.add_argument("--nb-steps", type=int, default=30_000, help="env steps over all actors")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="wall-time limit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument(
        "--eval-interval",
        type=int,
        default=2_500,
        help="env steps between greedy evaluations while training (0: none)",
    )
    parser.add_argument(
        "--stop-return",
        type=float,
        help="stop once an evaluation's mean return reaches it (default: the env's "
        "reward threshold, 475 on CartPole-v1; none if the env has none)",
    )
    parser.add_argument("--run-dir", help="run directory (default: runs/<run name>)")
    parser.add_argument("--resume", help="checkpoint file or directory to continue from")
    parser.add_argument(
        "--backend",
        choices=["multiprocessing", "ray"],
        default="multiprocessing",
        help="processes on this machine, or Ray actors (pip install 'r2d2-agent[ray]')",
    )
    parser.add_argument(
        "--ray-address", help="with --backend ray: the cluster (default: a local Ray)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    # 1. A picklable env factory: every actor process builds its own env from it.
    if args.masked:  # CartPole without the velocities: the LSTM has to remember them
        env_id, env_factory = "MaskedCartPole", make_masked_cartpole
    else:
        env_id, env_factory = args.env, functools.partial(gym.make, args.env)

    # 2. Configuration: the CartPole preset (see r2d2_agent/presets.py), seeded, sized to
    #    the env's spaces (the manager refuses what R2D2 cannot take, e.g. continuous actions).
    probe = env_factory()
    if not isinstance(probe.action_space, gym.spaces.Discrete):
        parser.error(f"{env_id} has actions {probe.action_space}; R2D2 needs Discrete ones")
    spaces = dict(input_shape=probe.observation_space.shape, nb_actions=int(probe.action_space.n))
    threshold = getattr(probe.spec, "reward_threshold", None)
    stop_return = args.stop_return if args.stop_return is not None else threshold
    probe.close()
    preset = masked_cartpole_config if args.masked else cartpole_config
    config = preset(seed=args.seed, **spaces)
    run_dir = args.run_dir or f"runs/{env_id}__r2d2__{args.seed}__{int(time.time())}"
    run_log = RunLogCallback(run_dir)  # JSON lines per process + TensorBoard summaries
    checkpoints = f"{run_dir}/checkpoints"
    callbacks = [run_log, CheckpointCallback(checkpoints, interval=1_000)]
    print(f"run directory: {run_dir}")

    # 3. Train with the manager; it stops at the first limit reached (with --resume,
    #    nb_steps counts from the checkpoint's env steps). Every --eval-interval env steps
    #    the parent plays greedy episodes with the latest weights (numpy, no TensorFlow)
    #    while the children go on, and stops the run once they reach --stop-return: a
    #    fixed learning rate far past that point can drift off the policy.
    ray = dict(ray_address=args.ray_address) if args.backend == "ray" else {}
    with R2D2Manager(
        env_factory,
        config,
        actor_num=args.actors,
        callbacks=callbacks,
        backend=args.backend,
        **ray,
    ) as manager:
        eval_env, next_eval, best = env_factory(), [args.eval_interval], {}

        def evaluate_now_and_then(progress):
            if not args.eval_interval or progress.env_steps < next_eval[0]:
                return
            next_eval[0] = progress.env_steps + args.eval_interval
            weights = manager.latest_weights()
            returns = manager.evaluate(args.eval_episodes, eval_env, weights=weights)
            run_log.log_evaluation(progress.env_steps, returns)
            mean = float(np.mean(returns))
            print(f"\n{progress.env_steps} env steps: greedy mean {mean:.1f}")
            if mean >= best.get("mean", -np.inf):  # the best evaluated weights so far
                best.update(mean=mean, weights=weights, env_steps=progress.env_steps)
            if stop_return is not None and mean >= stop_return:
                print(f"reached the stop return {stop_return}: stopping")
                manager.request_stop()

        result = manager.train(
            nb_steps=args.nb_steps,
            max_seconds=args.max_seconds,
            resume_from=args.resume,
            on_progress=evaluate_now_and_then,
        )
        eval_env.close()
        agent = manager.create_test_agent()
    print(
        f"stopped by {result.stop_reason}: {result.env_steps} env steps "
        f"(per actor {result.actor_env_steps}), {result.learner_updates} learner updates "
        f"in {result.elapsed_seconds:.1f} s; recent mean return "
        f"{result.recent_mean_return()}"
    )

    # 4. Greedy evaluation of the learner's final weights, logged as a point of the curve;
    #    then the best evaluated weights are kept in the run directory (a later stretch
    #    of training can be worse than an earlier one).
    history = agent.test(env_factory(), nb_episodes=args.eval_episodes, visualize=False, verbose=0)
    returns = history.history["episode_reward"]
    run_log.log_evaluation(result.env_steps, returns)
    final_mean = float(np.mean(returns))
    print(f"greedy evaluation over {args.eval_episodes} episodes: {final_mean:.1f}")
    kept = dict(mean=final_mean, env_steps=result.env_steps)
    if best.get("mean", -np.inf) > final_mean:
        agent.learner.set_weights(best["weights"])
        agent.sync_actor()
        kept = best
    best_file = f"{run_dir}/best_weights.h5"
    agent.save_weights(best_file, overwrite=True)
    print(
        f"best weights: {best_file} (greedy mean {kept['mean']:.1f}, {kept['env_steps']} env steps)"
    )

    # 5. The learning curve, and where everything is.
    print(f"checkpoints: {checkpoints}")
    print(f"learning curve: {plot_run(run_dir)}")
    print(f"logs: {run_dir}/*.jsonl   TensorBoard: tensorboard --logdir {run_dir}/tensorboard")
    flags = "--masked" if args.masked else f"--env {args.env}"
    print(f"continue with: python examples/cartpole.py {flags} --resume {checkpoints}")


if __name__ == "__main__":
    main()
