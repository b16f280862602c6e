"""`FIELD=VALUE` pairs from the command line (`--set`, `--ray-variants`, backend specs).

Standard library only: the memory suite imports it in the peers' venv too.
"""

from __future__ import annotations

import ast
from typing import Any


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["gamma=0.9", "dueling=False"]` -> `{"gamma": 0.9, "dueling": False}`.

    Each value is a Python literal (`ast.literal_eval`): numbers, True/False, None,
    strings in quotes, tuples.

    Raises:
        SystemExit: Naming the pair, if it is not `FIELD=VALUE` or its value is not a
            Python literal.
    """
    overrides = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"expected FIELD=VALUE, got {pair!r}")
        try:
            overrides[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise SystemExit(f"{pair!r}: the value is not a Python literal") from None
    return overrides


def parse_override_list(text: str) -> dict[str, Any]:
    """`"send_interval=0.2, report_interval=0.5"` -> its fields (`parse_overrides` of the
    comma-separated pairs; "" -> {})."""
    return parse_overrides([pair for pair in text.split(",") if pair.strip()])
