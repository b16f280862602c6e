"""`R2D2Builder`: the one place where an `R2D2Config` becomes components.

The single-process agent, every actor and learner process, the manager's test agent and
its evaluation all build their policy, adder, replay, learner and actor here (as Acme's
`builder.py`). The builder is a small frozen dataclass of plain data, so it can also cross
a process boundary as the factory of a role's components.

Importing this module does not import TensorFlow: `make_learner`, and `make_policy` for
networks the numpy forward pass cannot run, import it when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from r2d2_agent.config import R2D2Config
from r2d2_agent.image_models import ImageModel
from r2d2_agent.math import apex_epsilon
from r2d2_agent.networks.numpy_net import NumpyNetwork, supports_numpy
from r2d2_agent.networks.policies import KerasPolicy, Policy
from r2d2_agent.replay.adder import SequenceAdder, Sink
from r2d2_agent.replay.env_adders import PerEnvAdders, VectorAdder, make_env_adders
from r2d2_agent.replay.layout import SequenceLayout
from r2d2_agent.replay.sequence_replay import SequenceReplay
from r2d2_agent.replay.sizing import storage_dtype
from r2d2_agent.replay.vector_adder import VectorSequenceAdder
from r2d2_agent.roles.actor import R2D2Actor
from r2d2_agent.roles.vector_actor import R2D2VectorActor

if TYPE_CHECKING:
    from r2d2_agent.roles.learner import R2D2Learner

__all__ = ["R2D2Builder", "resolve_use_numpy"]


def resolve_use_numpy(
    config: R2D2Config, image_model: ImageModel | None = None, use_numpy: bool | None = None
) -> bool:
    """Whether to act with the numpy forward pass.

    Args:
        config: The agent's configuration.
        image_model: Encoder for image inputs (rules the numpy pass out).
        use_numpy: Force (True) or forbid (False) it; None picks it whenever possible.

    Raises:
        ValueError: If it is forced but the network is not a value-input network.
    """
    possible = image_model is None and supports_numpy(config)
    if use_numpy and not possible:
        raise ValueError("use_numpy_policy=True needs InputType.VALUES and no image_model")
    return possible if use_numpy is None else bool(use_numpy)


@dataclass(frozen=True)
class R2D2Builder:
    """Builds R2D2's components from a configuration.

    Attributes:
        config: The agent's configuration.
        image_model: Encoder for image inputs; `DQNImageModel` when None.
        observation_dtype: Storage dtype of observations in sequences and replay; None
            (the default) stores images as uint8 and values as float32.
        use_numpy_policy: Act with the numpy forward pass (resolved on construction:
            None becomes True whenever the network allows it).

    Raises:
        ValueError: If the numpy policy is forced on a network it cannot run.
    """

    config: R2D2Config
    image_model: ImageModel | None = None
    observation_dtype: np.dtype | None = None
    use_numpy_policy: bool | None = None

    def __post_init__(self) -> None:
        dtype = storage_dtype(self.config, self.observation_dtype)
        object.__setattr__(self, "observation_dtype", dtype)
        resolved = resolve_use_numpy(self.config, self.image_model, self.use_numpy_policy)
        object.__setattr__(self, "use_numpy_policy", resolved)

    @property
    def layout(self) -> SequenceLayout:
        """The layout of the training sequences."""
        return SequenceLayout.from_config(self.config, self.observation_dtype)

    def actor_epsilon(self, index: int, nb_actors: int) -> float:
        """Exploration rate of actor `index` of `nb_actors` (Ape-X schedule).

        With several envs per actor, each env is an "actor" of this schedule: env `j` of
        actor `i` is index `i * envs_per_actor + j` of `nb_actors * envs_per_actor`.

        Args:
            index: The actor's index in `[0, nb_actors)`.
            nb_actors: Number of actors.
        """
        return apex_epsilon(index, nb_actors, self.config.epsilon, self.config.epsilon_alpha)

    def make_policy(self) -> Policy:
        """The acting network: numpy for value inputs (no TensorFlow), Keras otherwise."""
        if self.use_numpy_policy:
            return NumpyNetwork(self.config)
        return KerasPolicy(self.config, self.image_model)

    def make_adder(self, sink: Sink) -> SequenceAdder:
        """A `SequenceAdder` shaped by the config that hands sequences to `sink`."""
        return SequenceAdder(sink, self.layout, **self._adder_options())

    def make_vector_adder(
        self, sinks: Sequence[Sink], batched: bool | None = None
    ) -> PerEnvAdders | VectorSequenceAdder:
        """The adder of `len(sinks)` envs shaped by the config, env `j`'s sequences going
        to `sinks[j]` (what `make_adder(sinks[j])` would emit).

        Args:
            sinks: One sink per env.
            batched: Keep the envs in arrays (`VectorSequenceAdder`) or give each its
                `SequenceAdder` (`PerEnvAdders`); None: the faster for this many envs
                (`replay.env_adders.make_env_adders`).
        """
        return make_env_adders(sinks, self.layout, batched=batched, **self._adder_options())

    def _adder_options(self) -> dict[str, Any]:
        """The config's settings both adders take (discount, priority mixing, rescaling,
        double Q, reward normalisation)."""
        config = self.config
        return {
            "gamma": config.gamma,
            "priority_eta": config.priority_eta,
            "rescaling": config.enable_rescaling,
            "double_q": config.enable_double_dqn,
            "normalize_rewards": config.normalize_rewards,
        }

    def make_actor(
        self, policy: Policy, adder: SequenceAdder | None, epsilon: float, seed: int | None
    ) -> R2D2Actor:
        """An actor acting with `policy` and recording into `adder` (None: play only).

        Args:
            policy: The acting network (`make_policy`).
            adder: Where transitions go; None for evaluation.
            epsilon: The actor's exploration rate.
            seed: Seed of its exploration randomness.
        """
        return R2D2Actor(self.config, policy, adder, epsilon, seed)

    def make_vector_actor(
        self,
        policy: Policy,
        adder: VectorAdder | None,
        epsilons: Sequence[float],
        seeds: Sequence[int | None] | None = None,
    ) -> R2D2VectorActor:
        """An actor of `len(epsilons)` envs acting with one batched pass of `policy`.

        Args:
            policy: The acting network (`make_policy`), shared by the envs.
            adder: The envs' adder (`make_vector_adder`); None for evaluation.
            epsilons: Each env's exploration rate.
            seeds: Seed of each env's exploration randomness.
        """
        return R2D2VectorActor(self.config, policy, adder, epsilons, seeds)

    def make_replay(self) -> SequenceReplay:
        """An empty prioritized replay of `config.memory_capacity` sequences."""
        return SequenceReplay(
            self.layout,
            self.config.memory_capacity,
            self.config.priority_exponent,
            seed=self.config.seed,
            compression=self.config.frame_compression,
            compression_ratio=self.config.frame_compression_ratio,
        )

    def make_optimizer(self) -> Any:
        """Adam with the config's learning rate (annealed linearly over learner updates
        when `learning_rate_final` is set), epsilon and gradient-norm clip."""
        from r2d2_agent.compat import keras

        config = self.config
        kwargs = {} if config.clipnorm is None else {"global_clipnorm": config.clipnorm}
        learning_rate: Any = config.learning_rate
        if config.learning_rate_final is not None:
            learning_rate = keras.optimizers.schedules.PolynomialDecay(
                initial_learning_rate=config.learning_rate,
                decay_steps=config.learning_rate_anneal_updates,
                end_learning_rate=config.learning_rate_final,
                power=1.0,
            )
        return keras.optimizers.Adam(
            learning_rate=learning_rate, epsilon=config.adam_epsilon, **kwargs
        )

    def make_learner(
        self, optimizer: Any = None, replay: SequenceReplay | None = None
    ) -> R2D2Learner:
        """A learner with fresh online and target networks, and with
        `policy_average_updates` the average's (imports TensorFlow).

        Args:
            optimizer: A Keras optimizer; `make_optimizer()` when None.
            replay: The replay to learn from; `make_replay()` when None.
        """
        from r2d2_agent.networks.keras_net import R2D2Network
        from r2d2_agent.roles.learner import R2D2Learner

        learner = R2D2Learner(
            self.config,
            online=R2D2Network(self.config, self.image_model, name="online"),
            target=R2D2Network(self.config, self.image_model, name="target"),
            optimizer=optimizer if optimizer is not None else self.make_optimizer(),
            replay=replay if replay is not None else self.make_replay(),
            average=(
                R2D2Network(self.config, self.image_model, name="average")
                if self.config.policy_average_updates > 0
                else None
            ),
        )
        learner.policy_factory = self.make_policy
        return learner
