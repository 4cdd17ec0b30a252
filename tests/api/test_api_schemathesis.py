"""The API against its own OpenAPI schema (schemathesis): generated requests, valid and not,
never get a 5xx, and every answer matches the schema (status documented, body and headers
conforming). Bounded examples per operation, so that it runs in every CI pass."""

from __future__ import annotations

import base64

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.apiclient import make_user

# Not positive_data_acceptance: a request the schema allows may still name no workflow or
# cursor that exists (400 UNKNOWN_WORKFLOW, INVALID_REQUEST) - the schema cannot know those.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
AUTH = {"Authorization": "Basic " + base64.b64encode(b"fuzzer:pw").decode()}
EXAMPLES = 40


@pytest.fixture
def wsgi_app():
    """Django's WSGI handler, in the test's transaction: the handler would close the
    connection (and with it the transaction) around each request, as it does between requests."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    try:
        yield WSGIHandler()
    finally:
        for signal in (request_started, request_finished):
            signal.connect(close_old_connections)


@pytest.fixture
def api_schema(db, django_user_model, no_send, wsgi_app):
    import durableflow

    make_user(django_user_model, "fuzzer", superuser=True)
    # Something to find: generated ids will not exist, but the lists are not empty.
    for workflow in ("t.steps", "t.loop"):
        durableflow.start(workflow, {"n": 1})
    durableflow.operations.save_document("fuzzed", {"$workflow": "0.2", "initial": "d", "states": {"d": {"final": True}}})
    return schemathesis.openapi.from_wsgi("/api/durableflow/schema/", wsgi_app, headers=AUTH)


def _operations(schema) -> list:
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_conforms_to_its_schema(api_schema, mode):
    """Each operation in turn (schemathesis' lazy pytest loader does not run on pytest 9)."""
    operations = _operations(api_schema)
    assert len(operations) == 18
    tested = []

    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode, headers=AUTH))
        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def conforms(case):
            case.call_and_validate(headers=AUTH, checks=CHECKS)

        try:
            conforms()
        except Unsatisfiable:
            # Nothing about it can be made invalid (no parameter or body with a constraint to break).
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        tested.append(operation.label)
    assert len(tested) >= 4, tested
