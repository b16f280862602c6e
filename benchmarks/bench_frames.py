"""Frames stored once: bytes per env step on the wire and in replay, add and sample time,
the old layout (every sequence stores its stacked window) against the new one (every
frame once, stacks rebuilt when sampled).

For each size (the CartPole preset; an Atari-sized configuration: 84x84 uint8 frames,
4 stacked, burn-in 40 + 80 trained + n 5, period 40) an adder cuts episodes into sequences
(a fixed policy, no TensorFlow). Measured:

* wire: pickled bytes of the actors' experience items per env step (the new items; the
  old items rebuilt from them, with the window of stacks each used to carry);
* replay: bytes stored per env step at full capacity (the estimate for the new layout, the
  preallocated arrays for the old one), the time to add a sequence and to sample a batch
  (the new one rebuilds nothing: it gathers `T + S - 1` frames per row and the learner
  stacks them in its graph; the old one copies whole stacked windows).

Frames come from `--frames FILE.npy` (e.g. real ALE frames, uint8 (N, 84, 84)) or are
random. Prints one JSON object.

Usage::

    python benchmarks/bench_frames.py [--frames frames_pong.npy] [--capacity 400]
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time

import numpy as np

from r2d2_agent.config import InputType, R2D2Config
from r2d2_agent.distributed.messages import Experience
from r2d2_agent.presets import cartpole_config
from r2d2_agent.replay import (
    PrioritizedSequenceReplay,
    default_frame_capacity,
    estimate_replay_bytes,
    stack_frames,
)
from r2d2_agent.roles import R2D2Builder


def atari_config(capacity: int) -> R2D2Config:
    return R2D2Config(
        input_shape=(84, 84),
        nb_actions=6,
        input_type=InputType.GRAY_2ch,
        input_sequence=4,
        memory_capacity=capacity,
        batch_size=64,
    )


class FixedPolicy:
    """Acting stand-in: constant Q-values, zero state."""

    def __init__(self, config: R2D2Config) -> None:
        self.q = np.linspace(-1, 1, config.nb_actions)[None]
        self.state = np.zeros((1, 2, config.lstm_units), np.float32)

    def step(self, obs, state):
        return self.q, self.state

    def set_weights(self, weights):
        pass


def collect(config: R2D2Config, frames: np.ndarray, env_steps: int, episode: int) -> list:
    """Experience items of an actor over `env_steps` steps of episodes of `episode` steps."""
    builder = R2D2Builder(config)
    items: list = []
    pending = [0]

    def sink(record):
        items.append(Experience(record, pending[0]))
        pending[0] = 0

    actor = builder.make_actor(FixedPolicy(config), builder.make_adder(sink), 0.0, 0)
    for step in range(env_steps):
        frame = frames[step % len(frames)]
        if step % episode == 0:
            actor.observe_first(frame)
        action = actor.select_action()
        pending[0] += 1
        last = (step + 1) % episode == 0
        actor.observe(action, 1.0, frames[(step + 1) % len(frames)], last, False)
    return items


def old_item(item: Experience, frames_by_id: dict[int, np.ndarray], stack: int) -> dict:
    """What the same sequence weighed in the old layout: its window of stacks."""
    record = item.record
    for i, frame in enumerate(record.frames):
        frames_by_id[record.first_frame + i] = frame
    ids = record.fields["frame_ids"]
    zero = np.zeros_like(record.frames[0]) if len(record.frames) else None
    zero = zero if zero is not None else np.zeros_like(next(iter(frames_by_id.values())))
    window = np.stack([frames_by_id[int(i)] if i >= 0 else zero for i in ids])
    sequence = {k: v for k, v in record.fields.items() if k not in ("frame_ids", "obs_mask")}
    sequence["obs"] = stack_frames(window, record.fields["obs_mask"], stack)
    return {"sequence": sequence, "priority": record.priority, "env_steps": item.env_steps}


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e3, 3)


def bench(name: str, config: R2D2Config, frames: np.ndarray, episode: int, repeats: int) -> dict:
    builder = R2D2Builder(config)
    stack = config.input_sequence
    env_steps = max(4 * config.memory_capacity * config.period // 3, 8 * episode)
    items = collect(config, frames, env_steps, episode)
    steps = sum(item.env_steps for item in items)
    frames_by_id: dict[int, np.ndarray] = {}
    old_items = [old_item(item, frames_by_id, stack) for item in items]
    wire_new = sum(len(pickle.dumps(item, pickle.HIGHEST_PROTOCOL)) for item in items)
    wire_old = sum(len(pickle.dumps(item, pickle.HIGHEST_PROTOCOL)) for item in old_items)

    new = builder.make_replay()
    packed = R2D2Builder(config.replace(frame_compression="zstd")).make_replay()
    old_spec = {k: ((v.shape), v.dtype) for k, v in old_items[0]["sequence"].items()}
    old = PrioritizedSequenceReplay(config.memory_capacity, old_spec, 0.9, seed=0)
    new_add, old_add, packed_add = [], [], []
    for item, previous in zip(items, old_items, strict=True):
        start = time.perf_counter()
        new.add(item.record, 0)
        new_add.append(time.perf_counter() - start)
        start = time.perf_counter()
        packed.add(item.record, 0)
        packed_add.append(time.perf_counter() - start)
        start = time.perf_counter()
        old.add(previous["sequence"], previous["priority"])
        old_add.append(time.perf_counter() - start)
    raw_frame_bytes = packed.frames_stored * builder.layout.frame_nbytes
    block_bytes = packed.frame_store_bytes
    ratio = raw_frame_bytes / block_bytes
    old_bytes = sum(old.column(k).nbytes for k in old_spec)
    steps_per_sequence = steps / len(items)
    capacity_steps = config.memory_capacity * steps_per_sequence
    frame_bytes = int(np.prod(config.input_shape)) * np.dtype(builder.observation_dtype).itemsize
    return {
        "name": name,
        "frame_bytes": frame_bytes,
        "input_sequence": stack,
        "sequence_length": config.sequence_length,
        "period": config.period,
        "memory_capacity": config.memory_capacity,
        "env_steps_collected": steps,
        "sequences": len(items),
        "wire_bytes_per_env_step": {
            "old": round(wire_old / steps, 1),
            "new": round(wire_new / steps, 1),
            "ratio": round(wire_old / wire_new, 2),
        },
        "replay_bytes_per_env_step": {
            "old": round(old_bytes / capacity_steps, 1),
            "new": round(estimate_replay_bytes(config) / capacity_steps, 1),
            "new_frames_per_env_step": round(new.frame_capacity / capacity_steps, 3),
        },
        "add_ms_per_sequence": {
            "old": round(statistics.median(old_add) * 1e3, 4),
            "new": round(statistics.median(new_add) * 1e3, 4),
            "new_zstd": round(statistics.median(packed_add) * 1e3, 4),
        },
        "sample_ms_per_batch": {
            "batch": config.batch_size,
            "old": median_ms(lambda: old.sample(config.batch_size), repeats),
            "new": median_ms(lambda: new.sample(config.batch_size), repeats),
            "new_zstd": median_ms(lambda: packed.sample(config.batch_size), repeats),
        },
        "zstd": {
            "frames": packed.frames_stored,
            "compression_ratio": round(ratio, 1),
            "paper_replay_gb_at_this_ratio": round(paper_replay_bytes(ratio) / 1e9, 2),
        },
    }


def paper_replay_bytes(ratio: float) -> float:
    """The paper's 100,000-sequence Atari replay with frames compressed `ratio` times."""
    paper = atari_config(100_000)
    raw = estimate_replay_bytes(paper)
    layout = R2D2Builder(paper).layout
    frames = (default_frame_capacity(layout, paper.memory_capacity) + 1) * layout.frame_nbytes
    index = default_frame_capacity(layout, paper.memory_capacity) * 12
    return raw - frames + frames / ratio + index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", help="uint8 (N, 84, 84) frames for the Atari size")
    parser.add_argument("--capacity", type=int, default=400, help="Atari-size sequences")
    parser.add_argument("--episode", type=int, default=400, help="Atari-size episode steps")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    if args.frames:
        atari_frames = np.load(args.frames)
    else:
        atari_frames = rng.integers(0, 256, (2_000, 84, 84), dtype=np.uint8)
    cartpole_frames = rng.normal(size=(5_000, 4)).astype(np.float32)
    report = {
        "benchmark": "bench_frames",
        "command": " ".join(["python", *sys.argv]),
        "frames": args.frames or "random uint8",
        "sizes": [
            bench("cartpole_preset", cartpole_config(), cartpole_frames, 200, args.repeats),
            bench(
                "atari",
                atari_config(args.capacity),
                atari_frames,
                args.episode,
                args.repeats,
            ),
        ],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
