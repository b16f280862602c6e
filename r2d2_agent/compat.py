"""Make keras-rl2 1.0.5 importable on current TensorFlow (2.16+) through tf-keras.

keras-rl2 is written against Keras 2. Since TF 2.16 `tensorflow.keras` is Keras 3 unless
`TF_USE_LEGACY_KERAS=1` is set *before* TensorFlow is imported, in which case it routes to the
`tf_keras` package. This module sets that variable, checks that it took effect, adds the single
attribute keras-rl needs (`tensorflow.keras.__version__`) and imports the keras-rl modules the
package uses. It never imports `rl.agents`: that package calls
`tf.compat.v1.disable_eager_execution()` for the whole process.

Everything else in `r2d2_agent` should take TensorFlow, Keras and keras-rl from here::

    from r2d2_agent.compat import keras, rl_callbacks, rl_core, tf

It also keeps TensorFlow's native start-up noise out of every process that imports
TensorFlow through it (the manager's children included), unless `R2D2_TF_VERBOSE=1`.
Measured on TF 2.21 (CPU-only machine): `TF_CPP_MIN_LOG_LEVEL=2` (set here if unset) hides
the C++ INFO/WARNING logs *after* start-up, but four lines come before TensorFlow reads
it and no variable silences them: absl's "All log messages before absl::InitializeLog()
is called are written to STDERR", "oneDNN custom operations are on" (only
`TF_ENABLE_ONEDNN_OPTS=0` removes it, and that changes the numerics), "Could not find cuda
drivers on your machine" (both printed twice, once per loaded TF library) and, at the
first device discovery, "failed call to cuInit" (an ERROR, which only level 3 would hide,
with every real error). So the import and the first device discovery run with file
descriptor 2 redirected to a temporary file, restored right after; the captured text is
written back to stderr without those known lines, so nothing else is lost.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

_LEGACY_VAR_BEFORE = os.environ.get("TF_USE_LEGACY_KERAS")
_TF_IMPORTED_BEFORE = "tensorflow" in sys.modules
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

VERBOSE_ENV = "R2D2_TF_VERBOSE"
"""Set it to 1 to see TensorFlow's native start-up logs (in every process)."""

_NOISE = re.compile(
    rb"All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|oneDNN custom operations are on"
    rb"|Could not find cuda drivers on your machine"
    rb"|failed call to cuInit"
    rb"|Unable to register cu(DNN|FFT|BLAS) factory"
    rb"|TF-TRT Warning: Could not find TensorRT"
    rb"|computation placer already registered"
)


def tensorflow_verbose() -> bool:
    """Whether the user asked for TensorFlow's native logs (`R2D2_TF_VERBOSE=1`)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def quiet_native_stderr(enabled: bool = True) -> Iterator[None]:
    """Meanwhile, file descriptor 2 goes to a temporary file; afterwards it is restored and
    the captured text is written back without TensorFlow's known start-up lines.

    Only the known lines (`_NOISE`) are dropped: any other output, e.g. the message of a
    failed import, reaches stderr (after the block).

    Args:
        enabled: False makes this a no-op.
    """
    if not enabled:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2 (e.g. a closed stderr)
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().splitlines(True) if not _NOISE.search(line)]
            if kept:
                os.write(2, b"".join(kept))


if not tensorflow_verbose():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import logging  # noqa: E402
import random  # noqa: E402

import numpy as np  # noqa: E402

with quiet_native_stderr(enabled=not tensorflow_verbose() and not _TF_IMPORTED_BEFORE):
    import tensorflow as tf  # noqa: E402

    # The first device discovery prints "failed call to cuInit" on machines without GPU.
    tf.config.list_physical_devices("GPU")

try:
    import tf_keras as keras  # noqa: E402
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "r2d2_agent needs the legacy Keras 2 package: pip install 'tf-keras' matching your "
        "TensorFlow version."
    ) from exc

import tensorflow.keras as _tf_dot_keras  # noqa: E402

if getattr(_tf_dot_keras, "Model", None) is not keras.Model:
    _why = (
        "TensorFlow was imported before r2d2_agent"
        if _TF_IMPORTED_BEFORE and _LEGACY_VAR_BEFORE is None
        else f"TF_USE_LEGACY_KERAS={_LEGACY_VAR_BEFORE!r}"
    )
    raise ImportError(
        "r2d2_agent (through keras-rl2) needs `tensorflow.keras` to be the legacy tf-keras "
        f"(Keras 2), but TensorFlow resolved it to Keras 3 ({_why}). TensorFlow reads "
        "TF_USE_LEGACY_KERAS only when it is first imported: either set TF_USE_LEGACY_KERAS=1 in "
        "the environment before starting Python, or import r2d2_agent before tensorflow/keras."
    )

# keras-rl's rl/callbacks.py does `from tensorflow.keras import __version__`; tf-keras's public
# API module does not define it.
if not hasattr(_tf_dot_keras, "__version__"):
    _tf_dot_keras.__version__ = keras.__version__

import rl.callbacks as rl_callbacks  # noqa: E402
import rl.core as rl_core  # noqa: E402
import rl.processors as rl_processors  # noqa: E402

__all__ = [
    "VERBOSE_ENV",
    "quiet_native_stderr",
    "tensorflow_verbose",
    "tf",
    "keras",
    "rl_core",
    "rl_callbacks",
    "rl_processors",
    "enable_gpu_memory_growth",
    "flat_caller",
    "set_global_seed",
]

logger = logging.getLogger(__name__)


def enable_gpu_memory_growth() -> int:
    """Let TensorFlow allocate GPU memory on demand instead of grabbing all of it.

    Must be called before the first TensorFlow op touches a GPU. If the GPUs are already
    initialised, a warning is logged and those GPUs are left as they are.

    Returns:
        The number of visible GPUs that have memory growth enabled after the call (0 on a
        machine without GPU, where the call is a no-op).
    """
    enabled = 0
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError as exc:
            logger.warning(
                "could not enable memory growth on %s (%s); call enable_gpu_memory_growth() "
                "before TensorFlow initialises the GPUs",
                gpu.name,
                exc,
            )
            continue
        enabled += 1
    return enabled


def set_global_seed(seed: int) -> None:
    """Seed Python's `random`, NumPy's global generator and TensorFlow's global seed.

    Args:
        seed: Non-negative integer seed.

    Raises:
        ValueError: If `seed` is negative.
    """
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    tf.random.set_seed(seed)


def flat_caller(function: Any) -> Callable[..., Any]:
    """A traced function of flat tensor inputs as a callable on arrays, without the
    argument binding of `ConcreteFunction.__call__`.

    `ConcreteFunction.__call__` matches its arguments against the structured signature
    (types, subtypes, shapes) in Python at every call: about 0.7 ms of a 7 ms learner
    update at `memory_config` (benchmarks/RESULTS.md, "The update's call, bound once").
    This checks each array's shape once against the signature, converts it to the
    signature's dtype as `__call__` does, and runs the graph through TensorFlow's private
    `ConcreteFunction._call_flat` (the call `__call__` ends in, present since TensorFlow
    2.0); on a TensorFlow without it, it calls the function the public way. An array
    already of the spec's dtype becomes a tensor the way `tf.convert_to_tensor` ends up
    making it (a copy of the array as an `EagerTensor` on the current device), without
    the seven Python calls of its dispatch (`_eager_tensor_maker`; about 0.6 ms less per
    learner update at the presets, benchmarks/RESULTS.md stop 41); anything else goes
    through `tf.convert_to_tensor`.

    Args:
        function: A concrete function whose inputs are a flat list of `TensorSpec`s of
            fully known shapes (`tf.function(input_signature=[...])`'s
            `get_concrete_function()`).

    Returns:
        `call(*arrays)`, giving what `function(*arrays)` gives.

    Raises:
        ValueError: From `call`, on an array whose shape is not its spec's, naming both.
        TypeError: From `call`, on a wrong number of arrays.
    """
    specs = function.structured_input_signature[0]
    shapes = [tuple(spec.shape.as_list()) for spec in specs]
    dtypes = [spec.dtype for spec in specs]
    call_flat = getattr(function, "_call_flat", None)
    make_tensor = _eager_tensor_maker()

    def call(*arrays: Any) -> Any:
        if len(arrays) != len(specs):
            raise TypeError(f"{function.name} takes {len(specs)} arrays, got {len(arrays)}")
        tensors = []
        for spec, shape, dtype, array in zip(specs, shapes, dtypes, arrays, strict=True):
            if np.shape(array) != shape:
                raise ValueError(f"{spec.name} must have shape {shape}, got {np.shape(array)}")
            tensors.append(make_tensor(array, dtype))
        if call_flat is None:
            return function(*tensors)
        return call_flat(tensors, function.captured_inputs)

    return call


def _eager_tensor_maker() -> Callable[[Any, Any], Any]:
    """`make(array, dtype)`: `array` as an eager tensor of `dtype`.

    A numpy array already of `dtype` is copied (as `tf.convert_to_tensor` copies it, so
    that the tensor never shares the caller's memory) and wrapped by TensorFlow's private
    `EagerTensor` constructor on the current device, which is where
    `tf.convert_to_tensor` ends up for it; anything else, and every array on a
    TensorFlow without that constructor, goes through `tf.convert_to_tensor`.
    """
    try:
        from tensorflow.python.eager import context
        from tensorflow.python.framework import ops

        eager_tensor = ops.EagerTensor
        ctx = context.context()
    except (ImportError, AttributeError):  # pragma: no cover - other TensorFlow builds
        eager_tensor = None

    def make(array: Any, dtype: Any) -> Any:
        if (
            eager_tensor is not None
            and type(array) is np.ndarray
            and array.dtype == dtype.as_numpy_dtype
        ):
            ctx.ensure_initialized()
            return eager_tensor(array.copy(), ctx.device_name, dtype.as_datatype_enum)
        return tf.convert_to_tensor(array, dtype=dtype)

    return make
