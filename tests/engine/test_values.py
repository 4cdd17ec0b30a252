"""Durable values (SPEC §4, §14 "Values, the same on every backend") and recorded errors."""

from __future__ import annotations

import datetime
import decimal
import enum
import json
import math

import pytest

from durableflow import WorkflowValueError, exceptions, values


def nested(levels: int, inner=None):
    """``levels`` lists one inside the other (built iteratively: no recursion to build it)."""
    value = [] if inner is None else inner
    for _ in range(levels - 1 if inner is None else levels):
        value = [value]
    return value


def cyclic():
    loop: list = []
    loop.append(loop)
    return loop


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**63),
        2**63 - 1,
        1.5,
        -0.0,
        "",
        "ünïcode",
        "\ud7ff\ue000\U0001f600",  # the neighbours of the surrogate block, and an astral character
        [],
        {},
        {"a": [1, {"b": None}]},
        {"ключ": {"😀": "x"}},
        pytest.param(nested(512), id="512-deep"),
        pytest.param({"a": nested(511)}, id="512-deep-in-a-dict"),
    ],
)
def test_json_data_is_durable(value):
    assert values.invalid_reason(value) is None
    assert values.decode(values.encode(value)) == value


@pytest.mark.parametrize(
    ("value", "pointer", "why"),
    [
        (math.nan, "/", "nan is not a finite number"),
        ({"x": math.inf}, "/x", "inf is not a finite number"),
        ({"x": [-math.inf]}, "/x/0", "-inf is not a finite number"),
        ({"a": [1, (2, 3)]}, "/a/1", "tuple is not a durable value"),
        ({"s": {1, 2}}, "/s", "set is not a durable value"),
        ({"b": b"bytes"}, "/b", "bytes is not a durable value"),
        ({"d": datetime.date(2026, 1, 1)}, "/d", "date is not a durable value"),
        ({"n": decimal.Decimal("1.1")}, "/n", "Decimal is not a durable value"),
        ({"e": Colour.RED}, "/e", "Colour is not a durable value"),
        ({1: "int key"}, "/", "key 1 is not a string"),
        ({"a/b": {"c~d": object()}}, "/a~1b/c~0d", "object is not a durable value"),
        ({"nul": "a\x00b"}, "/nul", "NUL character (at index 1)"),
        ({"a": [{"k\x00y": 1}]}, "/a/0", "key 'k\\x00y' holds a NUL character"),
        ({"a": [0, {"b": "x\ud800"}]}, "/a/1/b", "lone surrogate (U+D800 at index 1)"),
        ({"a": {"b\udfff": 1}}, "/a", "key 'b\\udfff' holds a lone surrogate (U+DFFF at index 1)"),
        ({"n": 2**63}, "/n", "9223372036854775808 is outside the signed 64-bit range"),
        ([-(2**63) - 1], "/0", "-9223372036854775809 is outside the signed 64-bit range"),
        ({"n": 2**70}, "/n", "SQLite's JSON functions"),
        pytest.param(10**5000, "/", "an integer of 16610 bits is outside", id="10**5000"),
        pytest.param(nested(513), "/0" * 512, "nesting deeper than 512 levels", id="513-deep"),
        pytest.param(nested(100_000), "/0" * 512, "nesting deeper than 512 levels", id="100000-deep"),
        pytest.param({"x": nested(100_000, {"k": 1})}, "/x" + "/0" * 511, "nesting deeper than 512", id="x-deep"),
        pytest.param(cyclic(), "/0" * 512, "nesting deeper than 512 levels", id="cyclic"),
    ],
)
def test_anything_else_is_refused_with_a_json_pointer(value, pointer, why):
    reason = values.invalid_reason(value)
    assert reason is not None and reason.startswith(f"{pointer}: ")
    assert why in reason
    with pytest.raises(WorkflowValueError) as caught:
        values.encode(value)
    assert caught.value.code == "INVALID_STEP_VALUE"
    assert caught.value.detail == {"path": pointer}
    assert caught.value.message == f"not a durable value at {reason}"


def test_the_first_offender_in_document_order_is_named():
    assert values.invalid_reason({"a": "\x00", "b": math.nan}).startswith("/a: ")
    assert values.invalid_reason([1, [2, {"k": math.nan}], "\x00"]).startswith("/1/1/k: ")
    # A dict's keys are checked before anything inside it.
    assert values.invalid_reason({"a": [math.nan], "b\x00": 1}).startswith("/: key 'b\\x00'")


def test_a_refusal_message_can_itself_be_stored():
    for value in ({"k\x00\ud800": 1}, {"a": "\ud800\x00"}, {("\x00",): 1}):
        reason = values.invalid_reason(value)
        assert "\x00" not in reason and values.invalid_reason(reason) is None


def test_refusing_a_deep_value_raises_no_recursion_error_and_builds_no_long_pointers():
    deep: dict = {}
    for _ in range(200_000):
        deep = {"k": deep}
    reason = values.invalid_reason(deep)
    assert reason == "/k" * values.MAX_DEPTH + ": nesting deeper than 512 levels"


def test_the_code_is_the_callers_and_roundtrip_returns_the_decoded_value():
    with pytest.raises(WorkflowValueError) as caught:
        values.roundtrip({"x": "\x00"}, code="INVALID_RESULT")
    assert (caught.value.code, caught.value.detail) == ("INVALID_RESULT", {"path": "/x"})
    canonical, decoded = values.roundtrip({"b": [2**63 - 1], "a": "é"})
    assert canonical == '{"a":"é","b":[9223372036854775807]}'
    assert decoded == {"a": "é", "b": [2**63 - 1]}


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


def test_a_recorded_error_never_holds_a_nul_or_a_lone_surrogate():
    recorded = values.encode_error(ValueError("bad\x00byte"))
    assert recorded["message"] == "bad\\x00byte"
    assert values.invalid_reason(recorded) is None

    try:
        raise exceptions.StepError("CODE\x00", "half a pair \ud83d and a \x00")
    except exceptions.StepError as exc:
        recorded = values.encode_error(exc, step="k\udc00")
    assert recorded["message"] == "half a pair \\ud83d and a \\x00"
    assert (recorded["code"], recorded["step"]) == ("CODE\\x00", "k\\udc00")
    assert "\\ud83d" in recorded["traceback"]
    assert values.invalid_reason(recorded) is None
    json.dumps(recorded, ensure_ascii=False).encode()  # what a driver sends: valid UTF-8


def test_a_recorded_error_has_a_string_code_whatever_the_exception_calls_code():
    class HttpError(Exception):
        code = 404

    class RpcError(Exception):
        def code(self):
            return "UNAVAILABLE"

    class Shouting(str, enum.Enum):
        LOUD = "LOUD"

    class Coded(Exception):
        code = Shouting.LOUD

    assert values.encode_error(HttpError("gone"))["code"] == "404"
    assert values.encode_error(RpcError("down"))["code"] == "STEP_FAILED"
    coded = values.encode_error(Coded("x"))["code"]
    assert coded == "LOUD" and type(coded) is str


def test_a_recorded_error_survives_a_broken_or_huge_message():
    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no str for you")

    assert values.encode_error(Broken())["message"] == "Broken"
    assert len(values.encode_error(ValueError("x" * 10_000_000))["message"]) == 100_000


def test_a_refused_values_path_survives_the_journal():
    try:
        values.encode({"a": ["\x00"]})
    except WorkflowValueError as exc:
        recorded = values.encode_error(exc, step="s")
    rebuilt = values.decode_error(recorded)
    assert isinstance(rebuilt, WorkflowValueError)
    assert (rebuilt.code, rebuilt.detail) == ("INVALID_STEP_VALUE", {"path": "/a/0"})
