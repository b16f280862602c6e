"""R2D2 configuration: one frozen dataclass, validated on construction.

Importing this module does not import TensorFlow, so a manager can build and check a
config in the parent process before any child starts.
"""

from __future__ import annotations

import enum
import math
import numbers
from dataclasses import dataclass, fields, replace
from typing import Any


class InputType(enum.Enum):
    """How one observation frame is turned into a network input.

    Attributes:
        VALUES: No image; a frame of any shape is flattened.
        GRAY_2ch: A grayscale image frame of shape (H, W); stacked frames become channels.
        GRAY_3ch: A grayscale image frame of shape (H, W, 1); stacked frames become channels.
        COLOR: A colour image frame of shape (H, W, C); stacked frames are concatenated on
            the channel axis.
    """

    VALUES = 1
    GRAY_2ch = 3
    GRAY_3ch = 4
    COLOR = 5


def check_frame_shape(input_type: InputType, input_shape: tuple[int, ...]) -> None:
    """Checks that a frame shape fits an input type.

    Args:
        input_type: The InputType of the frame.
        input_shape: The shape of one observation frame.

    Raises:
        ValueError: Naming both the shape and the input type when they do not fit.
    """
    ndim = len(input_shape)
    ok = {
        InputType.VALUES: ndim >= 1,
        InputType.GRAY_2ch: ndim == 2,
        InputType.GRAY_3ch: ndim == 3 and input_shape[-1] == 1,
        InputType.COLOR: ndim == 3,
    }[input_type]
    if not ok or any(int(d) < 1 for d in input_shape):
        need = {
            InputType.VALUES: "any shape with at least one dimension",
            InputType.GRAY_2ch: "(H, W)",
            InputType.GRAY_3ch: "(H, W, 1)",
            InputType.COLOR: "(H, W, C)",
        }[input_type]
        raise ValueError(
            f"observation shape {tuple(input_shape)} does not fit input_type "
            f"{input_type.name}, which needs {need}"
        )


@dataclass(frozen=True)
class R2D2Config:
    """Hyperparameters of an R2D2 agent. Defaults are the paper's Atari settings.

    Units: "env steps" count environment transitions of one actor (of all its
    `envs_per_actor` envs), "learner updates" count
    gradient steps, "sequences" count replay items of `sequence_length` observations.

    Example:
        >>> config = R2D2Config(input_shape=(4,), nb_actions=2, lstm_units=64)
        >>> config.replace(batch_size=32).batch_size, config.burnin + config.input_length
        (32, 120)
        >>> R2D2Config(input_shape=(4,), nb_actions=0)
        Traceback (most recent call last):
        ...
        ValueError: nb_actions must be an int >= 1, got 0
    """

    input_shape: tuple[int, ...]
    """Shape of one observation frame as the env returns it (array dimensions)."""
    nb_actions: int
    """Number of discrete actions (the `n` of a `Discrete` action space)."""
    input_type: InputType = InputType.VALUES
    """How a frame is fed to the network (see `InputType`)."""
    input_sequence: int = 1
    """Past frames stacked into one network input, in frames (1 = no stacking)."""
    image_scale: float = 1.0 / 255.0
    """Factor the network's first layer applies to image frames, so that an `ImageModel`
    sees [0, 1] (1/255 for uint8 pixels; 1.0 for an env whose images are already in
    [0, 1]). Ignored for `InputType.VALUES`."""
    lstm_units: int = 512
    """LSTM width, in units; 0 means no LSTM (a plain feed-forward DQN head)."""
    enable_prev_action_reward: bool = False
    """Switch: feed the previous action (one-hot) and the previous reward into the LSTM
    beside the encoder's features, as the paper does (needs an LSTM)."""
    dense_units: int = 512
    """Width, in units, of the dense layer before the LSTM (VALUES input) and of the
    dueling streams."""
    enable_dueling: bool = True
    """Switch: dueling head, Q = V + A - mean(A)."""
    enable_double_dqn: bool = True
    """Switch: double-Q targets (the online net picks the bootstrap action, the target net
    rates it)."""
    enable_rescaling: bool = True
    """Switch: value rescaling h(x) = sign(x)(sqrt(|x|+1)-1) + 1e-3 x (Pohlen et al. 2018)."""
    advantage_learning: float = 0.0
    """Advantage-learning coefficient α in [0, 1) (dimensionless; Bellemare et al. 2016):
    each learner target is lowered by α times the target network's gap, in return units,
    between the best action's value and the taken one's at that step, which widens the
    action gaps the greedy policy is decided by. 0 (the default) gives R2D2's targets.
    Measured with the masked-CartPole preset, seeds 0-7: on masked CartPole 0.5 kept 61%
    of the evaluations after the first solve at the solved level (45% without) and solved
    all eight seeds (seven without) at a median of 15,000 env steps (12,500); on CartPole
    70% (65%) at the same median of 15,000 (benchmarks/RESULTS.md, stop 38). A modest
    gain, not a fix, so off by default. The actors' initial priorities use the targets
    without it."""
    normalize_rewards: bool = False
    """Switch: divide rewards by the root mean square of every reward seen so far
    (`r2d2_agent.math.reward_scale`), in the learner's n-step returns, the actors' initial
    priorities and the previous-reward input, so that learning does not depend on the
    reward's units (rewards x0.01 or x100 give the same updates). The statistics are
    non-trainable weights of the network (they travel to the actors and into checkpoints);
    Q-values users see (`compute_q_values`, `predict`) stay in return units."""
    multisteps: int = 5
    """n of the n-step return, in env steps."""
    burnin: int = 40
    """Burn-in per sequence, in env steps, unrolled without gradient."""
    input_length: int = 80
    """Trained steps per sequence, in env steps."""
    sequence_period: int | None = None
    """Env steps between the starts of adjacent sequences; None means input_length // 2
    (the paper's overlap of half a sequence)."""
    drop_covered_windows: bool = False
    """Switch: at an episode's end, store no window whose trained steps an earlier window
    of the same episode already trains. With the half-window overlap, an episode that
    ends in the second half of a window leaves, besides that window, one that starts in
    it and holds only the episode's last steps (behind a real burn-in); True drops it,
    so that an episode shorter than `input_length` is one window. False (the paper's)
    stores every window that holds a real step."""
    gamma: float = 0.997
    """Discount per env step, in [0, 1]. At 0 each step's target is its reward alone and
    the learner's update runs neither the target network (unless `advantage_learning`)
    nor the look-ahead steps."""
    batch_size: int = 64
    """Sequences per learner update (a batch of sequences)."""
    memory_capacity: int = 100_000
    """Replay capacity, in sequences."""
    frame_compression: str | None = None
    """None stores replay frames raw; "zstd" compresses each sequence's new frames together
    (zstandard level 1; `pip install 'r2d2-agent[zstd]'`), for image inputs."""
    frame_compression_ratio: float = 10.0
    """With `frame_compression`, the ratio (raw / compressed, dimensionless) the frame store
    is sized for: it takes at most the raw frames' size over this, and when frames compress
    worse the oldest leave early (with their sequences), so memory stays as estimated; the
    first time, a warning gives the ratio the frames reach."""
    memory_warmup: int | None = None
    """Sequences in replay before the first learner update; None means batch_size."""
    priority_exponent: float = 0.9
    """α of prioritized replay, P(i) = p_i^α / Σ p^α (dimensionless, >= 0; 0 = uniform)."""
    is_exponent: float = 0.6
    """β0, the importance-sampling exponent at the first learner update (dimensionless,
    in [0, 1])."""
    is_anneal_updates: int | None = None
    """Learner updates over which β anneals linearly from β0 to 1; None (the default, the
    paper's choice) keeps β at β0 throughout. Picked by a race on CartPole and the masked
    CartPole, seeds 0-4 (`benchmarks/RESULTS.md`): a fixed β solved as fast as annealing."""
    priority_eta: float = 0.9
    """η of the sequence priority η·max|δ| + (1-η)·mean|δ| (dimensionless, in [0, 1])."""
    learning_rate: float = 1e-4
    """Adam learning rate (step size per learner update); with
    `learning_rate_anneal_updates` > 0, the rate at the first update."""
    learning_rate_final: float | None = None
    """Adam learning rate from learner update `learning_rate_anneal_updates` on, reached
    linearly from `learning_rate` (step size per learner update, > 0); None (the default)
    keeps `learning_rate` throughout."""
    learning_rate_anneal_updates: int = 0
    """Learner updates over which the learning rate goes linearly from `learning_rate` to
    `learning_rate_final` (>= 1 when `learning_rate_final` is set, else 0). Counted by
    Adam's iterations, so a resumed run continues the ramp where it stopped."""
    adam_epsilon: float = 1e-3
    """Adam ε (dimensionless; the paper's 1e-3)."""
    clipnorm: float | None = 40.0
    """Global gradient-norm clip (an L2 norm over all gradients); None disables it."""
    loss: str = "huber"
    """Per-step TD loss: "huber" (δ = 1) or "mse" (a name)."""
    target_update_interval: int = 2500
    """Learner updates between copies of the online weights into the target network. At
    1 the target network is the online one as it was before the update (no separate
    network: an update runs the network once instead of twice, 0.8-0.87x the CPU on the
    presets' networks; the presets keep 10, which learned better on held-out seeds)."""
    policy_average_updates: int = 0
    """Learner updates the greedy policy's weights are averaged over (H, >= 0): with H > 0
    the learner keeps an exponential moving average of the online weights, w̄ ← w̄ +
    (w - w̄) / H after every update, and the greedy policy acts with it: `R2D2Agent.test`,
    `predict`, evaluations (`EvaluationCallback`, `R2D2Manager.evaluate`, `r2d2-train`),
    saved weights and checkpoints. Actors keep exploring with the online weights, and the
    updates are those of H = 0, bit for bit: it changes which weights are read, not what
    is learned. 0 (the default) gives the online weights. Once a task is solved, the
    online network's greedy evaluations swing from update to update; the average keeps
    more of them at the solved level, at the cost of a lag of about H updates
    (benchmarks/RESULTS.md, stop 39)."""
    train_interval: int = 4
    """Single-process agent: env steps between learner updates (with N envs, env steps
    of all of them)."""
    actor_sync_interval: int = 400
    """Env steps between an actor's pulls of the learner's weights (with several envs per
    actor, its env steps of all of them)."""
    envs_per_actor: int = 1
    """Envs one actor process steps side by side, in envs (N): it selects all N actions
    with one batched forward pass, each env keeping its own recurrent state, frame stack,
    episodes, sequences and Ape-X ε (spread over all actors' envs). An actor's env steps,
    and so the learner's env-steps-per-update rate limit, count the steps of all N envs.
    `R2D2Agent.fit` then takes N envs (a list or a Gymnasium vector env) and acts as one
    such actor."""
    epsilon: float = 0.4
    """Base ε of the Ape-X schedule ε_i = ε^(1 + α·i/(N-1)): a probability of a random
    action per env step, in [0, 1]."""
    epsilon_alpha: float = 7.0
    """Exponent α of the Ape-X ε schedule (dimensionless, >= 0)."""
    epsilon_start: float | None = None
    """ε at an actor's first env step, annealed linearly to its final ε (`epsilon`, or
    its Ape-X ε_i) over `epsilon_anneal_steps` of its env steps, as DQN does; None keeps
    ε fixed (the paper's actors). With N envs per actor every env anneals over the
    actor's env steps of all N, so the ramp lasts as many env steps whatever N. A
    probability in [0, 1]."""
    epsilon_anneal_steps: int = 0
    """Env steps (of each actor, all its envs counted) of the ε ramp from
    `epsilon_start`; 0 means no ramp."""
    test_epsilon: float = 0.0
    """ε of `R2D2Agent.test` and evaluations, a probability in [0, 1] (0 = greedy)."""
    seed: int | None = None
    """Global seed (an int >= 0); env j of actor i uses seed + i * envs_per_actor + j
    (seed + i with one env per actor). A run resumed from a checkpoint counts from
    `r2d2_agent.math.resumed_seed(seed, its env steps)` instead, so that it does not replay
    the episodes the run began with. None draws fresh randomness."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_shape", tuple(int(d) for d in self.input_shape))
        for f in fields(self):  # numpy scalars (e.g. action_space.n) become plain Python numbers
            value = getattr(self, f.name)
            if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
                object.__setattr__(self, f.name, int(value))
            elif isinstance(value, numbers.Real) and not isinstance(value, (bool, int, float)):
                object.__setattr__(self, f.name, float(value))
        if not isinstance(self.input_type, InputType):
            raise ValueError(f"input_type must be an InputType, got {self.input_type!r}")
        check_frame_shape(self.input_type, self.input_shape)
        positive = (
            "nb_actions",
            "input_sequence",
            "dense_units",
            "multisteps",
            "input_length",
            "batch_size",
            "memory_capacity",
            "target_update_interval",
            "train_interval",
            "actor_sync_interval",
            "envs_per_actor",
        )
        for name in positive:
            _check_int(name, getattr(self, name), minimum=1)
        _check_int("lstm_units", self.lstm_units, minimum=0)
        _check_int("epsilon_anneal_steps", self.epsilon_anneal_steps, minimum=0)
        if self.epsilon_start is not None:
            _check_range("epsilon_start", self.epsilon_start, 0.0, 1.0)
        if self.is_anneal_updates is not None:
            _check_int("is_anneal_updates", self.is_anneal_updates, minimum=1)
        _check_int("burnin", self.burnin, minimum=0)
        _check_int("policy_average_updates", self.policy_average_updates, minimum=0)
        if self.sequence_period is not None:
            _check_int("sequence_period", self.sequence_period, minimum=1)
            if self.sequence_period > self.input_length:
                raise ValueError(
                    f"sequence_period={self.sequence_period} must not exceed "
                    f"input_length={self.input_length} (steps would be skipped)"
                )
        if self.memory_warmup is not None:
            _check_int("memory_warmup", self.memory_warmup, minimum=1)
            if self.memory_warmup > self.memory_capacity:
                raise ValueError(
                    f"memory_warmup={self.memory_warmup} exceeds "
                    f"memory_capacity={self.memory_capacity}"
                )
        if self.batch_size > self.memory_capacity:
            raise ValueError(
                f"batch_size={self.batch_size} exceeds memory_capacity={self.memory_capacity}"
            )
        _check_range("gamma", self.gamma, 0.0, 1.0)
        for name in ("is_exponent", "priority_eta", "epsilon", "test_epsilon"):
            _check_range(name, getattr(self, name), 0.0, 1.0)
        _check_range("priority_exponent", self.priority_exponent, 0.0, math.inf)
        if not (isinstance(self.image_scale, (int, float)) and 0 < self.image_scale < math.inf):
            raise ValueError(f"image_scale must be a number > 0, got {self.image_scale!r}")
        _check_range("epsilon_alpha", self.epsilon_alpha, 0.0, math.inf)
        _check_range("advantage_learning", self.advantage_learning, 0.0, 1.0)
        if self.advantage_learning == 1.0:
            raise ValueError(f"advantage_learning must be < 1, got {self.advantage_learning!r}")
        rates = ["learning_rate", "adam_epsilon"]
        if self.learning_rate_final is not None:
            rates.append("learning_rate_final")
        for name in rates:
            value = getattr(self, name)
            _check_range(name, value, 0.0, math.inf)
            if value == 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if self.learning_rate_final is not None:
            _check_int("learning_rate_anneal_updates", self.learning_rate_anneal_updates, 1)
        elif self.learning_rate_anneal_updates != 0:
            raise ValueError(
                "learning_rate_anneal_updates needs learning_rate_final (the rate it anneals "
                f"to), got learning_rate_anneal_updates={self.learning_rate_anneal_updates!r} "
                "and learning_rate_final=None"
            )
        if self.clipnorm is not None and not (self.clipnorm > 0):
            raise ValueError(f"clipnorm must be > 0 or None, got {self.clipnorm!r}")
        if not isinstance(self.drop_covered_windows, bool):
            raise ValueError(
                f"drop_covered_windows must be True or False, got {self.drop_covered_windows!r}"
            )
        if not isinstance(self.normalize_rewards, bool):
            raise ValueError(
                f"normalize_rewards must be True or False, got {self.normalize_rewards!r}"
            )
        if self.enable_prev_action_reward and not self.enable_lstm:
            raise ValueError(
                "enable_prev_action_reward=True needs an LSTM (lstm_units > 0), got "
                f"lstm_units={self.lstm_units!r}"
            )
        if self.frame_compression not in (None, "zstd"):
            raise ValueError(
                f'frame_compression must be None or "zstd", got {self.frame_compression!r}'
            )
        _check_range("frame_compression_ratio", self.frame_compression_ratio, 0.0, math.inf)
        if not self.frame_compression_ratio >= 1:
            raise ValueError(
                f"frame_compression_ratio must be >= 1, got {self.frame_compression_ratio!r}"
            )
        if self.loss not in ("huber", "mse"):
            raise ValueError(f'loss must be "huber" or "mse", got {self.loss!r}')
        if self.seed is not None:
            _check_int("seed", self.seed, minimum=0)

    # Derived values -------------------------------------------------------------------

    @property
    def enable_lstm(self) -> bool:
        """Whether the network has an LSTM."""
        return self.lstm_units > 0

    @property
    def period(self) -> int:
        """Env steps between adjacent sequence starts."""
        return self.sequence_period or max(1, self.input_length // 2)

    @property
    def sequence_length(self) -> int:
        """Observations stored per sequence: burnin + input_length + multisteps."""
        return self.burnin + self.input_length + self.multisteps

    @property
    def warmup(self) -> int:
        """Sequences in replay before the first learner update."""
        return self.memory_warmup or self.batch_size

    @property
    def state_size(self) -> int:
        """Width of one recurrent state vector (0 without LSTM)."""
        return self.lstm_units

    @property
    def is_image(self) -> bool:
        """Whether frames are images (every input type but `VALUES`)."""
        return self.input_type is not InputType.VALUES

    @property
    def network_input_shape(self) -> tuple[int, ...]:
        """Shape of one network input: `input_sequence` stacked frames."""
        return (self.input_sequence, *self.input_shape)

    def replace(self, **changes: Any) -> R2D2Config:
        """Returns a copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data view, e.g. for logging hyperparameters."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["input_type"] = self.input_type.name
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> R2D2Config:
        """The inverse of `to_dict`, also for its JSON form (a checkpoint's or a run
        directory's `config`): lists become tuples, `input_type` a name.

        Raises:
            ValueError: On a field this version does not know (named), or an invalid value.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown R2D2Config fields: {', '.join(unknown)}")
        values = dict(data)
        if isinstance(values.get("input_type"), str):
            values["input_type"] = InputType[values["input_type"]]
        if isinstance(values.get("input_shape"), list):
            values["input_shape"] = tuple(values["input_shape"])
        return cls(**values)


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_range(name: str, value: Any, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high):
        raise ValueError(f"{name} must be a number in [{low}, {high}], got {value!r}")
