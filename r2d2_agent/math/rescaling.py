"""Invertible value rescaling h (Pohlen et al. 2018), as used by R2D2.

`h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x` squashes returns so that one network can
fit games whose rewards differ by orders of magnitude; targets are formed in return units
through the exact inverse `h^-1`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "RESCALE_EPS",
    "inverse_rescale",
    "inverse_rescale_float",
    "rescale",
    "rescale_float",
    "sign_float",
]

RESCALE_EPS: float = 1e-3
"""The `eps` of the value rescaling `h` (R2D2 uses 1e-3)."""


def _float_array(x: ArrayLike) -> np.ndarray:
    """Returns `x` as a floating array, keeping float32/float64 as given."""
    a = np.asarray(x)
    return a if np.issubdtype(a.dtype, np.floating) else a.astype(np.float64)


def rescale(x: ArrayLike) -> np.ndarray:
    """Value rescaling `h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x`.

    `sqrt(|x| + 1) - 1` is evaluated as `|x| / (sqrt(|x| + 1) + 1)` to avoid cancellation
    near 0. The floating dtype of `x` is kept (integers become float64).

    Args:
        x: Values in the original (return) scale; array or scalar.

    Returns:
        `h(x)` with the shape of `x`.
    """
    x = _float_array(x)
    a = np.abs(x)
    return np.sign(x) * (a / (np.sqrt(a + 1) + 1)) + x.dtype.type(RESCALE_EPS) * x


def inverse_rescale(x: ArrayLike) -> np.ndarray:
    """Exact inverse of `rescale`.

    `h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)`.

    Evaluated in the algebraically identical, cancellation-free form
    `d = 2|x| / ((1 + 2 eps) + sqrt((1 + 2 eps)^2 + 4 eps |x|))` (`d` is
    `sqrt(|h^-1(x)| + 1) - 1`, the positive root of `eps d^2 + (1 + 2 eps) d = |x|`),
    then `h^-1(x) = sign(x) d (d + 2)`. The floating dtype of `x` is kept (integers
    become float64).

    Args:
        x: Values in the rescaled space; array or scalar.

    Returns:
        `h^-1(x)` with the shape of `x`.
    """
    x = _float_array(x)
    eps = x.dtype.type(RESCALE_EPS)
    a = np.abs(x)
    b = 1 + 2 * eps
    d = 2 * a / (b + np.sqrt(b * b + 4 * eps * a))
    return np.sign(x) * d * (d + 2)


# One float at a time: the same float64 operations in the same order as the numpy
# functions above (so the same bits, NaN, infinities and both zeros included), for the
# adder, which computes a sequence's initial priority once per `period` env steps of every
# env, where numpy calls on a few elements cost more than the env step.


def sign_float(x: float) -> float:
    """`np.sign` of one float: 1.0, -1.0, 0.0 for both zeros, NaN for NaN."""
    return 1.0 if x > 0.0 else -1.0 if x < 0.0 else 0.0 if x == 0.0 else x


def rescale_float(x: float) -> float:
    """`rescale` of one float64, bit for bit."""
    a = abs(x)
    return sign_float(x) * (a / (math.sqrt(a + 1) + 1)) + RESCALE_EPS * x


def inverse_rescale_float(x: float) -> float:
    """`inverse_rescale` of one float64, bit for bit."""
    eps = RESCALE_EPS
    a = abs(x)
    b = 1 + 2 * eps
    d = 2 * a / (b + math.sqrt(b * b + 4 * eps * a))
    return sign_float(x) * d * (d + 2)
