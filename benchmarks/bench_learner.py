"""Our learner's update against a bare Keras update of the same sizes (issue 7.3).

For the CartPole preset and an Atari-sized configuration (84x84 grayscale x 4 stacked
frames, DQN torso, LSTM 512, dueling 512, batch 64 sequences of burn-in 40 + 80 trained
steps + n=5), one process builds and times:

* ``ours``: `R2D2Builder(config).make_learner()` on a replay of random valid sequences,
  timing `learner.step()` (sample, host->tensor copies, the compiled update, priority
  update, target copy every `target_update_interval`);
* ``ours_parts``: the same step taken apart, each part timed on its own: ``sample`` (replay
  sampling and importance weights), ``to_tensor`` (the batch's numpy arrays to tensors),
  ``graph`` (the compiled update on those tensors, priorities fetched), ``bookkeeping``
  (counters, metrics, target copy) and ``priorities`` (`replay.update_priorities`);
* ``bare``: a plain `tf.keras` + `tf.function` R2D2 update written here, not with the
  library: online and target networks of the same layers and sizes (the torso, a Keras
  `LSTM` layer, the dueling head), a burn-in pass of the online net without gradient, one
  target unroll over burn-in and trained steps, double-Q n-step targets with value
  rescaling, the importance-weighted Huber (or squared, as the config says) TD loss with
  the sequence mask, Adam with the same global clip norm, priorities out, target copy on
  the same interval. It runs on a fixed batch of tensors made once (stacked uint8
  observations for images): no replay, no host-to-tensor copies, the lower bound.

The variants run interleaved (a repeat of each in turn, the order alternating), so a
slower or busier stretch of a shared machine hits all of them alike. Each repeat's figure
is the mean over ``--updates`` updates; medians, minima and maxima over ``--repeats`` are
reported, and the ratio ours/bare both as the ratio of the medians and as the median of
the per-repeat ratios.

``--xla`` also times both updates compiled with ``jit_compile=True`` (ours through a
`tf.function` of the learner's `_flat_train_graph` made here; the library has no switch),
with the compile time of the first call. ``--bare-lstm loop`` uses the LSTM layer's
while loop instead of its static unroll (``unroll=True``, the default here, as our
network unrolls short sequences).

Prints one JSON object. Usage::

    python benchmarks/bench_learner.py                        # CartPole and Atari size
    python benchmarks/bench_learner.py --skip-atari --repeats 7 --updates 50
    python benchmarks/bench_learner.py --xla --skip-atari
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from r2d2_agent.compat import keras, tf
from r2d2_agent.config import R2D2Config
from r2d2_agent.math import importance_weights
from r2d2_agent.presets import cartpole_config
from r2d2_agent.roles import R2D2Builder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replay_fill import atari_sized_config as atari_config  # noqa: E402
from replay_fill import fill_replay  # noqa: E402

# The bare reference ---------------------------------------------------------------------


class BareNet(keras.Model):
    """Torso -> LSTM -> dueling head, written with plain Keras layers.

    Args:
        config: Only its sizes are read (input type and shape, stacking, LSTM and dense
            widths, actions, image scale).
        unroll: The LSTM layer's `unroll` (static unroll) or its while loop.
    """

    def __init__(self, config: R2D2Config, unroll: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        layers = keras.layers
        self.image = config.is_image
        self.scale = config.image_scale
        if self.image:
            self.torso = keras.Sequential(
                [
                    layers.Conv2D(32, 8, strides=4, activation="relu"),
                    layers.Conv2D(64, 4, strides=2, activation="relu"),
                    layers.Conv2D(64, 3, strides=1, activation="relu"),
                    layers.Flatten(),
                ]
            )
        else:
            self.torso = keras.Sequential([layers.Dense(config.dense_units, activation="relu")])
        self.lstm = layers.LSTM(
            config.lstm_units, return_sequences=True, return_state=True, unroll=unroll
        )
        self.value_hidden = layers.Dense(config.dense_units, activation="relu")
        self.value = layers.Dense(1)
        self.advantage_hidden = layers.Dense(config.dense_units, activation="relu")
        self.advantage = layers.Dense(config.nb_actions)

    def call(self, obs, h, c, mask=None):
        """obs (B, T, *input): (B, T, H, W, S) uint8 images or (B, T, S * features)."""
        batch, steps = obs.shape[0], obs.shape[1]
        x = tf.reshape(obs, (batch * steps, *obs.shape[2:]))
        x = tf.cast(x, tf.float32)
        if self.image:
            x = x * self.scale
        x = self.torso(x)
        x = tf.reshape(x, (batch, steps, x.shape[-1]))
        out, h, c = self.lstm(x, initial_state=[h, c], mask=mask)
        v = self.value(self.value_hidden(out))
        a = self.advantage(self.advantage_hidden(out))
        return v + a - tf.reduce_mean(a, axis=-1, keepdims=True), h, c


def _h(x):
    return tf.sign(x) * (tf.sqrt(tf.abs(x) + 1.0) - 1.0) + 1e-3 * x


def _h_inv(x):
    eps = 1e-3
    root = (tf.sqrt(1.0 + 4.0 * eps * (tf.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return tf.sign(x) * (tf.square(root) - 1.0)


class BareUpdate:
    """The bare R2D2 update on the sizes of `config` (see the module docstring)."""

    def __init__(self, config: R2D2Config, unroll: bool = True, jit_compile: bool = False):
        self.config = config
        self.online = BareNet(config, unroll)
        self.target = BareNet(config, unroll)
        clip = {} if config.clipnorm is None else {"global_clipnorm": config.clipnorm}
        self.optimizer = keras.optimizers.Adam(
            learning_rate=config.learning_rate, epsilon=config.adam_epsilon, **clip
        )
        self.updates = 0
        self.update = tf.function(self._update, jit_compile=jit_compile)
        self.copy = tf.function(self._copy)

    def build(self, batch: dict) -> None:
        """Creates the variables and copies the online weights into the target."""
        h, c = batch["h"], batch["c"]
        self.online(batch["obs"][:, :2], h, c)
        self.target(batch["obs"][:, :2], h, c)
        self.copy()

    def _copy(self):
        for t, o in zip(self.target.weights, self.online.weights, strict=True):
            t.assign(o)

    def _update(self, obs, burnin_mask, h, c, actions, returns, discount, boot, mask, weights):
        cfg = self.config
        b, length = cfg.burnin, cfg.input_length
        target_mask = None
        if b > 0:
            burn = burnin_mask > 0.5
            _, oh, oc = self.online(obs[:, :b], h, c, mask=burn)
            oh, oc = tf.stop_gradient(oh), tf.stop_gradient(oc)
            rest = tf.ones((obs.shape[0], obs.shape[1] - b), tf.bool)
            target_mask = tf.concat([burn, rest], axis=1)
        else:
            oh, oc = h, c
        q_target, _, _ = self.target(obs, h, c, mask=target_mask)
        q_target = q_target[:, b:]
        with tf.GradientTape() as tape:
            q_all, _, _ = self.online(obs[:, b:], oh, oc)
            q_taken = tf.gather(q_all[:, :length], actions, batch_dims=2)
            next_online = tf.gather(q_all, boot, batch_dims=1)
            next_target = tf.gather(q_target, boot, batch_dims=1)
            if cfg.enable_double_dqn:
                best = tf.argmax(next_online, axis=-1, output_type=tf.int32)
                q_next = tf.gather(next_target, best, batch_dims=2)
            else:
                q_next = tf.reduce_max(next_target, axis=-1)
            if cfg.enable_rescaling:
                y = _h(returns + discount * _h_inv(q_next))
            else:
                y = returns + discount * q_next
            td = tf.stop_gradient(y) - q_taken
            if cfg.loss == "huber":
                err = tf.abs(td)
                per_step = tf.where(err <= 1.0, 0.5 * td * td, err - 0.5)
            else:
                per_step = 0.5 * td * td
            steps = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
            loss = tf.reduce_mean(weights * tf.reduce_sum(per_step * mask, axis=1) / steps)
        variables = self.online.trainable_variables
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        abs_td = tf.abs(td) * mask
        eta = cfg.priority_eta
        priorities = (
            eta * tf.reduce_max(abs_td, axis=1) + (1 - eta) * tf.reduce_sum(abs_td, axis=1) / steps
        )
        mean_q = tf.reduce_sum(q_taken * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
        return loss, priorities, mean_q

    def step(self, batch: dict) -> np.ndarray:
        """One update on the fixed batch; returns the priorities (fetched)."""
        _, priorities, _ = self.update(
            batch["obs"],
            batch["burnin_mask"],
            batch["h"],
            batch["c"],
            batch["actions"],
            batch["returns"],
            batch["bootstrap_discount"],
            batch["bootstrap_index"],
            batch["mask"],
            batch["weights"],
        )
        self.updates += 1
        if self.updates % self.config.target_update_interval == 0:
            self.copy()
        return priorities.numpy()


def bare_batch(config: R2D2Config, sampled: dict, weights: np.ndarray) -> dict:
    """The bare update's fixed batch, as tensors, from one batch sampled from our replay:
    observations stacked in numpy once ((B, T, H, W, S) uint8 for images, (B, T, S * f)
    floats for values)."""
    s, steps = config.input_sequence, config.sequence_length
    frames = sampled["frames"]
    obs = np.stack([frames[:, k : k + steps] for k in range(s)], axis=2)  # (B, T, S, ...)
    obs = obs * (sampled["obs_mask"].reshape(*obs.shape[:2], *([1] * (obs.ndim - 2))) > 0)
    obs = obs.astype(frames.dtype)
    if config.is_image:
        obs = np.moveaxis(obs, 2, -1)  # (B, T, H, W, S)
    else:
        obs = obs.reshape(*obs.shape[:2], -1)
    arrays = {
        "obs": obs,
        "burnin_mask": sampled["burnin_mask"],
        "h": sampled["state"][:, 0],
        "c": sampled["state"][:, 1],
        "actions": sampled["actions"],
        "returns": sampled["returns"],
        "bootstrap_discount": sampled["bootstrap_discount"],
        "bootstrap_index": sampled["bootstrap_index"],
        "mask": sampled["mask"],
        "weights": np.asarray(weights, np.float32),
    }
    return {k: tf.constant(np.ascontiguousarray(v)) for k, v in arrays.items()}


# Our learner, whole and in parts --------------------------------------------------------


class OursParts:
    """`R2D2Learner.step` taken apart, each part timed (seconds summed per part)."""

    PARTS = ("sample", "to_tensor", "graph", "bookkeeping", "priorities")

    def __init__(self, learner) -> None:
        self.learner = learner
        self.reset()

    def reset(self) -> None:
        self.seconds = dict.fromkeys(self.PARTS, 0.0)

    def step(self) -> None:
        learner = self.learner
        train = learner._compiled_update()
        clock = time.perf_counter
        t0 = clock()
        keys, batch, probabilities = learner.replay.sample(learner.config.batch_size)
        weights = importance_weights(probabilities, len(learner.replay), learner.beta)
        t1 = clock()
        tensors = [tf.convert_to_tensor(batch[name]) for name in learner._fields]
        weights = tf.convert_to_tensor(np.asarray(weights, np.float32))
        new_rewards = tf.convert_to_tensor(learner._take_new_rewards())
        t2 = clock()
        loss, priorities, mean_q = train(*tensors, weights, new_rewards)
        priorities = priorities.numpy()
        t3 = clock()
        learner.updates += 1
        if learner.updates % learner.config.target_update_interval == 0:
            learner.update_target()
        learner.last_metrics = {
            "loss": float(loss),
            "mean_q": float(mean_q),
            "mean_priority": float(priorities.mean()),
        }
        t4 = clock()
        learner.replay.update_priorities(keys, priorities)
        t5 = clock()
        for part, dt in zip(self.PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
            self.seconds[part] += dt


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _summary(values_ms: list[float]) -> dict:
    return {
        "median": round(statistics.median(values_ms), 3),
        "min": round(min(values_ms), 3),
        "max": round(max(values_ms), 3),
    }


def _swap_train(learner, train):
    """Runs `learner.step` with another compiled update (`train`, a concrete function of
    the learner's flat update inputs; restored afterwards)."""

    def step():
        whole = learner._whole_extent  # the benchmark's sequences fill their windows
        saved = learner._updates.get(whole)
        learner._updates[whole] = train
        try:
            learner.step()
        finally:
            learner._updates[whole] = saved

    return step


def bench(
    name: str,
    config: R2D2Config,
    dtype: type,
    updates: int,
    repeats: int,
    xla: bool,
    unroll: bool,
) -> dict:
    """Builds ours and the bare reference for `config`, times them interleaved."""
    log = lambda msg: print(f"[{name}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    learner = R2D2Builder(config, observation_dtype=dtype).make_learner()
    fill_replay(learner, config, max(2 * config.batch_size, config.warmup), dtype)
    parts = OursParts(learner)
    _, sampled, probabilities = learner.replay.sample(config.batch_size)
    bare = BareUpdate(config, unroll=unroll)
    fixed = bare_batch(config, sampled, importance_weights(probabilities, len(learner.replay), 0.6))
    bare.build(fixed)
    params = {
        "ours": int(sum(w.size for w in learner.get_weights())),
        "bare": int(sum(int(np.prod(w.shape)) for w in bare.online.weights)),
    }
    variants = {"ours": learner.step, "ours_parts": parts.step, "bare": lambda: bare.step(fixed)}
    first_call_s = {}
    if xla:
        ours_xla = tf.function(
            learner._flat_train_graph,
            input_signature=learner._update_signature(),
            jit_compile=True,
        ).get_concrete_function()
        bare_xla = BareUpdate(config, unroll=unroll, jit_compile=True)
        bare_xla.build(fixed)
        variants["ours_xla"] = _swap_train(learner, ours_xla)
        variants["bare_xla"] = lambda: bare_xla.step(fixed)
    for key, fn in variants.items():  # traces (and XLA-compiles) each graph
        log(f"first call of {key} ...")
        first_call_s[key] = round(_timed(fn), 2)
        log(f"first call of {key}: {first_call_s[key]} s")
        fn()  # a second call: no tracing left in the timed repeats
    parts.reset()
    ms = {key: [] for key in variants}
    part_ms = {part: [] for part in OursParts.PARTS}
    order = list(variants)
    for r in range(repeats):
        for key in order if r % 2 == 0 else order[::-1]:
            fn = variants[key]
            parts.reset()
            seconds = _timed(lambda fn=fn: [fn() for _ in range(updates)])
            ms[key].append(seconds / updates * 1e3)
            if key == "ours_parts":
                for part, s in parts.seconds.items():
                    part_ms[part].append(s / updates * 1e3)
        log(f"repeat {r + 1}/{repeats}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in ms.items()))
    paired = [o / b for o, b in zip(ms["ours"], ms["bare"], strict=True)]
    result = {
        "config": {
            "batch": config.batch_size,
            "burnin": config.burnin,
            "input_length": config.input_length,
            "multisteps": config.multisteps,
            "lstm_units": config.lstm_units,
            "dense_units": config.dense_units,
            "input_shape": list(config.input_shape),
            "input_sequence": config.input_sequence,
            "frame_dtype": np.dtype(dtype).name,
            "loss": config.loss,
        },
        "parameters": params,
        "updates_per_repeat": updates,
        "repeats": repeats,
        "first_call_s": first_call_s,
        "ms_per_update": {key: _summary(v) for key, v in ms.items()},
        "ours_parts_ms": {part: _summary(v) for part, v in part_ms.items()},
        "ratio_ours_over_bare": round(
            statistics.median(ms["ours"]) / statistics.median(ms["bare"]), 3
        ),
        "ratio_paired_median": round(statistics.median(paired), 3),
        "ratio_paired_range": [round(min(paired), 3), round(max(paired), 3)],
    }
    if xla:
        result["ratio_ours_xla_over_bare"] = round(
            statistics.median(ms["ours_xla"]) / statistics.median(ms["bare"]), 3
        )
        result["ratio_bare_xla_over_bare"] = round(
            statistics.median(ms["bare_xla"]) / statistics.median(ms["bare"]), 3
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=50, help="updates per repeat (CartPole)")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved repeats (CartPole)")
    parser.add_argument("--atari-updates", type=int, default=2, help="updates per repeat")
    parser.add_argument("--atari-repeats", type=int, default=5)
    parser.add_argument("--skip-atari", action="store_true")
    parser.add_argument("--skip-cartpole", action="store_true")
    parser.add_argument("--xla", action="store_true", help="also time jit_compile=True graphs")
    parser.add_argument(
        "--bare-lstm", choices=("unroll", "loop"), default="unroll", help="bare LSTM layer mode"
    )
    args = parser.parse_args()
    t0 = time.perf_counter()
    unroll = args.bare_lstm == "unroll"
    out = {
        "benchmark": "bench_learner",
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "tensorflow": tf.__version__,
        "bare_lstm": args.bare_lstm,
    }
    if not args.skip_cartpole:
        out["cartpole"] = bench(
            "cartpole",
            cartpole_config(seed=0),
            np.float32,
            args.updates,
            args.repeats,
            args.xla,
            unroll,
        )
    if not args.skip_atari:
        out["atari"] = bench(
            "atari",
            atari_config(),
            np.uint8,
            args.atari_updates,
            args.atari_repeats,
            args.xla,
            unroll,
        )
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
