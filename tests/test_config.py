"""Tests of `r2d2_agent.config`: validation, derived values, immutability, documentation.

`R2D2Config` must reject bad values with a message naming the field and the value, turn
numpy scalars into plain Python numbers, derive the sequence geometry, stay frozen, and
document every field (with its unit) in a docstring right below the field.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re

import numpy as np
import pytest

from r2d2_agent import config as config_module
from r2d2_agent.config import InputType, R2D2Config

LIMITS = dict(input_length=4, memory_capacity=64)  # what two of the invalid values exceed


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gamma", 1.5),
        ("batch_size", 0),
        ("lstm_units", -1),
        ("sequence_period", 5),  # > input_length (4 in `LIMITS`)
        ("loss", "l1"),
        ("memory_warmup", 65),  # > memory_capacity (64 in `LIMITS`)
        ("input_type", "VALUES"),  # a string, not an InputType
        ("learning_rate_final", 0.0),
        ("learning_rate_final", -1e-4),
        ("advantage_learning", 1.0),
        ("advantage_learning", -0.5),
        ("advantage_learning", float("nan")),
        ("policy_average_updates", -1),
        ("policy_average_updates", 2.5),
        ("policy_average_updates", True),
        ("drop_covered_windows", "yes"),
        ("drop_covered_windows", 1),
    ],
)
def test_invalid_value_raises_value_error_naming_field_and_value(make_config, field, value):
    with pytest.raises(ValueError) as info:
        make_config(**LIMITS, **{field: value})
    message = str(info.value)
    assert field in message
    assert str(value) in message


@pytest.mark.parametrize(
    ("input_type", "bad_shape"),
    [
        (InputType.VALUES, ()),
        (InputType.GRAY_2ch, (16, 16, 1)),
        (InputType.GRAY_3ch, (16, 16)),
        (InputType.GRAY_3ch, (16, 16, 3)),
        (InputType.COLOR, (16, 16)),
    ],
)
def test_frame_shape_not_fitting_input_type_raises_naming_both(make_config, input_type, bad_shape):
    with pytest.raises(ValueError) as info:
        make_config(input_shape=bad_shape, input_type=input_type)
    message = str(info.value)
    assert input_type.name in message
    assert str(tuple(bad_shape)) in message


@pytest.mark.parametrize(
    ("input_type", "good_shape"),
    [
        (InputType.VALUES, (3, 2)),
        (InputType.GRAY_2ch, (16, 16)),
        (InputType.GRAY_3ch, (16, 16, 1)),
        (InputType.COLOR, (16, 16, 3)),
    ],
)
def test_frame_shape_fitting_input_type_is_accepted(make_config, input_type, good_shape):
    cfg = make_config(input_shape=good_shape, input_type=input_type)
    assert cfg.input_shape == good_shape


def test_numpy_integers_become_python_ints(make_config):
    cfg = make_config(nb_actions=np.int64(3), batch_size=np.int32(4), input_shape=np.array([4]))
    assert type(cfg.nb_actions) is int and cfg.nb_actions == 3
    assert type(cfg.batch_size) is int and cfg.batch_size == 4
    assert all(type(d) is int for d in cfg.input_shape)


def test_numpy_floats_become_python_floats(make_config):
    cfg = make_config(gamma=np.float32(0.5))
    assert type(cfg.gamma) is float and cfg.gamma == 0.5


def test_period_defaults_to_half_the_input_length(make_config):
    assert make_config(input_length=10).period == 5


def test_default_period_is_never_zero(make_config):
    assert make_config(input_length=1).period == 1


def test_explicit_sequence_period_is_used(make_config):
    assert make_config(input_length=10, sequence_period=3).period == 3


def test_sequence_length_is_burnin_plus_input_length_plus_multisteps(make_config):
    assert make_config(burnin=3, input_length=7, multisteps=2).sequence_length == 12


def test_warmup_defaults_to_batch_size(make_config):
    assert make_config(batch_size=4).warmup == 4


def test_warmup_follows_memory_warmup(make_config):
    assert make_config(batch_size=4, memory_warmup=10).warmup == 10


def test_lstm_units_zero_disables_lstm(make_config):
    assert not make_config(lstm_units=0).enable_lstm


def test_positive_lstm_units_enable_lstm(make_config):
    assert make_config(lstm_units=8).enable_lstm


def test_config_is_frozen(make_config):
    cfg = make_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.gamma = 0.5  # type: ignore[misc]


def test_replace_returns_changed_copy_and_keeps_original(make_config):
    cfg = make_config()
    other = cfg.replace(gamma=0.5)
    assert other.gamma == 0.5 and cfg.gamma == 0.997


def test_replace_validates_again(make_config):
    with pytest.raises(ValueError, match="gamma"):
        make_config().replace(gamma=1.5)


def _field_docstrings() -> dict[str, str | None]:
    """Field name -> the string literal right after its annotation in the class body."""
    tree = ast.parse(inspect.getsource(config_module))
    cls = next(
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "R2D2Config"
    )
    docs: dict[str, str | None] = {}
    for node, after in zip(cls.body, [*cls.body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            doc = None
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                doc = after.value.value
            docs[node.target.id] = doc
    return docs


def test_every_field_has_a_docstring():
    docs = _field_docstrings()
    names = [f.name for f in dataclasses.fields(R2D2Config)]
    assert sorted(docs) == sorted(names)
    missing = [name for name in names if not (docs[name] or "").strip()]
    assert missing == []


# Fields whose docstring must state a unit, and the words that count as that unit.
_UNITS = {
    "multisteps": r"env steps?",
    "burnin": r"env steps?",
    "input_length": r"env steps?",
    "sequence_period": r"env steps?",
    "memory_capacity": r"sequences?",
    "memory_warmup": r"sequences?",
    "batch_size": r"sequences?",
    "target_update_interval": r"learner updates?",
    "is_anneal_updates": r"learner updates?",
    "learning_rate_anneal_updates": r"learner updates?",
    "policy_average_updates": r"learner updates?",
    "learning_rate_final": r"per learner update",
    "train_interval": r"env steps?",
    "actor_sync_interval": r"env steps?",
    "envs_per_actor": r"envs?",
    "gamma": r"per env step",
}


@pytest.mark.parametrize("field", sorted(_UNITS))
def test_counted_field_docstring_states_its_unit(field):
    doc = _field_docstrings()[field] or ""
    assert re.search(_UNITS[field], doc, re.IGNORECASE), f"{field}: {doc!r}"


def test_from_dict_inverts_to_dict_through_json(make_config):
    config = make_config(input_shape=(84, 84), input_type=InputType.GRAY_2ch, input_sequence=4)
    data = json.loads(json.dumps(config.to_dict()))  # as a run directory or checkpoint keeps it
    assert R2D2Config.from_dict(data) == config


def test_from_dict_names_unknown_fields(make_config):
    data = {**make_config().to_dict(), "lstm_size": 32}
    with pytest.raises(ValueError, match="unknown R2D2Config fields: lstm_size"):
        R2D2Config.from_dict(data)


@pytest.mark.parametrize("updates", [0, -5, 2.5, True])
def test_learning_rate_final_needs_a_positive_int_of_updates(make_config, updates):
    with pytest.raises(ValueError, match=rf"learning_rate_anneal_updates .*{updates!r}"):
        make_config(learning_rate_final=1e-5, learning_rate_anneal_updates=updates)


def test_anneal_updates_without_a_final_rate_names_both(make_config):
    with pytest.raises(ValueError, match="learning_rate_final") as info:
        make_config(learning_rate_anneal_updates=100)
    assert "100" in str(info.value)
