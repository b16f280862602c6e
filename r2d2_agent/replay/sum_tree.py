r"""Array-based binary sum tree for proportional prioritized sampling.

The tree stores one non-negative float64 value per leaf and keeps, in every
internal node, the sum of the two nodes below it. Updating a leaf and finding
the leaf that holds a given amount of cumulative mass both take
`O(log N)` time, and both operations are vectorised over a batch with numpy:
the only Python loop is over the depth of the tree (about `log2 N`).

The nodes live in one flat array indexed like a binary heap, starting at 1
(slot 0 is unused). With `capacity = 5` the leaf count is rounded up to the
next power of two, `P = 8`, and the array has `2 * P = 16` slots::

    depth 0                       [1] = total
                              /                 \
    depth 1             [2]                         [3]
                      /     \                    /      \
    depth 2        [4]        [5]            [6]          [7]
                  /   \      /   \          /   \        /   \
    depth 3     [8]   [9]  [10]  [11]    [12]  [13]   [14]  [15]
    leaf index:  0     1     2     3       4   (5)    (6)   (7)

Node `k` has children `2k` and `2k + 1` and parent `k // 2`; leaf `i`
is node `P + i`. Leaves `capacity .. P - 1` (in parentheses) are padding
and always hold zero, so they can never be found.
"""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["SumTree"]

# Tree levels with at most this many nodes are recomputed in full by update().
_DENSE_LEVEL_WIDTH = 1024


class SumTree:
    """Binary sum tree over `capacity` float64 leaves, all initially zero.

    Attributes are exposed read-only through the `capacity` and `total`
    properties. Internal sums are always recomputed from the two children
    (never adjusted by adding a delta), so they carry no accumulated
    round-off drift however many updates are made.

    Args:
        capacity: Number of leaves, at least 1.

    Raises:
        ValueError: If `capacity` is not a positive integer.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
            raise ValueError(f"capacity must be an int, got {capacity!r}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = int(capacity)
        # Number of leaves rounded up to a power of two, and the tree depth.
        self._depth = max(0, (self._capacity - 1).bit_length())
        self._first_leaf = 1 << self._depth
        self._nodes = np.zeros(2 * self._first_leaf, dtype=np.float64)
        # Largest leaf value for which no sum in the tree can overflow.
        self._max_value = float(np.finfo(np.float64).max) / self._first_leaf
        # Scratch space for de-duplicating the indices of one update() call.
        self._stamp = np.zeros(self._capacity, dtype=np.int64)
        logger.debug(
            "SumTree(capacity=%d): %d padded leaves, depth %d",
            self._capacity,
            self._first_leaf,
            self._depth,
        )

    @property
    def capacity(self) -> int:
        """Number of leaves that can hold a value."""
        return self._capacity

    @property
    def nbytes(self) -> int:
        """Bytes of the tree's arrays (nodes and scratch space)."""
        return self._nodes.nbytes + self._stamp.nbytes

    @property
    def total(self) -> float:
        """Sum of all leaf values (the value of the root)."""
        return float(self._nodes[1])

    def _bad_value(self, value: float, leaf: int) -> ValueError:
        """The error for a leaf value the tree refuses (negative, NaN, inf, too large)."""
        return ValueError(
            f"sum tree values must be non-negative, finite and <= {self._max_value:.3g}, "
            f"got {value} for leaf {leaf}"
        )

    def _check_indices(self, indices: np.ndarray) -> np.ndarray:
        """Returns `indices` as a flat int64 array after a range check."""
        idx = np.asarray(indices)
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        bad = (idx < 0) | (idx >= self._capacity)
        if bad.any():
            raise ValueError(f"leaf index {int(idx[bad][0])} out of range [0, {self._capacity})")
        return idx

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Sets leaf values and refreshes the sums above them.

        If an index appears more than once, the value given last wins, exactly
        as if the updates had been applied one after another.

        Args:
            indices: Integer leaf indices in `[0, capacity)`.
            values: Non-negative finite values, same number as `indices`, each
                at most `float64 max / 2**depth` so that the total cannot
                overflow.

        Raises:
            ValueError: On an out-of-range index, a length mismatch, or a
                negative, NaN, infinite or too large value (the message names
                it); the tree is then left unchanged.
        """
        idx = self._check_indices(indices)
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        if vals.shape != idx.shape:
            raise ValueError(f"got {idx.size} indices but {vals.size} values; they must match")
        # NaN fails both comparisons; the upper bound also rejects inf.
        bad = ~(vals >= 0.0) | ~(vals <= self._max_value)
        if bad.any():
            raise self._bad_value(float(vals[bad][0]), int(idx[bad][0]))
        if idx.size == 0:
            return
        # De-duplicate, keeping the last occurrence of each index: numpy does
        # not promise which of several writes to one position in a fancy
        # assignment survives, so without this "last wins" would be an
        # accident of the implementation. ufunc.at is unbuffered (every
        # occurrence is applied), so after maximum.at each index's stamp is
        # its last position in the batch, and only that position is kept.
        stamp = self._stamp
        stamp[idx] = -1
        positions = np.arange(idx.size)
        np.maximum.at(stamp, idx, positions)
        last = stamp[idx] == positions
        nodes = self._nodes
        node = idx[last] + self._first_leaf
        nodes[node] = vals[last]
        # Walk up one level at a time and recompute each touched parent from
        # its two children (never apply a delta: a parent reached twice is
        # just written twice with the same value, and no drift accumulates).
        # Levels narrower than _DENSE_LEVEL_WIDTH are recomputed whole with
        # three slices, which costs less than the fancy indexing.
        width = self._first_leaf >> 1  # number of nodes on the parents' level
        while width > _DENSE_LEVEL_WIDTH:
            node >>= 1
            nodes[node] = nodes[2 * node] + nodes[2 * node + 1]
            width >>= 1
        while width >= 1:
            np.add(
                nodes[2 * width : 4 * width : 2],
                nodes[2 * width + 1 : 4 * width : 2],
                out=nodes[width : 2 * width],
            )
            width >>= 1

    def set(self, index: int, value: float) -> None:
        """Sets one leaf and refreshes the sums above it: `update([index], [value])` in
        Python scalars, the same sums bit for bit (IEEE float64 additions of the same two
        children), without numpy's per-call costs (about 1.5 instead of 27 microseconds
        at 4,096 leaves): what adding one sequence to a replay takes.

        Args:
            index: Integer leaf index in `[0, capacity)`.
            value: A value as `update` accepts it.

        Raises:
            ValueError: As for `update`; the tree is then left unchanged.
        """
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ValueError(f"indices must be integers, got {index!r}")
        leaf = int(index)
        if not 0 <= leaf < self._capacity:
            raise ValueError(f"leaf index {leaf} out of range [0, {self._capacity})")
        v = float(value)
        if not 0.0 <= v <= self._max_value:  # NaN fails too
            raise self._bad_value(v, leaf)
        nodes = memoryview(self._nodes)  # Python floats in and out
        node = leaf + self._first_leaf
        nodes[node] = v
        node >>= 1
        while node:
            nodes[node] = nodes[2 * node] + nodes[2 * node + 1]
            node >>= 1

    def leaves(self) -> np.ndarray:
        """A copy of the `capacity` leaf values (what `set_leaves` restores)."""
        return self._nodes[self._first_leaf : self._first_leaf + self._capacity].copy()

    def set_leaves(self, values: np.ndarray) -> None:
        """Replaces every leaf value and recomputes all sums.

        Every internal node is always the sum of its two children, so a tree restored
        from the leaves of another one equals it node for node (and finds the same
        leaves for the same targets).

        Args:
            values: `capacity` values, each as `update` accepts them.

        Raises:
            ValueError: On a wrong length or a value `update` refuses; the tree is then
                left unchanged.
        """
        vals = np.asarray(values, dtype=np.float64)
        if vals.shape != (self._capacity,):
            raise ValueError(
                f"set_leaves needs {self._capacity} values, got an array of shape {vals.shape}"
            )
        bad = ~(vals >= 0.0) | ~(vals <= self._max_value)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise self._bad_value(float(vals[i]), i)
        self._nodes[:] = 0.0
        self.update(np.arange(self._capacity), vals)

    def get(self, indices: np.ndarray) -> np.ndarray:
        """Returns the values of the given leaves.

        Args:
            indices: Integer leaf indices in `[0, capacity)`.

        Returns:
            A float64 array shaped like `indices`.

        Raises:
            ValueError: On an out-of-range index.
        """
        shape = np.shape(indices)
        idx = self._check_indices(indices)
        return self._nodes[idx + self._first_leaf].reshape(shape)

    def find(self, targets: np.ndarray) -> np.ndarray:
        """Finds, for each target mass `u`, the leaf that contains it.

        Leaf `i` is returned when `prefix(i) <= u < prefix(i) + value(i)`,
        where `prefix(i)` is the sum of leaves `0 .. i-1`. A zero-valued
        leaf is never returned. Float round-off can leave `u` slightly beyond
        the mass of the subtree it is routed to (most often at the right edge,
        `u` close to `total`) and so land it on a zero leaf, possibly one
        never written; such targets are walked again without ever entering a
        zero-mass subtree, which ends them on the nearest positive leaf to the
        left. `u == total` is accepted and maps to the right-most positive
        leaf.

        Args:
            targets: Masses in `[0, total]`.

        Returns:
            An int64 array of leaf indices shaped like `targets`.

        Raises:
            ValueError: If the tree is empty (total is zero) or a target is
                NaN, negative or larger than `total`.
        """
        total = self._nodes[1]
        if total <= 0.0:
            raise ValueError("cannot sample from an empty sum tree (total priority is 0)")
        shape = np.shape(targets)
        u = np.array(targets, dtype=np.float64).reshape(-1)
        bad = ~(u >= 0.0) | ~(u <= total)
        if bad.any():
            raise ValueError(f"target {float(u[bad][0])} is outside [0, total={float(total)}]")
        leaves = self._descend(u, guarded=False)
        # Round-off can, rarely, route a target into a zero-mass subtree; the
        # guarded descent (slower: it also reads the right child) redoes those.
        stray = self._nodes[leaves + self._first_leaf] <= 0.0
        if stray.any():
            leaves[stray] = self._descend(u[stray], guarded=True)
        return leaves.reshape(shape)

    def _descend(self, u: np.ndarray, guarded: bool) -> np.ndarray:
        """Walks from the root to a leaf for each target; returns leaf indices.

        Unguarded, a target goes right whenever it is not below the left
        child's mass. Guarded, it goes right only if the right child also has
        positive mass; since the root has positive mass, every node visited
        then does too, and so does the leaf reached.
        """
        nodes = self._nodes
        u = u.copy()
        node = np.ones(u.shape, dtype=np.int64)
        for _ in range(self._depth):
            node += node  # left child
            left_mass = nodes[node]
            go_right = u >= left_mass
            if guarded:
                go_right &= nodes[node + 1] > 0.0
            u -= left_mass * go_right
            node += go_right
        return node - self._first_leaf
