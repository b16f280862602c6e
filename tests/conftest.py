"""Shared test setup: quiet TensorFlow and legacy-Keras mode before any TensorFlow import.

`r2d2_agent.compat` sets `TF_USE_LEGACY_KERAS=1` before TensorFlow is first imported, so it
is imported here, ahead of every test module, so that any TensorFlow import in the tests
resolves `tensorflow.keras` to tf-keras (Keras 2), which keras-rl2 needs.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import r2d2_agent.compat  # noqa: E402,F401  (must come before any other TensorFlow import)
