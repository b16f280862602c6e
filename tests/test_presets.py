"""Presets you can read, and that cannot drift: every public preset function of
`r2d2_agent.presets` (each `*_config` function) lists its values in its docstring and in
the README's preset table, both checked here against what the function returns; the
README's quickstart spells out the preset it names.

A new preset is picked up by itself: a failing test prints the docstring block or the
README table to paste.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import re

import pytest

from r2d2_agent import InputType, R2D2Config, presets

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"

PRESETS = {
    name: function
    for name, function in vars(presets).items()
    if name.endswith("_config")
    and not name.startswith("_")
    and inspect.isfunction(function)
    and function.__module__ == presets.__name__
}
"""Every public preset function, by name."""

FIELDS = [f.name for f in dataclasses.fields(R2D2Config)]

EXAMPLE_ARGUMENTS = {"input_shape": (3,), "nb_actions": 3}
"""Values for the fields a preset takes as required arguments (`memory_config`'s task
shape); the docstrings leave these fields out, the table says "argument"."""


def arguments(function) -> dict:
    """The required arguments of a preset function, with example values."""
    required = [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD
    ]
    missing = [name for name in required if name not in EXAMPLE_ARGUMENTS]
    assert not missing, f"give EXAMPLE_ARGUMENTS a value for {missing}"
    return {name: EXAMPLE_ARGUMENTS[name] for name in required}


def call(function) -> R2D2Config:
    """The preset with example values for its required arguments."""
    return function(**arguments(function))


def _text(value) -> str:
    """How a value reads in the docstrings and the table."""
    if isinstance(value, InputType):
        return f"InputType.{value.name}"
    return repr(value)


def _default(name: str):
    """`R2D2Config`'s default of field `name` (`dataclasses.MISSING` if it is required)."""
    return next(f.default for f in dataclasses.fields(R2D2Config) if f.name == name)


def preset_values(function) -> dict[str, str]:
    """The fields where the preset differs from `R2D2Config`'s defaults (the required
    ones included, unless the preset takes them as arguments), in field order."""
    config, taken = call(function), arguments(function)
    return {
        name: _text(getattr(config, name))
        for name in FIELDS
        if getattr(config, name) != _default(name) and name not in taken
    }


def docstring_values(function) -> dict[str, str]:
    """The `name=value` lines of the docstring's "Values" block."""
    doc = inspect.getdoc(function) or ""
    block = re.search(r"^Values\b.*::\n\n((?:    .*\n?)+)", doc, re.MULTILINE)
    if block is None:
        return {}
    return dict(line.strip().split("=", 1) for line in block.group(1).splitlines())


def expected_table() -> str:
    """The README's preset table as the presets are now: a row per field that some
    preset sets, a column per preset."""
    values = {name: preset_values(function) for name, function in PRESETS.items()}
    rows = sorted({field for v in values.values() for field in v}, key=FIELDS.index)
    configs = {name: call(function) for name, function in PRESETS.items()}
    taken = {name: arguments(function) for name, function in PRESETS.items()}
    head = [
        "field",
        "`R2D2Config` default",
        *(f"`{name}({', '.join(taken[name])})`" for name in PRESETS),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        default = _default(row)
        cells = [
            "required" if default is dataclasses.MISSING else f"`{_text(default)}`",
            *(
                "argument" if row in taken[name] else f"`{_text(getattr(config, row))}`"
                for name, config in configs.items()
            ),
        ]
        lines.append("| " + " | ".join([row, *cells]) + " |")
    return "\n".join(lines)


def test_there_are_presets():
    assert {"cartpole_config", "masked_cartpole_config", "memory_config"} <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_presets_docstring_lists_its_values(name):
    function = PRESETS[name]
    expected = preset_values(function)
    block = "\n".join(f"        {field}={value}" for field, value in expected.items())
    assert docstring_values(function) == expected, (
        f"{name}'s docstring should hold, after its summary:\n\n"
        "    Values (every other field keeps `R2D2Config`'s default)::\n\n"
        f"{block}\n"
    )


def test_the_readme_lists_every_presets_values():
    table = expected_table()
    assert table in README.read_text(), (
        f"README.md's preset table is out of date; replace it with:\n\n{table}\n"
    )


def _quickstart() -> str:
    """The README's first Python block (the quickstart)."""
    return re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL).group(1)


def test_the_quickstarts_explicit_config_is_the_preset_it_names():
    tree = ast.parse(_quickstart())
    (call,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "R2D2Config"
    ]
    names = {"R2D2Config": R2D2Config, "InputType": InputType}
    explicit = eval(compile(ast.Expression(call), "README", "eval"), names)
    named = re.search(r"# or: .*config = (\w+_config\(.*?\))", _quickstart())
    assert named, "the quickstart should name its preset: # or: ... config = <preset>(...)"
    assert explicit == eval(named.group(1), vars(presets))


# memory_config's memory span ---------------------------------------------------------------

WINDOWS = [
    # (memory span in env steps, trained window, env steps per update)
    (0, 16, 6),
    (4, 16, 6),
    (7, 16, 6),  # 16 steps hold twice the span: 14
    (8, 32, 6),
    (15, 32, 6),
    (16, 64, 6),
    (20, 64, 6),
    (31, 64, 6),
    (32, 128, 12),
    (50, 128, 12),
    (100, 256, 24),
]


@pytest.mark.parametrize(("span", "length", "interval"), WINDOWS)
def test_memory_window_covers_twice_the_span_and_sets_how_often_each_step_is_replayed(
    span, length, interval
):
    window = presets.memory_window(span)
    assert window == {"input_length": length, "train_interval": interval}
    assert window["input_length"] >= 2 * span + 1
    # batch_size * input_length / train_interval trained steps per env step: 32 x 16 / 6
    # (85) in the 16-step window (an update every 6 env steps), 32 x 32 / 6 (171) in the
    # 32-step one, 32 x 32 / 3 (341) from 64 steps on
    ratio = window["input_length"] / window["train_interval"]
    assert ratio == {16: 16 / 6, 32: 32 / 6}.get(length, 32 / 3)


@pytest.mark.parametrize("span", [-1, 2.5, "20", True, None])
def test_memory_window_names_a_bad_span(span):
    with pytest.raises(ValueError, match=re.escape(f"got {span!r}")):
        presets.memory_window(span)


def test_memory_config_takes_the_window_of_its_memory_span():
    config = presets.memory_config((3,), 2, memory_span=20)
    assert (config.input_length, config.train_interval) == (64, 6)
    default = presets.memory_config((3,), 2)
    assert default.input_length == 16 and default.train_interval == 6
    assert presets.DEFAULT_MEMORY_SPAN == 7


def test_memory_config_overrides_win_over_the_memory_span():
    config = presets.memory_config((3,), 2, memory_span=50, input_length=40)
    assert (config.input_length, config.train_interval) == (40, 12)


def test_memory_config_names_a_bad_memory_span():
    with pytest.raises(ValueError, match="memory_span"):
        presets.memory_config((3,), 2, memory_span=-3)


# memory_config's each_step_scored ------------------------------------------------------------


def test_memory_config_each_step_scored_looks_no_further_than_the_step():
    assert presets.memory_config((3,), 2, each_step_scored=True).gamma == 0.0


def test_memory_config_keeps_its_discount_when_rewards_come_later():
    assert presets.memory_config((3,), 2).gamma == 0.95
    assert presets.memory_config((3,), 2, each_step_scored=False).gamma == 0.95


def test_memory_config_gamma_override_wins_over_each_step_scored():
    assert presets.memory_config((3,), 2, each_step_scored=True, gamma=0.5).gamma == 0.5


@pytest.mark.parametrize("value", [1, "yes", None])
def test_memory_config_names_a_bad_each_step_scored(value):
    with pytest.raises(
        ValueError, match=re.escape(f"each_step_scored must be True or False, got {value!r}")
    ):
        presets.memory_config((3,), 2, each_step_scored=value)


# The greedy policy's average ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "updates"),
    [
        (presets.cartpole_config(), 250),  # 1,000 env steps at one update per 4
        (presets.masked_cartpole_config(), 250),
        (presets.cartpole_config(train_interval=8), 125),  # follows the update interval
        (presets.memory_config((3,), 2), 166),  # one update per 6 env steps
        (presets.memory_config((3,), 2, memory_span=20), 166),
        (presets.memory_config((3,), 2, memory_span=100), 41),
    ],
    ids=["cartpole", "masked", "cartpole_every_8", "memory", "memory_span_20", "memory_span_100"],
)
def test_presets_average_the_greedy_policy_over_the_same_env_steps(config, updates):
    assert presets.POLICY_AVERAGE_ENV_STEPS == 1_000
    assert config.policy_average_updates == updates


@pytest.mark.parametrize("updates", [0, 7])
def test_an_override_of_policy_average_updates_wins(updates):
    assert presets.cartpole_config(policy_average_updates=updates).policy_average_updates == updates
    memory = presets.memory_config((3,), 2, policy_average_updates=updates)
    assert memory.policy_average_updates == updates


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("interval", [0, -3, 2.5, "6", True, None])
def test_a_bad_train_interval_override_is_named_not_divided_by(name, interval):
    """The policy average is derived from `train_interval`; a bad override must reach the
    config's check (naming the field and the value), not a division by it."""
    args = ((3,), 2) if name == "memory_config" else ()
    with pytest.raises(ValueError, match=rf"train_interval .*got {re.escape(repr(interval))}"):
        PRESETS[name](*args, train_interval=interval)
