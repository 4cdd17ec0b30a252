"""Hostile input over HTTP: always a 4xx in the one error shape with a code, nothing written,
and for values the same verdict (code and JSON pointer) as ``durableflow.start`` gives."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from durableflow import WorkflowStartError, operations
from durableflow.api import errors, parsers
from durableflow.models import Execution
from durableflow.testing import WorkflowTester
from tests.apiclient import error
from tests.engine.test_hostile_values import CASES, _nested

# Not JSON at all (RFC 8259 has no NaN or Infinity): refused by the parser, not the codec.
NOT_JSON = {"NaN", "Infinity", "-Infinity"}
# Larger than the body limit: refused before it is read.
TOO_LARGE = {"10 MB string"}
# Deeper than the decoder's recursion guard goes (Python's recursion limit): not parsed.
TOO_DEEP_TO_PARSE = {"nested 100,000 deep"}


def _python_verdict(params: Any) -> Any:
    """What ``durableflow.start`` answers for these params (the in-memory engine: the same codec)."""
    tester = WorkflowTester(settings=operations.engine_settings())
    try:
        tester.start("hostile.echo", params)
    except WorkflowStartError as exc:
        return exc.code, exc.detail.get("path"), errors.bounded(exc.message)  # an excerpt of a long one
    return "accepted"


def _api_verdict(api, raw: str) -> Any:
    before = Execution.objects.count()
    response = api.post("executions/", raw=raw)
    if response.status_code == 201:
        return "accepted", response.json()["params"]
    body = error(response, response.status_code, response.json()["code"])
    assert 400 <= response.status_code < 500
    assert Execution.objects.count() == before, "a refused start wrote something"
    return body["code"], (body.get("detail") or {}).get("path"), body["message"], response.status_code


def _deep_text(levels: int, opener: str = "[", closer: str = "]") -> str:
    return opener * levels + closer * levels


def _body(params_json: str) -> str:
    return '{"workflow": "hostile.echo", "params": ' + params_json + "}"


@pytest.mark.parametrize("case", list(CASES))
def test_values_get_the_python_api_verdict(api, case):
    build, _ = CASES[case]
    params = build()
    if case.startswith("nested"):  # json.dumps recurses; write the nesting out
        text = _deep_text(int(case.split()[1].replace(",", "")))
    else:
        text = json.dumps(params)  # NaN as a literal, lone surrogates as \\u escapes

    verdict = _api_verdict(api, _body(text))

    if case in NOT_JSON or case in TOO_DEEP_TO_PARSE:
        assert verdict[0::3] == ("INVALID_JSON", 400), verdict
    elif case in TOO_LARGE:
        assert verdict[0::3] == ("PAYLOAD_TOO_LARGE", 413), verdict
    elif verdict[0] == "accepted":
        assert _python_verdict(params) == "accepted"
        assert verdict[1] == params
    else:
        assert verdict[:3] == _python_verdict(params), verdict
        assert verdict[3] == 400


def test_100000_deep_objects_are_invalid_json_and_900_deep_get_the_python_api_verdict(api):
    body = error(api.post("executions/", raw=_body('{"a": ' * 99_999 + "{}" + "}" * 99_999)), 400, "INVALID_JSON")
    assert "nests deeper than a durable value may (512 levels)" in body["message"]

    params: dict = {}
    for _ in range(900 - 1):
        params = {"a": params}
    verdict = _api_verdict(api, _body('{"a": ' * 899 + "{}" + "}" * 899))
    assert verdict[:3] == _python_verdict(params) == ("INVALID_PARAMS", "/a" * 512, verdict[2])


@pytest.mark.parametrize(
    "raw, code",
    [
        (_deep_text(100_000), "INVALID_JSON"),  # deeper than the decoder goes
        (_deep_text(700), "INVALID_REQUEST"),  # parsed: not an object
        ("[" * 100_000, "INVALID_JSON"),
        ('{"workflow": "hostile.echo", "params": ' + "[" * 100_000 + "}", "INVALID_JSON"),
        ('{"workflow": "hostile.echo", "params": NaN}', "INVALID_JSON"),
        ('{"workflow": "hostile.echo", "params": [Infinity]}', "INVALID_JSON"),
        ('{"workflow": "hostile.echo", "params": {"n": ' + "9" * 5000 + "}}", "INVALID_JSON"),
        ('{"workflow": "hostile.echo", "params": {', "INVALID_JSON"),
        ("\ufeff{}", "INVALID_JSON"),
        ('{"workflow": "t.steps", "params": "\x01"}', "INVALID_JSON"),  # a raw control character
        ("[]", "INVALID_REQUEST"),
        ('"t.steps"', "INVALID_REQUEST"),
        ("null", "INVALID_REQUEST"),
        ("1", "INVALID_REQUEST"),
        ("{}", "INVALID_REQUEST"),
        ('{"workflow": 7}', "INVALID_REQUEST"),
        ('{"workflow": ["t.steps"]}', "INVALID_REQUEST"),
        ('{"workflow": "t.steps", "idempotency_key": 5}', "INVALID_REQUEST"),
        ('{"workflow": "t.steps", "execution_id": {}}', "INVALID_REQUEST"),
        ('{"workflow": "t.steps\\u0000"}', "UNKNOWN_WORKFLOW"),
        ('{"workflow": "t.steps", "idempotency_key": "k\\u0000"}', "INVALID_PARAMS"),
        ('{"workflow": "t.steps", "execution_id": "\\udfff"}', "INVALID_PARAMS"),
        ('{"workflow": "t.steps", "execution_id": "' + "x" * 201 + '"}', "INVALID_PARAMS"),
        ('{"workflow": "t.steps", "idempotency_key": ""}', "INVALID_PARAMS"),
        ('{"workflow": "t.steps", "status": "completed", "lease_token": "x"}', "INVALID_REQUEST"),
    ],
    ids=lambda value: value[:40] if isinstance(value, str) else value,
)
def test_bodies_that_cannot_start_anything_are_4xx_with_a_code(api, raw, code):
    verdict = _api_verdict(api, raw)
    assert verdict[0] == code, verdict
    assert verdict[3] == 400


@pytest.mark.parametrize("number", [2**63, -(2**63) - 1, 2**70, 10**100, -(10**30)])
def test_integers_beyond_64_bits_get_the_python_api_verdict(api, number):
    verdict = _api_verdict(api, _body(json.dumps({"n": [number]})))
    assert verdict[:3] == _python_verdict({"n": [number]})
    assert verdict[:2] == ("INVALID_PARAMS", "/n/0")


@pytest.mark.parametrize("params", [[1, 2], 5, "a string", None, True, {"n": [2**63 - 1, -(2**63)]}])
def test_any_durable_params_are_accepted_as_in_python(api, params):
    assert _python_verdict(params) == "accepted"
    assert _api_verdict(api, _body(json.dumps(params))) == ("accepted", params)


def test_invalid_utf8_is_invalid_json(api):
    response = api.post("executions/", raw=b'{"workflow": "t.steps", "params": "\xed\xa0\x80"}')
    error(response, 400, "INVALID_JSON")
    assert not Execution.objects.exists()


def test_a_10_mb_body_is_413_before_it_is_read(api):
    response = api.post("executions/", raw=_body(json.dumps("x" * 10_000_000)))
    body = error(response, 413, "PAYLOAD_TOO_LARGE")
    assert "limit" in body["message"]
    assert not Execution.objects.exists()


def test_a_body_without_a_length_is_cut_at_the_limit():
    stream = io.BytesIO(b"[" + b"1," * parsers.body_limit() + b"1]")
    with pytest.raises(parsers.PayloadTooLarge):
        parsers.StrictJSONParser().parse(stream, "application/json", {})


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml"],
)
def test_bodies_other_than_json_are_not_deserialised(api, content_type):
    response = api.post("executions/", raw='{"workflow": "t.steps"}', content_type=content_type)
    error(response, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert not Execution.objects.exists()


def test_json_with_a_charset_parameter_is_json(api):
    response = api.post("executions/", raw='{"workflow": "t.steps"}', content_type="application/json; charset=utf-8")
    assert response.status_code == 201


def test_the_depth_limit_leaves_a_512_deep_value_whole():
    text = _body(_deep_text(512))
    assert parsers.loads(text)["params"] == _nested(512)


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = json.dumps({"workflow": "x", "params": {"s": "[" * 5000 + '\\"]{' * 700}})
    assert parsers.loads(text) == json.loads(text)
