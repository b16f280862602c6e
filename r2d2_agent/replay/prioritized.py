"""Proportional prioritized replay over fixed-shape sequences.

Implements the proportional variant of prioritized experience replay
(Schaul et al., 2016, "Prioritized Experience Replay") for the sequences that
R2D2 learns from. Each stored item is a mapping from field name to an array of
a fixed shape; the replay knows nothing about what the fields mean.

Slot `i` is sampled with probability `P(i) = p_i^alpha / sum_k p_k^alpha`
where `p_i = priority_i + PRIORITY_EPSILON`.

Items are named by keys, not slots: a key is the slot index plus the slot's generation
(how many times it was written before), so a priority written back for an item that has
since been overwritten (a learner that trains while actors add) is recognised and skipped
instead of landing on the new item. Importance-sampling weights are
not computed here: `PrioritizedSequenceReplay.sample` returns `P(i)` of
the sampled slots, and `len(replay)` gives `N`, which is all a caller needs
to form `w_i = (N * P(i))^-beta / max_j w_j`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from r2d2_agent.replay.state_io import (
    ReplayStateDict,
    copy_into,
    expect_array,
    expect_float,
    expect_int,
    expect_stored,
    expect_str,
    load_array,
)
from r2d2_agent.replay.sum_tree import SumTree

logger = logging.getLogger(__name__)

__all__ = ["PRIORITY_EPSILON", "FieldSpec", "PrioritizedSequenceReplay", "ReplayStateDict"]

_SLOT_BITS = 32
_SLOT_MASK = (1 << _SLOT_BITS) - 1

PRIORITY_EPSILON: float = 1e-6
"""Added to every raw priority before the exponent is applied, so that an item
whose priority (e.g. TD error) is exactly zero still has a non-zero chance of
being replayed and the tree total never drops to zero once something is
stored."""

FieldSpec = Mapping[str, tuple[tuple[int, ...], np.dtype]]
"""Field name -> (per-item shape, dtype)."""


def _generator(text: str, key: str) -> np.random.Generator:
    """A `default_rng()` generator set to the JSON state `text` (from `export_state`)."""
    generator = np.random.default_rng()
    try:
        state = json.loads(text)
        if not isinstance(state, dict):
            raise ValueError(f"not a JSON object: {text[:40]!r}")
        if state.get("bit_generator") != generator.bit_generator.state["bit_generator"]:
            raise ValueError(
                f"{state.get('bit_generator')!r} state, the replay samples with "
                f"{generator.bit_generator.state['bit_generator']!r}"
            )
        generator.bit_generator.state = state
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"replay state {key!r} is not a generator state ({exc})") from exc
    return generator


def _check_priorities(priorities: np.ndarray) -> np.ndarray:
    """Returns priorities as a flat float64 array; rejects NaN/inf/negative."""
    p = np.asarray(priorities, dtype=np.float64).reshape(-1)
    bad = ~np.isfinite(p) | (p < 0.0)
    if bad.any():
        raise ValueError(
            f"priorities must be non-negative and finite, got {p[bad][0]!r} "
            f"at position {int(np.flatnonzero(bad)[0])}"
        )
    return p


class PrioritizedSequenceReplay:
    """Fixed-capacity FIFO ring of sequences sampled in proportion to priority.

    Storage is preallocated: one numpy array of shape `(capacity, *shape)` per
    field. When full, new items overwrite the oldest slot. Sampling is
    stratified: the total priority mass is split into `batch_size` equal
    segments and one uniform draw is taken in each, which lowers the variance
    of a batch compared with independent draws while keeping every draw's
    marginal probability proportional to priority.

    Args:
        capacity: Maximum number of sequences stored, at least 1.
        spec: Field name -> `(shape, dtype)` of one item of that field.
        priority_exponent: `alpha` >= 0; 0 gives uniform sampling and 1 fully
            proportional sampling.
        seed: Seed of the replay's own `np.random.Generator`.

    Raises:
        ValueError: On an invalid capacity, exponent, or field spec (the
            message names the offending field and value).
    """

    def __init__(
        self,
        capacity: int,
        spec: FieldSpec,
        priority_exponent: float,
        seed: int | None = None,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise ValueError(f"capacity must be an int, got {capacity!r}")
        if not 1 <= capacity <= _SLOT_MASK:
            raise ValueError(f"capacity must be in [1, 2**32 - 1], got {capacity}")
        alpha = float(priority_exponent)
        if not np.isfinite(alpha) or alpha < 0.0:
            raise ValueError(
                f"priority_exponent must be finite and >= 0, got {priority_exponent!r}"
            )
        if not spec:
            raise ValueError("spec must define at least one field")
        self._capacity = int(capacity)
        self._alpha = alpha
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._storage: dict[str, np.ndarray] = {}
        for name, field in spec.items():
            try:
                shape, dtype = field
                shape = tuple(int(d) for d in shape)
                dtype = np.dtype(dtype)
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"field {name!r}: spec must be (shape tuple, dtype), got {field!r}"
                ) from err
            if any(d < 0 for d in shape):
                raise ValueError(f"field {name!r}: negative dimension in shape {shape}")
            self._shapes[name] = shape
            self._storage[name] = np.zeros((self._capacity, *shape), dtype=dtype)
        self._tree = SumTree(self._capacity)
        # Times each slot was written, minus one (-1: never); part of every item's key.
        self._generation = np.full(self._capacity, -1, dtype=np.int64)
        self._rng = np.random.default_rng(seed)
        self._next = 0
        self._size = 0  # slots ever written (a prefix of the ring)
        self._live = np.zeros(self._capacity, dtype=bool)  # written and not invalidated
        self._count = 0  # live items
        logger.debug(
            "PrioritizedSequenceReplay(capacity=%d, alpha=%g, fields=%s): %.1f MiB",
            self._capacity,
            self._alpha,
            list(self._shapes),
            sum(a.nbytes for a in self._storage.values()) / 2**20,
        )

    @property
    def capacity(self) -> int:
        """Maximum number of sequences stored."""
        return self._capacity

    @property
    def priority_exponent(self) -> float:
        """The exponent `alpha` applied to raw priorities."""
        return self._alpha

    @property
    def nbytes(self) -> int:
        """Bytes of the preallocated storage, sum tree and bookkeeping arrays."""
        storage = sum(a.nbytes for a in self._storage.values())
        return storage + self._tree.nbytes + self._generation.nbytes + self._live.nbytes

    def __len__(self) -> int:
        """Number of items that can be sampled (stored and not invalidated)."""
        return self._count

    def _keys(self, slots: np.ndarray) -> np.ndarray:
        """The current keys of `slots`."""
        return (self._generation[slots] << _SLOT_BITS) | slots

    def _leaf_values(self, priorities: np.ndarray) -> np.ndarray:
        """Maps raw priorities to sum-tree leaf values `(p + eps) ** alpha`."""
        return (priorities + PRIORITY_EPSILON) ** self._alpha

    def _check_fields(
        self, sequences: Mapping[str, np.ndarray], batch: int | None
    ) -> dict[str, np.ndarray]:
        """Validates field names, shapes and dtype kinds of one item or a batch."""
        missing = self._shapes.keys() - sequences.keys()
        if missing:
            raise ValueError(f"missing field(s) {sorted(missing)}; expected {sorted(self._shapes)}")
        extra = sequences.keys() - self._shapes.keys()
        if extra:
            raise ValueError(
                f"unexpected field(s) {sorted(extra)}; expected {sorted(self._shapes)}"
            )
        arrays = {}
        for name, shape in self._shapes.items():
            value = np.asarray(sequences[name])
            expected = shape if batch is None else (batch, *shape)
            if value.shape != expected:
                raise ValueError(
                    f"field {name!r}: expected shape {expected}, got shape {value.shape}"
                )
            dtype = self._storage[name].dtype
            if not np.can_cast(value.dtype, dtype, casting="same_kind"):
                raise ValueError(
                    f"field {name!r}: cannot store dtype {value.dtype} in a {dtype} field"
                )
            arrays[name] = value
        return arrays

    def add(self, sequence: Mapping[str, np.ndarray], priority: float) -> int:
        """Stores one sequence, overwriting the oldest one when full.

        Args:
            sequence: Field name -> array of that field's shape.
            priority: Raw non-negative priority (e.g. a TD-error mix).

        Returns:
            The item's key (an int; `update_priorities` accepts it). It equals the slot
            index until the slot is overwritten.

        Raises:
            ValueError: On a missing or extra field, a wrong shape (naming the
                field, expected and got shape), or a NaN/negative priority.
        """
        arrays = self._check_fields(sequence, batch=None)
        p = _check_priorities(priority)
        if p.size != 1:
            raise ValueError(f"add() takes one scalar priority, got {p.size} values")
        slot = self._next
        # The tree validates the leaf value (e.g. overflow), so update it
        # before touching storage: a rejected add leaves the replay unchanged.
        self._tree.set(slot, float(self._leaf_values(p)[0]))
        for name, value in arrays.items():
            self._storage[name][slot] = value
        self._generation[slot] += 1
        self._count += not self._live[slot]
        self._live[slot] = True
        self._next = (slot + 1) % self._capacity
        self._size = min(self._size + 1, self._capacity)
        return int(self._keys(np.int64(slot)))

    def add_batch(self, sequences: Mapping[str, np.ndarray], priorities: np.ndarray) -> np.ndarray:
        """Stores a batch of sequences; same result as calling `add` in order.

        Args:
            sequences: Field name -> array of shape `(B, *shape)`.
            priorities: `B` raw non-negative priorities.

        Returns:
            Int64 array of the `B` items' keys, in order (if `B > capacity` the
            earlier items are overwritten by later ones within this call, just as
            with repeated `add`, and their keys are already stale).

        Raises:
            ValueError: As for `add`.
        """
        p = _check_priorities(priorities)
        if np.ndim(priorities) != 1:
            raise ValueError(f"priorities must be 1-D, got shape {np.shape(priorities)}")
        n = p.size
        arrays = self._check_fields(sequences, batch=n)
        start = self._next
        position = start + np.arange(n, dtype=np.int64)
        slots = position % self._capacity
        # Only the last `capacity` items survive; writing just those keeps
        # every slot written once, so no fancy assignment has duplicates.
        keep = slice(max(0, n - self._capacity), n)
        self._tree.update(slots[keep], self._leaf_values(p[keep]))
        for name, value in arrays.items():
            self._storage[name][slots[keep]] = value[keep]
        # The j-th item is the w-th write of its slot in this call: slots from `start` on
        # are first written in lap 0, the ones before it in lap 1.
        writes = position // self._capacity - (slots < start)
        generations = self._generation[slots] + 1 + writes
        np.add.at(self._generation, slots, 1)
        written = np.unique(slots[keep])
        self._count += int((~self._live[written]).sum())
        self._live[written] = True
        self._next = (self._next + n) % self._capacity
        self._size = min(self._size + n, self._capacity)
        return (generations << _SLOT_BITS) | slots

    def sample(self, batch_size: int) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """Draws a stratified, priority-proportional batch (with replacement).

        Args:
            batch_size: Number of sequences to draw, at least 1.

        Returns:
            `(keys, batch, probabilities)`: the int64 keys of the drawn items,
            shape `(batch_size,)` (pass them to `update_priorities`); field name
            -> array of shape `(batch_size, *shape)` (a copy); and the float64
            sampling probability `p_i^alpha / sum_k p_k^alpha` of each drawn item.

        Raises:
            ValueError: If the replay is empty or `batch_size < 1`.
        """
        if self._count == 0:
            raise ValueError("cannot sample from an empty PrioritizedSequenceReplay; add() first")
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        batch_size = int(batch_size)
        total = self._tree.total
        segment = total / batch_size
        # One uniform draw inside each of `batch_size` equal segments of mass.
        targets = (np.arange(batch_size) + self._rng.random(batch_size)) * segment
        np.minimum(targets, total, out=targets)
        slots = self._tree.find(targets)
        probabilities = self._tree.get(slots) / total
        batch = {name: store[slots] for name, store in self._storage.items()}
        return self._keys(slots), batch, probabilities

    # Export and restore -----------------------------------------------------------------

    def export_state(self, prefix: str = "", copy: bool = True) -> ReplayStateDict:
        """The replay's whole state as flat arrays and scalars (`restore_state` takes it).

        Keys (each after `prefix`): `capacity`, `priority_exponent`, `next` (the next slot
        written), `size` (slots written so far: a prefix of the ring), `count` (live
        items), `rng` (the sampling generator's state, JSON text); arrays `leaves` (the
        sum tree's `capacity` float64 leaves, `(p + eps) ** alpha`, 0 for empty or
        invalidated slots), `generation` (int64, -1 for never written), `live` (bool), and
        `items.<field>` (the `size` written slots of each field).

        Args:
            prefix: Put before every key.
            copy: Copy the arrays (False: views of the live storage, valid only until the
                replay changes, e.g. to write them to a file at once).
        """
        size = self._size

        def out(array: np.ndarray) -> np.ndarray:
            return array.copy() if copy else array

        state: ReplayStateDict = {
            "capacity": self._capacity,
            "priority_exponent": self._alpha,
            "next": self._next,
            "size": size,
            "count": self._count,
            "rng": json.dumps(self._rng.bit_generator.state),
            "leaves": self._tree.leaves(),
            "generation": out(self._generation),
            "live": out(self._live),
        }
        for name, store in self._storage.items():
            state[f"items.{name}"] = out(store[:size])
        return {prefix + key: value for key, value in state.items()}

    def check_state(self, state: Mapping[str, Any], prefix: str = "") -> None:
        """Raises unless `state` (from `export_state`) fits this replay.

        Raises:
            ValueError: Naming the key: a missing or extra field, a capacity, exponent,
                shape or dtype other than this replay's, or values that contradict each
                other (counts, generations, priorities of empty slots).
        """
        p = prefix
        capacity = expect_int(state, p + "capacity")
        if capacity != self._capacity:
            raise ValueError(
                f"replay state holds {capacity} sequences ({p}capacity), this replay "
                f"{self._capacity}"
            )
        alpha = expect_float(state, p + "priority_exponent")
        if alpha != self._alpha:
            raise ValueError(
                f"replay state has priority_exponent {alpha}, this replay {self._alpha}"
            )
        size = expect_int(state, p + "size", 0, capacity)
        if size < capacity:  # not yet full: the ring was written from slot 0 up to `next`
            expect_int(state, p + "next", size, size)
        else:
            expect_int(state, p + "next", 0, capacity - 1)
        count = expect_int(state, p + "count", 0, size)
        leaves = expect_array(state, p + "leaves", (capacity,), np.float64)
        generation = expect_array(state, p + "generation", (capacity,), np.int64)
        live = expect_array(state, p + "live", (capacity,), np.bool_)
        fields = {key[len(p + "items.") :] for key in state if key.startswith(p + "items.")}
        if fields != set(self._shapes):
            raise ValueError(
                f"replay state has fields {sorted(fields)}, this replay {sorted(self._shapes)}"
            )
        for name, shape in self._shapes.items():
            expect_stored(state, f"{p}items.{name}", (size, *shape), self._storage[name].dtype)
        if int(live.sum()) != count:
            raise ValueError(f"replay state {p}count={count} but {int(live.sum())} live slots")
        if live[size:].any() or (generation[size:] != -1).any() or (generation[:size] < 0).any():
            raise ValueError(
                f"replay state {p}live/{p}generation mark slots beyond the {size} written"
            )
        if not np.isfinite(leaves).all() or (leaves < 0).any() or (leaves[~live] != 0).any():
            raise ValueError(f"replay state {p}leaves must be finite, >= 0, and 0 for empty slots")
        _generator(expect_str(state, p + "rng"), p + "rng")

    def restore_state(self, state: Mapping[str, Any], prefix: str = "") -> None:
        """Replaces the replay's contents with an exported state: items, priorities (the
        sum tree is rebuilt from its leaves, node for node), keys' generations, the write
        cursor and the sampling generator. Sampling then draws exactly what the exporting
        replay would have drawn. Stored arrays (`StoredArray`, e.g. a checkpoint's
        datasets) are read straight into the replay's own arrays.

        Raises:
            ValueError: As `check_state`; the replay is then unchanged. (An error reading
                a stored array, e.g. a failed checksum, leaves it partly restored.)
        """
        self.check_state(state, prefix)
        p = prefix
        size = int(state[p + "size"])
        generator = _generator(state[p + "rng"], p + "rng")
        self._tree.set_leaves(load_array(state[p + "leaves"]))
        for name, store in self._storage.items():
            copy_into(store[:size], state[f"{p}items.{name}"])
            store[size:] = 0
        copy_into(self._generation, state[p + "generation"])
        copy_into(self._live, state[p + "live"])
        self._next = int(state[p + "next"])
        self._size = size
        self._count = int(state[p + "count"])
        self._rng = generator

    def invalidate(self, slots: np.ndarray) -> None:
        """Makes the items in `slots` unsampleable until their slots are written again.

        Their keys go stale (a later priority write-back for them is skipped), their
        sampling probability drops to 0, and `len` no longer counts them. Used when the
        data an item refers to is gone (e.g. frames overwritten in a frame store).

        Args:
            slots: Slot indices (`key & 0xFFFFFFFF` of the items' keys).
        """
        idx = np.unique(np.asarray(slots, dtype=np.int64).reshape(-1))
        idx = idx[self._live[idx]]
        if idx.size == 0:
            return
        self._tree.update(idx, np.zeros(idx.size))
        self._generation[idx] += 1
        self._live[idx] = False
        self._count -= int(idx.size)

    def column(self, name: str) -> np.ndarray:
        """A read-only view of field `name` over all slots (written or not)."""
        view = self._storage[name].view()
        view.flags.writeable = False
        return view

    @property
    def live(self) -> np.ndarray:
        """A read-only boolean view: which slots hold a sampleable item."""
        view = self._live.view()
        view.flags.writeable = False
        return view

    @staticmethod
    def slots_of(keys: np.ndarray) -> np.ndarray:
        """The slot index of each key."""
        return np.asarray(keys, dtype=np.int64) & _SLOT_MASK

    def update_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> int:
        """Replaces the priorities of stored items (e.g. after a learner step).

        A key whose slot has been overwritten since the key was handed out is
        skipped: the new item keeps its own priority.

        Args:
            keys: Keys returned by `sample`, `add` or `add_batch`.
            priorities: Raw non-negative priorities, one per key; the exponent is
                applied here. With duplicate keys the last wins.

        Returns:
            The number of priorities written (the keys that were still current).

        Raises:
            ValueError: On a length mismatch, a key that names no item this replay
                ever stored, or a NaN/infinite/negative priority.
        """
        p = _check_priorities(priorities)
        key = np.asarray(keys).reshape(-1)
        if key.shape != p.shape:
            raise ValueError(f"got {key.size} keys but {p.size} priorities; they must match")
        if key.size and not np.issubdtype(key.dtype, np.integer):
            raise ValueError(f"keys must be integers, got dtype {key.dtype}")
        key = key.astype(np.int64, copy=False)
        slots = key & _SLOT_MASK
        generations = key >> _SLOT_BITS
        if key.size and (key.min() < 0 or slots.max() >= self._size):
            bad = (key < 0) | (slots >= self._size)
            raise ValueError(
                f"key {int(key[bad][0])} names no stored sequence (stored: {self._size})"
            )
        latest = self._generation[slots]
        if (generations > latest).any():
            raise ValueError(
                f"key {int(key[generations > latest][0])} names no stored sequence "
                f"(stored: {self._size})"
            )
        current = generations == latest
        if current.all():
            self._tree.update(slots, self._leaf_values(p))
        else:
            self._tree.update(slots[current], self._leaf_values(p[current]))
        return int(current.sum())
