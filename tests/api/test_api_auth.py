"""Who may call what: every endpoint and method of ``durableflow.urls``, found in the URL conf
(so that a new endpoint fails here until it is given its permission), for anonymous callers,
an authenticated user without permissions, staff without permissions, a user holding each one
of durableflow's model permissions, and a superuser.

Django's model permissions, as the admin checks them; ``is_staff`` grants nothing. No caller
gets a 2xx they are not allowed, a refusal changes nothing, and no answer holds data the
caller may not read: the executions, journals and documents below carry a secret that must
only ever reach those who may view them.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from django.db import transaction
from django.test import Client, override_settings
from django.utils import timezone

import durableflow
import durableflow.urls
from durableflow import operations
from durableflow.api import errors
from durableflow.models import Execution, StepRecord, StreamChunk, WorkflowDocument
from tests.apiclient import PREFIX, Api, error, make_user

SECRET = "s3cr3t-7f1d"  # in params, results, errors, metadata, journal values and a document
DOCUMENT = {"$workflow": "0.2", "initial": "done", "states": {"done": {"final": True}}}
SECRET_DOCUMENT = {"$workflow": "0.2", "initial": SECRET, "states": {SECRET: {"final": True}}}
METHODS = ("get", "head", "post", "put", "patch", "delete")
STREAM = "log"  # each run's stream, whose chunk is the secret

# What opens each endpoint's action: the intended mapping, written out (not read from the views).
OPENS: dict[tuple[str, str], set[str]] = {
    ("execution", "list"): {"view_execution"},
    ("execution", "create"): {"add_execution"},
    ("execution", "retrieve"): {"view_execution"},
    ("execution", "journal"): {"view_execution"},
    ("execution", "stream"): {"view_execution"},
    ("execution", "cancel"): {"change_execution"},
    ("execution", "retry"): {"change_execution"},
    ("execution", "rerun"): {"add_execution"},
    ("execution", "fork"): {"add_execution"},
    ("execution", "signals"): {"change_execution"},
    ("workflow", "list"): {"view_execution", "add_execution"},
    ("event", "create"): {"change_execution"},
    ("token", "complete"): {"change_execution"},
    ("document", "list"): {"view_workflowdocument"},
    ("document", "create"): {"add_workflowdocument"},
    ("document", "retrieve"): {"view_workflowdocument"},
    ("document", "update"): {"change_workflowdocument"},
    ("document", "revisions"): {"view_workflowdocument"},
    ("schema", "get"): {"view_execution", "add_execution", "change_execution"},
}
# Which execution an action acts on, its body, and its status when allowed.
TARGET = {"retry": "failed", "rerun": "done", "fork": "done"}
BODY = {
    ("execution", "create"): {"workflow": "t.steps", "params": {"n": 1}},
    ("execution", "cancel"): {"reason": "auth matrix"},
    ("execution", "fork"): {"from_step": "a"},
    ("execution", "signals"): {"name": "go", "payload": 1},
    ("event", "create"): {"type": "t.event", "payload": {}},
    ("token", "complete"): {"payload": 1},
    ("document", "create"): {"name": "auth.new", "document": DOCUMENT},
    ("document", "update"): {"document": {**SECRET_DOCUMENT, "revision": "2"}},
}
CREATED = {("execution", "create"), ("execution", "rerun"), ("execution", "fork"), ("document", "create")}


@dataclass(frozen=True)
class Endpoint:
    basename: str
    action: str | None  # None: a method the route does not answer
    method: str
    route: str  # the URL conf's regex, as it names the endpoint in a failure

    @property
    def opened_by(self) -> set[str]:
        return OPENS[(self.basename, self.action)] if self.action else set()

    @property
    def reads_executions(self) -> bool:
        return "view_execution" in self.opened_by

    def path(self, targets: dict[str, str]) -> str:
        values = {"pk": targets[TARGET.get(self.action or "", "pending")], "name": targets["document"]}
        values["stream_id"] = STREAM
        values["token"] = quote(targets["token"], safe="")
        text = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: values[m.group(1)], self.route)
        return text.lstrip("^").rstrip("$")


def endpoints() -> list[Endpoint]:
    """Every route of the API and every method, from the URL conf."""
    found = []
    for pattern in durableflow.urls.urlpatterns:
        callback = pattern.callback
        if callback is errors.not_found:
            continue
        actions = getattr(callback, "actions", None)
        if actions is None:  # an APIView: its methods are its handlers
            actions = {method: "get" for method in ("get", "head") if hasattr(callback.cls, "get")}
        else:
            actions = {**actions, **({"head": actions["get"]} if "get" in actions else {})}
        basename = pattern.name.rsplit("-", 1)[0]
        for method in METHODS:
            found.append(Endpoint(basename, actions.get(method), method, str(pattern.pattern)))
    return found


ENDPOINTS = endpoints()


def test_every_endpoint_of_the_url_conf_has_its_permission_written_here():
    described = {(e.basename, e.action) for e in ENDPOINTS if e.action}
    assert described == set(OPENS), "a new endpoint? add it to OPENS, BODY and TARGET"
    assert len({e.route for e in ENDPOINTS}) == 16


def _codenames() -> list[str]:
    """durableflow's model permissions, from its models (as ``migrate`` creates them)."""
    from django.apps import apps

    names = []
    for model in apps.get_app_config("durableflow").get_models():
        opts = model._meta
        names += [f"{verb}_{opts.model_name}" for verb in opts.default_permissions]
        names += [codename for codename, _ in opts.permissions]
    return sorted(names)


PERSONAS = ["anonymous", "authenticated", "staff", *_codenames(), "superuser"]


@pytest.fixture
def targets(db, no_send) -> dict[str, str]:
    def secret_run(status: str, **fields) -> str:
        execution = durableflow.start("t.steps", {"secret": SECRET})
        Execution.objects.filter(pk=execution.id).update(
            status=status, metadata={"note": SECRET}, **fields
        )
        StepRecord.objects.create(
            execution_id=execution.id, key="a", kind="run", status="completed", attempts=1, value=SECRET
        )
        StreamChunk.objects.create(execution_id=execution.id, stream_id=STREAM, seq=1, chunk=SECRET, at=timezone.now())
        return execution.id

    waiting = durableflow.start("t.token", {"secret": SECRET})
    operations.deliver(waiting.id)
    assert Execution.objects.get(pk=waiting.id).status == "waiting"
    document, _ = operations.save_document("auth.document", SECRET_DOCUMENT)
    return {
        "pending": secret_run("pending"),
        "failed": secret_run("failed", error={"code": "STEP_FAILED", "message": SECRET}),
        "done": secret_run("completed", result={"secret": SECRET}),
        "token": f"{waiting.id}:approve",
        "document": document.name,
    }


def _state() -> list[tuple]:
    documents = WorkflowDocument.objects.values_list("name", "revision")
    executions = Execution.objects.values_list("id", "status", "error", "cancel_requested")
    return sorted(executions) + sorted(documents) + [(StepRecord.objects.count(),)]


def _call(client: Client, endpoint: Endpoint, targets: dict[str, str], **extra):
    path = PREFIX + endpoint.path(targets)
    body = BODY.get((endpoint.basename, endpoint.action))
    if endpoint.method in ("get", "head"):
        return getattr(client, endpoint.method)(path, **extra)
    data = b"" if body is None else json.dumps(body)
    return getattr(client, endpoint.method)(path, data, content_type="application/json", **extra)


def _client(persona: str, django_user_model) -> tuple[Client, set[str]]:
    client = Client()
    if persona == "anonymous":
        return client, set()
    if persona == "superuser":
        client.force_login(make_user(django_user_model, "super", superuser=True))
        return client, {"*"}
    held = set() if persona in ("authenticated", "staff") else {persona}
    client.force_login(make_user(django_user_model, persona, *held, staff=persona == "staff"))
    return client, held


@pytest.mark.parametrize("persona", PERSONAS)
def test_each_caller_gets_exactly_what_it_may_and_sees_nothing_more(django_user_model, targets, persona):
    stored = Permission.objects.filter(content_type__app_label="durableflow").values_list("codename", flat=True)
    assert sorted(stored) == _codenames()
    client, held = _client(persona, django_user_model)
    may_read = {"*", "view_execution"} & held
    may_read_documents = {"*", "view_workflowdocument"} & held
    problems = []

    for endpoint in ENDPOINTS:
        allowed = bool(held & ({"*"} | endpoint.opened_by)) and endpoint.action is not None
        with transaction.atomic():
            before = _state()
            response = _call(client, endpoint, targets)
            after = _state()
            transaction.set_rollback(True)
        where = f"{persona}: {endpoint.method.upper()} {endpoint.path(targets)}"
        status, content = response.status_code, response.content.decode()

        if endpoint.action is None:
            expected = 405
        elif not allowed:
            expected = 403
        else:
            expected = 201 if (endpoint.basename, endpoint.action) in CREATED else 200
        if status != expected:
            problems.append(f"{where}: {status}, expected {expected}: {content[:200]}")
        if status >= 300 and after != before:
            problems.append(f"{where}: refused with {status}, but it changed something")
        if SECRET in content and not (
            200 <= status < 300 and (may_read if endpoint.basename != "document" else may_read_documents)
        ):
            problems.append(f"{where}: {status} shows what this caller may not read: {content[:200]}")
        if 400 <= status < 500 and endpoint.method != "head":
            body = response.json()
            if not ({"code", "message"} <= set(body) <= {"code", "message", "detail"}):
                problems.append(f"{where}: not the error shape: {content[:200]}")
            elif persona == "anonymous" and endpoint.action and body["code"] != "NOT_AUTHENTICATED":
                problems.append(f"{where}: {body['code']}, expected NOT_AUTHENTICATED")

    assert not problems, "\n".join(problems)


def test_a_caller_who_may_start_but_not_read_gets_the_id_only(client, django_user_model, targets):
    """A rerun, a fork or an idempotent repeat would otherwise show another run's params and result."""
    api = Api(client).login(make_user(django_user_model, "starter", "add_execution"))
    first = durableflow.start("t.steps", {"secret": SECRET}, idempotency_key="k-1")

    repeat = {"workflow": "t.steps", "params": {"secret": SECRET}, "idempotency_key": "k-1"}
    answers = {
        "repeat": api.post("executions/", repeat),
        "rerun": api.post(f"executions/{targets['done']}/rerun/"),
        "fork": api.post(f"executions/{targets['done']}/fork/", {"from_step": "a"}),
        "new": api.post("executions/", {"workflow": "t.steps", "params": {"n": 1}}),
    }

    assert answers["repeat"].status_code == 200 and answers["repeat"].json() == {"id": first.id}
    for name in ("rerun", "fork", "new"):
        response = answers[name]
        assert response.status_code == 201, (name, response.content)
        assert set(response.json()) == {"id"}, name
        assert response["Location"].endswith(f"/executions/{response.json()['id']}/")
    error(api.get(f"executions/{answers['new'].json()['id']}/"), 403, "PERMISSION_DENIED")


def test_a_steerer_who_may_not_read_gets_the_id_only(client, django_user_model, targets):
    api = Api(client).login(make_user(django_user_model, "steerer", "change_execution"))
    assert api.post(f"executions/{targets['pending']}/cancel/").json() == {"id": targets["pending"]}
    assert api.post(f"executions/{targets['failed']}/retry/").json() == {"id": targets["failed"]}


def test_a_reader_gets_the_whole_execution(client, django_user_model, targets):
    api = Api(client).login(make_user(django_user_model, "both", "add_execution", "view_execution"))
    rerun = api.post(f"executions/{targets['done']}/rerun/").json()
    assert rerun["params"] == {"secret": SECRET} and rerun["status"] == "pending"


def test_conflicts_and_reruns_do_not_name_a_workflow_the_api_hides(client, django_user_model, targets):
    api = Api(client).login(make_user(django_user_model, "both", "add_execution", "view_execution"))
    hidden = durableflow.start("t.loop", {"n": 0}, execution_id="hidden-run")
    Execution.objects.filter(pk=hidden.id).update(status="completed")
    durableflow.start("t.steps", {"n": 1}, idempotency_key="taken")

    with override_settings(DURABLEFLOW={"API_WORKFLOWS": ["t.steps"]}):
        by_key = error(api.post("executions/", {"workflow": "t.steps", "idempotency_key": "taken"}), 409,
                       "IDEMPOTENCY_CONFLICT")  # fmt: skip
        by_id = error(api.post("executions/", {"workflow": "t.steps", "execution_id": "hidden-run"}), 409,
                      "IDEMPOTENCY_CONFLICT")  # fmt: skip
        rerun = error(api.post("executions/hidden-run/rerun/"), 404, "UNKNOWN_WORKFLOW")
        fork = error(api.post("executions/hidden-run/fork/", {"from_step": "a"}), 404, "UNKNOWN_WORKFLOW")

    for body in (by_key, by_id, rerun, fork):
        assert "t.loop" not in str(body), body
    assert "idempotency key" in by_key["message"] and "execution id" in by_id["message"]


# Authentication ---------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.action], ids=lambda e: f"{e.method} {e.route}")
def test_with_a_scheme_first_the_refusal_is_401_naming_it(client, targets, endpoint):
    basic_first = {
        "DEFAULT_AUTHENTICATION_CLASSES": [
            "rest_framework.authentication.BasicAuthentication",
            "rest_framework.authentication.SessionAuthentication",
        ]
    }
    with override_settings(REST_FRAMEWORK=basic_first):
        response = _call(client, endpoint, targets)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Basic")


def test_staff_without_permissions_is_refused_everywhere_the_admin_refuses_it(client, django_user_model, targets):
    client.force_login(make_user(django_user_model, "staffer", staff=True))
    body = error(Api(client).get("executions/"), 403, "PERMISSION_DENIED")
    assert body["message"] == "the permission durableflow.view_execution is needed"
    assert client.get("/admin/durableflow/execution/").status_code == 403


def test_an_inactive_user_is_refused(client, django_user_model, targets):
    user = make_user(django_user_model, "gone", superuser=True)
    credentials = base64.b64encode(b"gone:pw").decode()
    user.is_active = False
    user.save()
    # Basic authentication refuses an inactive user itself; the permission class too.
    error(Api(client).get("executions/", HTTP_AUTHORIZATION=f"Basic {credentials}"), 403, "NOT_AUTHENTICATED")
    client.force_login(user)
    error(Api(client).get("executions/"), 403, "NOT_AUTHENTICATED")


def test_basic_authentication_works_without_a_session(client, django_user_model, targets):
    make_user(django_user_model, "robot", "add_execution")
    credentials = base64.b64encode(b"robot:pw").decode()
    response = Api(client).post("executions/", {"workflow": "t.steps"}, HTTP_AUTHORIZATION=f"Basic {credentials}")
    assert response.status_code == 201


def test_a_session_needs_the_csrf_token_for_changes(django_user_model, targets):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(django_user_model, "browser", superuser=True))
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


# Settings ---------------------------------------------------------------------------------------


def test_the_permission_classes_are_configurable(client, django_user_model, targets):
    client.force_login(make_user(django_user_model, "reader", "view_execution"))
    with override_settings(DURABLEFLOW={"API_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"]}):
        error(Api(client).get("executions/"), 403, "PERMISSION_DENIED")
    assert Api(client).get("executions/").status_code == 200


def test_with_other_classes_the_id_only_answer_follows_them(client, django_user_model, targets):
    client.force_login(make_user(django_user_model, "admin-ish", staff=True))
    with override_settings(DURABLEFLOW={"API_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"]}):
        rerun = Api(client).post(f"executions/{targets['done']}/rerun/")
    assert rerun.status_code == 201 and rerun.json()["params"] == {"secret": SECRET}


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
