"""Records preprocessed ALE frames of random play, for `bench_frames.py --frames`.

The frames are what `examples/atari.py` stores: gymnasium's `AtariPreprocessing`
(84x84 grayscale, frame skip 4, no-op starts), uint8, one per env step.

Usage::

    python benchmarks/record_ale_frames.py --env ALE/Pong-v5 --frames 20000 -o frames_pong.npy
    python benchmarks/bench_frames.py --frames frames_pong.npy --capacity 300 --repeats 10
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5", help="ALE game id")
    parser.add_argument("--frames", type=int, default=20_000, help="frames to record")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", required=True, help=".npy file to write")
    args = parser.parse_args()

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
    from atari import make_atari  # the example's env factory: the same preprocessing

    env = make_atari(args.env)
    rng = np.random.default_rng(args.seed)
    frames = np.empty((args.frames, 84, 84), np.uint8)
    observation, _ = env.reset(seed=args.seed)
    for i in range(args.frames):
        frames[i] = observation
        action = int(rng.integers(env.action_space.n))
        observation, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            observation, _ = env.reset()
    np.save(args.output, frames)
    print(f"{args.frames} frames of {args.env} -> {args.output}")


if __name__ == "__main__":
    main()
