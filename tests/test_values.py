"""Durable values (SPEC §4) and recorded errors."""

from __future__ import annotations

import datetime
import decimal
import math

import pytest

from durableflow import WorkflowValueError, exceptions, values


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -(2**70), 1.5, "", "ünïcode", [], {}, {"a": [1, {"b": None}]}],
)
def test_json_data_is_durable(value):
    assert values.invalid_reason(value) is None
    assert values.decode(values.encode(value)) == value


@pytest.mark.parametrize(
    ("value", "pointer"),
    [
        (math.nan, "/"),
        ({"x": math.inf}, "/x"),
        ({"a": [1, (2, 3)]}, "/a/1"),
        ({"s": {1, 2}}, "/s"),
        ({"b": b"bytes"}, "/b"),
        ({"d": datetime.date(2026, 1, 1)}, "/d"),
        ({"n": decimal.Decimal("1.1")}, "/n"),
        ({1: "int key"}, "/"),
        ({"a/b": {"c~d": object()}}, "/a~1b/c~0d"),
        ({"nul": "a\x00b"}, "/nul"),
    ],
)
def test_anything_else_is_refused_with_a_json_pointer(value, pointer):
    reason = values.invalid_reason(value)
    assert reason is not None and reason.startswith(f"{pointer}:")
    with pytest.raises(WorkflowValueError) as caught:
        values.encode(value)
    assert caught.value.code == "INVALID_STEP_VALUE"


def test_canonical_json_sorts_keys_and_has_no_whitespace():
    assert values.encode({"b": 1, "a": [1, 2], "c": {"z": 0, "y": "é"}}) == '{"a":[1,2],"b":1,"c":{"y":"é","z":0}}'


def test_payload_limit():
    with pytest.raises(WorkflowValueError) as caught:
        values.encode("x" * 100, max_bytes=50)
    assert caught.value.code == "PAYLOAD_TOO_LARGE"


def test_recorded_errors_rebuild_their_class_when_it_is_loaded():
    try:
        raise KeyError("missing")
    except KeyError as exc:
        recorded = values.encode_error(exc, step="load")
    assert recorded["type"] == "builtins.KeyError" and recorded["step"] == "load"
    assert "Traceback" in recorded["traceback"]
    assert isinstance(values.decode_error(recorded), KeyError)

    durable = values.decode_error(values.encode_error(exceptions.WaitTimeout(message="too slow")))
    assert isinstance(durable, exceptions.WaitTimeout) and isinstance(durable, TimeoutError)
    assert (durable.code, durable.message) == ("WAIT_TIMEOUT", "too slow")


def test_an_error_class_that_is_not_loaded_becomes_a_step_error():
    rebuilt = values.decode_error({"type": "somewhere.unloaded.Boom", "code": "STEP_FAILED", "message": "boom"})
    assert isinstance(rebuilt, exceptions.StepError)
    assert rebuilt.detail == {"type": "somewhere.unloaded.Boom"}


def test_a_recorded_error_never_holds_a_nul():
    recorded = values.encode_error(ValueError("bad\x00byte"))
    assert recorded["message"] == "bad\\x00byte"
    assert values.invalid_reason(recorded) is None
