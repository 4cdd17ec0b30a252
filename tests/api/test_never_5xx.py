"""No input makes the API or the admin's forms answer 5xx.

schemathesis (``test_api_schemathesis.py``) generates requests from the OpenAPI schema; what a
schema says nothing about is tried here, as explicit examples on every endpoint of the URL conf
(the numbers ``str.isdigit()`` takes and ``int()`` refuses, a 5,000-digit number, 10^5 ``[``...),
and hypothesis generates the inputs of every steering action of every admin (its form's fields,
page and bulk), explicit examples first. A 500 would raise in the test client.
"""

from __future__ import annotations

import json

import pytest
from django.contrib import admin
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import durableflow
from durableflow import operations
from durableflow.admin.actions import SteeringMixin
from durableflow.models import Execution, StepRecord
from tests.api.test_api_auth import BODY, ENDPOINTS, Endpoint
from tests.apiclient import PREFIX, make_user

EXAMPLES = 25  # per admin action, in every CI run
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))

DEEP = "[" * 100_000
# The cases that were 500s, and their kin.
NUMBERS = ["%C2%B2", "%E2%91%A0", "%D9%A1", "%EF%BC%95", "9" * 5000, "-1", "1e3", "0x1", "%00", "%0A", "+1"]
QUERIES = [f"{name}={value}" for name in ("page_size", "revision", "wait") for value in NUMBERS]
QUERIES += ["cursor=" + "A" * 2000, "cursor=%C2%B2", "cursor=W1tbW1tbW1tb", "status=%00", "workflow=" + "w" * 10_000]
QUERIES += ["ordering=%E2%91%A1", "parent=%ED%A0%80", "root=" + "%F0%9F%98%80" * 300, "format=xml", "a" * 5000 + "=1"]
BODIES = [
    DEEP,
    '{"a": ' * 100_000,
    "[" * 600 + '"' + '\\"' * 20_000,
    '{"payload": ' + DEEP + "}",
    '{"document": ' + "[" * 700 + "]" * 700 + "}",
    '{"name": "' + "n" * 100_000 + '", "payload": 1}',
    '{"type": "\\u0000", "payload": NaN}',
    '{"from_step": {"a": 1}}',
    '{"reason": ' + "9" * 5000 + "}",
    '{"workflow": "t.steps", "params": 1e999, "execution_id": ".."}',
    "\ufeff{}",
    "null",
    "",
]


@pytest.fixture
def targets(db, no_send) -> dict[str, str]:
    pending = durableflow.start("t.steps", {"n": 1}).id
    failed = durableflow.start("t.steps").id
    done = durableflow.start("t.steps").id
    Execution.objects.filter(pk=failed).update(status="failed", error={"code": "STEP_FAILED", "message": "x"})
    Execution.objects.filter(pk=done).update(status="completed", result=1)
    StepRecord.objects.create(execution_id=done, key="a", kind="run", status="completed", attempts=1, value=1)
    waiting = durableflow.start("t.token").id
    operations.deliver(waiting)
    final = {"$workflow": "0.2", "initial": "d", "states": {"d": {"final": True}}}
    document, _ = operations.save_document("fuzz.document", final)
    return {"pending": pending, "failed": failed, "done": done, "token": f"{waiting}:approve", "waiting": waiting,
            "document": document.name}  # fmt: skip


@pytest.fixture
def root(client, django_user_model):
    client.force_login(make_user(django_user_model, "root", superuser=True))
    return client


def _send(client, endpoint: Endpoint, path: str, body: str | None):
    if endpoint.method in ("get", "head"):
        return getattr(client, endpoint.method)(path)
    return getattr(client, endpoint.method)(path, body or "", content_type="application/json")


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.action], ids=lambda e: f"{e.method} {e.route}")
def test_odd_query_parameters_are_4xx_on_every_endpoint(root, targets, endpoint):
    for query in QUERIES:
        body = BODY.get((endpoint.basename, endpoint.action))
        path = f"{PREFIX}{endpoint.path(targets)}?{query}"
        response = _send(root, endpoint, path, json.dumps(body) if body else None)
        assert response.status_code < 500, (query, response.content[:300])
        if query.split("=")[0] in ("page_size", "revision", "wait", "cursor"):  # never a number or a cursor
            assert response.status_code >= 400, (query, response.status_code, response.content[:300])


@pytest.mark.parametrize(
    "endpoint", [e for e in ENDPOINTS if e.method in ("post", "put")], ids=lambda e: f"{e.method} {e.route}"
)
def test_hostile_bodies_are_4xx_on_every_endpoint_that_takes_one(root, targets, endpoint):
    for body in BODIES:
        response = _send(root, endpoint, PREFIX + endpoint.path(targets), body)
        assert response.status_code < 500, (body[:60], response.content[:300])
        if endpoint.action:
            assert response.status_code >= 400 or body in ("null", ""), (body[:60], response.status_code)


def test_odd_paths_are_json_4xx(root, targets):
    paths = ["executions/%C2%B2/", "executions/" + "x" * 10_000 + "/", "tokens/%0A/complete/", "nothing/" * 500]
    for odd in ("%00", "%ED%A0%80", "a%00b"):  # a NUL (PostgreSQL refuses it in a query), a lone surrogate's bytes
        paths += [f"executions/{odd}/", f"executions/{odd}/journal/", f"documents/{odd}/", f"documents/{odd}/revisions/"]
        paths += [f"post:executions/{odd}/cancel/", f"post:tokens/{odd}/complete/", f"put:documents/{odd}/"]
    for path in paths:
        method, _, path = path.rpartition(":")
        if method:
            response = getattr(root, method)(PREFIX + path, "{}", content_type="application/json")
        else:
            response = root.get(PREFIX + path)
        assert 400 <= response.status_code < 500 and response["Content-Type"] == "application/json", path


# The admin's action forms --------------------------------------------------------------------------------


def _steering_admins() -> list[tuple[type, object]]:
    registered = admin.site._registry.items()
    return [(model, model_admin) for model, model_admin in registered if isinstance(model_admin, SteeringMixin)]


ACTIONS = [(model, action) for model, model_admin in _steering_admins() for action in model_admin.steering]
EXTRA = st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=3)  # fields nobody declared
HOSTILE_TEXT = [DEEP, '{"a": ' * 100_000, "[" * 600 + "]" * 600, "x" * 100_000, "\x00", "NaN", "1e999", "", " "]


def test_every_steering_action_is_fuzzed_here():
    names = {(model._meta.model_name, action.name) for model, action in ACTIONS}
    assert names == {("execution", n) for n in ("cancel", "retry", "rerun", "fork", "signal", "complete-token")} | {
        ("workflowdocument", "validate")
    }


def _record(model, action, targets) -> str:
    if model._meta.model_name == "workflowdocument":
        from durableflow.models import WorkflowDocument

        return str(WorkflowDocument.objects.get(name=targets["document"]).pk)
    return {"retry": targets["failed"], "rerun": targets["done"], "fork": targets["done"],
            "complete-token": targets["waiting"]}.get(action.name, targets["pending"])  # fmt: skip


def _fields(action) -> list[str]:
    return list(action.form().fields)


field_text = st.one_of(st.text(max_size=300), st.sampled_from(HOSTILE_TEXT))


@pytest.mark.parametrize("model, action", ACTIONS, ids=[f"{m._meta.model_name}:{a.name}" for m, a in ACTIONS])
def test_no_input_to_an_admin_action_is_a_5xx(root, targets, model, action):
    record = _record(model, action, targets)
    info = model._meta.app_label, model._meta.model_name
    page = reverse(f"admin:{info[0]}_{info[1]}_action", args=[record, action.name])
    changelist = reverse(f"admin:{info[0]}_{info[1]}_changelist")
    names = _fields(action)

    @FUZZ
    @given(data=st.fixed_dictionaries({name: field_text for name in names}), extra=EXTRA)
    @example(data={name: DEEP for name in names}, extra={})
    @example(data={name: '{"a": ' * 100_000 for name in names}, extra={})
    @example(data={name: "[" * 600 + "]" * 600 for name in names}, extra={})
    @example(data={name: "x" * 100_000 for name in names}, extra={"payload": "\x00"})
    def never_5xx(data, extra):
        posted = {**extra, **data}
        assert root.post(page, posted).status_code in (200, 302)
        assert root.get(page, {k: v[:1000] for k, v in posted.items()}).status_code in (200, 302)
        if action.bulk:
            bulk = {**posted, "action": action.admin_action_name, "_selected_action": [record], "post": "yes"}
            assert root.post(changelist, bulk).status_code in (200, 302)

    never_5xx()


json_text = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
).map(json.dumps)


@FUZZ
@given(name=field_text, document=st.one_of(field_text, json_text))
@example(name="doc", document=DEEP)
@example(name="doc", document='{"$workflow": "0.2", "states": ' + "[" * 700 + "]" * 700 + "}")
@example(name="a/b\x00", document="{}")
def test_no_document_typed_in_the_admin_is_a_5xx(root, targets, name, document):
    add = reverse("admin:durableflow_workflowdocument_add")
    assert root.post(add, {"name": name, "document": document}).status_code in (200, 302)


@pytest.mark.parametrize(
    "path",
    [
        "execution/a%00b/change/",
        "execution/a%00b/do/cancel/",
        "execution/%ED%A0%80/change/",
        "execution/?workflow=a%00b",
        "execution/?status=a%00b",
        "execution/?q=a%00b",
        "execution/?a%00b=1",
        "workflowdocument/a%00b/change/",
        "store/?q=%00",
    ],
)
def test_a_nul_in_an_admin_url_is_not_a_5xx(root, targets, path):
    # PostgreSQL refuses a NUL in a query's text: the admin must not make such a query.
    response = root.get("/admin/durableflow/" + path, follow=True)
    assert response.status_code in (200, 404), response.status_code
