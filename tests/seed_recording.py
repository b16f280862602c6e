"""A callback that writes down each actor's env seeds, for tests of a resumed run's seeds.

The callback runs in the actor processes (multiprocessing or Ray), so it writes to files
that the test reads back in its own process.
"""

from __future__ import annotations

import json
import os

from r2d2_agent.callbacks import R2D2Callback


class RecordActorSeeds(R2D2Callback):
    """Writes each actor's env seeds, as it begins, to `directory/actor-<index>.json`."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = directory

    def on_r2d2_actor_begin(self, actor_index, runner):
        path = os.path.join(self.directory, f"actor-{actor_index}.json")
        with open(path, "w") as f:
            json.dump(runner.env_seeds, f)


def read_actor_seeds(directory: str, nb_actors: int) -> dict[int, list[int | None]]:
    """The env seeds each of `nb_actors` actors wrote, by actor index."""
    seeds = {}
    for index in range(nb_actors):
        with open(os.path.join(directory, f"actor-{index}.json")) as f:
            seeds[index] = json.load(f)
    return seeds
