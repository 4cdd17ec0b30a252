"""Who may call what: every route and method, without credentials, with a user lacking the
permission, with a user holding exactly it, and as staff; CSRF for sessions; refusals change
nothing (SPEC §10: staff or the model permission for the action; configurable)."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pytest
from django.test import Client, override_settings

import durableflow
from durableflow import operations
from durableflow.models import Execution, StepRecord, WorkflowDocument
from tests.apiclient import Api, error, make_user, no_send  # noqa: F401 - fixture

DOCUMENT = {"$workflow": "0.2", "initial": "done", "states": {"done": {"final": True}}}


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # {pending} / {failed}: ids of executions made for the test
    permission: str  # the codename that opens it
    ok: int
    body: dict | None = None


ROUTES = [
    Route("get", "executions/", "view_execution", 200),
    Route("post", "executions/", "add_execution", 201, {"workflow": "t.steps", "params": {"n": 1}}),
    Route("get", "executions/{pending}/", "view_execution", 200),
    Route("get", "executions/{pending}/journal/", "view_execution", 200),
    Route("post", "executions/{pending}/cancel/", "change_execution", 200, {"reason": "auth matrix"}),
    Route("post", "executions/{failed}/retry/", "change_execution", 200),
    Route("post", "executions/{failed}/rerun/", "add_execution", 201),
    Route("post", "executions/{done}/fork/", "add_execution", 201, {"from_step": "a"}),
    Route("get", "workflows/", "view_execution", 200),
    Route("get", "schema/", "view_execution", 200),
    Route("get", "documents/", "view_workflowdocument", 200),
    Route("get", "documents/{document}/", "view_workflowdocument", 200),
    Route("get", "documents/{document}/revisions/", "view_workflowdocument", 200),
    Route("post", "documents/", "add_workflowdocument", 201, {"name": "auth.new", "document": DOCUMENT}),
    Route("put", "documents/{document}/", "change_workflowdocument", 200, {"document": {**DOCUMENT, "revision": "2"}}),
]
ROUTE_IDS = [f"{r.method.upper()} {r.path}" for r in ROUTES]
PERMISSIONS = ["view_execution", "add_execution", "change_execution", "delete_execution"]
PERMISSIONS += ["view_workflowdocument", "add_workflowdocument", "change_workflowdocument"]


@pytest.fixture
def targets(db, no_send) -> dict[str, str]:
    pending = durableflow.start("t.steps")
    failed = durableflow.start("t.steps")
    Execution.objects.filter(pk=failed.id).update(status="failed", error={"code": "STEP_FAILED", "message": "x"})
    done = durableflow.start("t.steps")
    Execution.objects.filter(pk=done.id).update(status="completed", result={"a": 1})
    StepRecord.objects.create(execution_id=done.id, key="a", kind="run", status="completed", attempts=1, value=1)
    document, _ = operations.save_document("auth.document", DOCUMENT)
    return {"pending": pending.id, "failed": failed.id, "done": done.id, "document": document.name}


def _state() -> list[tuple]:
    documents = WorkflowDocument.objects.values_list("name", "revision")
    return sorted(Execution.objects.values_list("id", "status", "error")) + sorted(documents)


def _call(client: Client, route: Route, targets: dict[str, str], **extra):
    api = Api(client)
    path = route.path.format(**targets)
    if route.method == "get":
        return api.get(path, **extra)
    return getattr(api, route.method)(path, route.body, **extra)


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_without_credentials_every_route_is_refused_and_nothing_changes(client, targets, route):
    before = _state()
    error(_call(client, route, targets), 403, "NOT_AUTHENTICATED")  # session first: no scheme to name
    assert _state() == before


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_with_a_scheme_first_the_refusal_is_401_naming_it(client, targets, route):
    basic_first = {
        "DEFAULT_AUTHENTICATION_CLASSES": [
            "rest_framework.authentication.BasicAuthentication",
            "rest_framework.authentication.SessionAuthentication",
        ]
    }
    with override_settings(REST_FRAMEWORK=basic_first):
        response = _call(client, route, targets)
    error(response, 401, "NOT_AUTHENTICATED")
    assert response["WWW-Authenticate"].startswith("Basic")


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize("permission", PERMISSIONS)
def test_a_user_gets_exactly_the_routes_of_their_permission(client, django_user_model, targets, route, permission):
    client.force_login(make_user(django_user_model, "someone", permission))
    before = _state()

    response = _call(client, route, targets)

    if permission == route.permission:
        assert response.status_code == route.ok, response.content
    else:
        body = error(response, 403, "PERMISSION_DENIED")
        assert route.permission in body["message"]
        assert _state() == before


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_staff_may_call_every_route(client, django_user_model, targets, route):
    client.force_login(make_user(django_user_model, "staffer", staff=True))
    assert _call(client, route, targets).status_code == route.ok


def test_an_inactive_staff_user_is_refused(client, django_user_model, targets):
    user = make_user(django_user_model, "gone", staff=True)
    credentials = base64.b64encode(b"gone:pw").decode()
    user.is_active = False
    user.save()
    # Basic authentication refuses an inactive user itself; the permission class too.
    error(Api(client).get("executions/", HTTP_AUTHORIZATION=f"Basic {credentials}"), 403, "NOT_AUTHENTICATED")


def test_basic_authentication_works_without_a_session(client, django_user_model, targets):
    make_user(django_user_model, "robot", "add_execution")
    credentials = base64.b64encode(b"robot:pw").decode()
    response = Api(client).post("executions/", {"workflow": "t.steps"}, HTTP_AUTHORIZATION=f"Basic {credentials}")
    assert response.status_code == 201


def test_a_session_needs_the_csrf_token_for_changes(django_user_model, targets):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(django_user_model, "browser", staff=True))
    api = Api(client)
    before = _state()

    refused = api.post(f"executions/{targets['pending']}/cancel/")
    started = api.post("executions/", {"workflow": "t.steps"})

    body = error(refused, 403, "PERMISSION_DENIED")
    assert "CSRF" in body["message"]
    error(started, 403, "PERMISSION_DENIED")
    assert _state() == before
    assert api.get("executions/").status_code == 200  # reads need no token
    client.cookies["csrftoken"] = token = "k" * 32  # what a page's {% csrf_token %} would have set
    assert api.post(f"executions/{targets['pending']}/cancel/", HTTP_X_CSRFTOKEN=token).status_code == 200


def test_the_permission_classes_are_configurable(client, django_user_model, targets):
    client.force_login(make_user(django_user_model, "reader", "view_execution"))
    with override_settings(DURABLEFLOW={"API_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"]}):
        error(Api(client).get("executions/"), 403, "PERMISSION_DENIED")
    assert Api(client).get("executions/").status_code == 200


@pytest.mark.parametrize("value", [[], "rest_framework.permissions.AllowAny", None])
def test_permission_classes_must_be_a_non_empty_list(value):
    from django.core.exceptions import ImproperlyConfigured

    from durableflow.conf import df_settings

    with override_settings(DURABLEFLOW={"API_PERMISSION_CLASSES": value}):
        with pytest.raises(ImproperlyConfigured, match="API_PERMISSION_CLASSES"):
            _ = df_settings.API_PERMISSION_CLASSES


def test_api_workflows_must_be_none_or_names():
    from django.core.exceptions import ImproperlyConfigured

    from durableflow.conf import df_settings

    with override_settings(DURABLEFLOW={"API_WORKFLOWS": "t.steps"}):
        with pytest.raises(ImproperlyConfigured, match="API_WORKFLOWS"):
            _ = df_settings.API_WORKFLOWS
    with override_settings(DURABLEFLOW={"API_WORKFLOWS": ["t.steps"]}):
        assert df_settings.API_WORKFLOWS == frozenset({"t.steps"})
