"""The REST API (SPEC §10, §14): each endpoint over the same verbs as the Python API."""

from __future__ import annotations

import time
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.db.models import TextField
from django.db.models.functions import Cast
from django.test import override_settings
from django.utils import timezone

import durableflow
from durableflow import operations
from durableflow.models import Execution, StepRecord
from tests.apiclient import Api, error
from tests.helpers import uid

EXECUTION_FIELDS = {
    "id", "workflow", "version", "status", "waiting_for", "wake_at", "parent", "root_id", "created_at",
    "started_at", "finished_at", "params", "result", "error", "metadata", "idempotency_key", "queue",
    "deliveries", "deadline_at", "concurrency_key", "cancel_requested", "compensations", "origin_id", "origin_kind",
    "origin_step",
}  # fmt: skip


def _deliver_all(execution_id: str) -> Execution:
    for _ in range(20):
        operations.deliver(execution_id)
        execution = Execution.objects.get(pk=execution_id)
        if execution.is_finished:
            return execution
    raise AssertionError(f"{execution_id} did not finish")


# Starting ---------------------------------------------------------------------------------


def test_start_answers_201_with_the_execution_and_sends_its_delivery(api, no_send, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("executions/", {"workflow": "t.steps", "params": {"n": 1}})

    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == EXECUTION_FIELDS
    assert (body["workflow"], body["status"], body["params"]) == ("t.steps", "pending", {"n": 1})
    assert body["root_id"] == body["id"]
    assert response["Location"].endswith(f"/api/durableflow/executions/{body['id']}/")
    assert no_send == [("durableflow.deliver", body["id"], "durableflow")]


@pytest.mark.parametrize("how", ["header", "field"])
def test_a_repeated_idempotency_key_answers_200_with_the_first_execution(api, how):
    key = uid("key")
    kwargs = {"HTTP_IDEMPOTENCY_KEY": key} if how == "header" else {}
    body = {"workflow": "t.steps", "params": {"n": 1}} | ({"idempotency_key": key} if how == "field" else {})

    first = api.post("executions/", body, **kwargs)
    again = api.post("executions/", body, **kwargs)

    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert first.json()["idempotency_key"] == key
    assert Execution.objects.filter(idempotency_key=key).count() == 1


def test_an_idempotency_key_reused_with_other_params_is_409(api):
    key = uid("key")
    api.post("executions/", {"workflow": "t.steps", "params": {"n": 1}}, HTTP_IDEMPOTENCY_KEY=key)
    conflict = api.post("executions/", {"workflow": "t.steps", "params": {"n": 2}}, HTTP_IDEMPOTENCY_KEY=key)

    error(conflict, 409, "IDEMPOTENCY_CONFLICT")
    assert Execution.objects.filter(idempotency_key=key).count() == 1


def test_a_header_and_a_field_that_disagree_are_refused(api):
    body = error(
        api.post("executions/", {"workflow": "t.steps", "idempotency_key": "a"}, HTTP_IDEMPOTENCY_KEY="b"),
        400,
        "INVALID_REQUEST",
    )
    assert "idempotency_key" in body["detail"]
    assert not Execution.objects.exists()


def test_a_chosen_execution_id_is_kept_and_repeats_like_a_key(api):
    execution_id = "order-7.v2"  # dots are fine in the URL too
    assert api.post("executions/", {"workflow": "t.steps", "execution_id": execution_id}).status_code == 201
    assert api.post("executions/", {"workflow": "t.steps", "execution_id": execution_id}).status_code == 200
    assert api.get(f"executions/{execution_id}/").json()["id"] == execution_id


def test_an_unknown_workflow_is_400_with_its_code_and_nothing_is_written(api):
    body = error(api.post("executions/", {"workflow": "no.such", "params": {}}), 400, "UNKNOWN_WORKFLOW")
    assert "no.such" in body["message"]
    assert not Execution.objects.exists()


def test_api_workflows_hides_the_others_as_404_without_revealing_them(api):
    with override_settings(DURABLEFLOW={"API_WORKFLOWS": ["t.steps"]}):
        hidden = error(api.post("executions/", {"workflow": "t.loop", "params": {"n": 1}}), 404, "UNKNOWN_WORKFLOW")
        unknown = error(api.post("executions/", {"workflow": "t.nope", "params": {}}), 404, "UNKNOWN_WORKFLOW")
        allowed = api.post("executions/", {"workflow": "t.steps"})
        listed = [w["name"] for w in api.get("workflows/").json()["results"]]
        from_python = durableflow.start("t.loop", {"n": 1})  # Python may still start it

    assert hidden["message"].replace("t.loop", "X") == unknown["message"].replace("t.nope", "X")
    assert allowed.status_code == 201
    assert listed == ["t.steps"]
    assert set(Execution.objects.values_list("workflow", flat=True)) == {"t.steps", "t.loop"}
    assert Execution.objects.get(workflow="t.loop").pk == from_python.pk


@pytest.mark.parametrize(
    "extra", [{"status": "completed"}, {"lease_token": "x" * 32}, {"attempts": 9}, {"result": 1}, {"queue": "other"}]
)
def test_read_only_and_unknown_fields_are_refused_not_ignored(api, extra):
    body = error(api.post("executions/", {"workflow": "t.steps", **extra}), 400, "INVALID_REQUEST")
    assert list(body["detail"]) == list(extra)
    assert not Execution.objects.exists()


@pytest.mark.parametrize("deadline", [30, 2.5, "2031-01-01T02:00:00+00:00", "2031-01-01T03:00:00+01:00"])
def test_a_deadline_in_seconds_or_as_a_date_and_time_is_the_execution_s(api, deadline):
    before = timezone.now()
    response = api.post("executions/", {"workflow": "t.steps", "deadline": deadline})

    assert response.status_code == 201, response.content
    execution = Execution.objects.get(pk=response.json()["id"])
    if isinstance(deadline, str):
        assert execution.deadline_at.isoformat() == "2031-01-01T02:00:00+00:00"
    else:
        assert abs((execution.deadline_at - before).total_seconds() - deadline) < 5
    assert response.json()["deadline_at"] is not None


@pytest.mark.parametrize(
    "deadline, code",
    [
        (0, "INVALID_PARAMS"),
        (-5, "INVALID_PARAMS"),
        (1e300, "INVALID_PARAMS"),
        (True, "INVALID_REQUEST"),
        ("soon", "INVALID_REQUEST"),
        ("2031-01-01T02:00:00", "INVALID_REQUEST"),  # no UTC offset: no moment
        ("2031-02-30T02:00:00+00:00", "INVALID_REQUEST"),
        ({"seconds": 5}, "INVALID_REQUEST"),
        ("9" * 10_000, "INVALID_REQUEST"),
    ],
)
def test_what_is_not_a_deadline_is_a_400_and_nothing_is_written(api, deadline, code):
    body = error(api.post("executions/", {"workflow": "t.steps", "deadline": deadline}), 400, code)
    assert "deadline" in (body["message"] if code == "INVALID_PARAMS" else body["detail"])
    assert not Execution.objects.exists()


# Reading ----------------------------------------------------------------------------------


def test_an_execution_shows_status_result_error_and_metadata(api):
    execution = durableflow.start("t.steps")
    _deliver_all(execution.id)

    body = api.get(f"executions/{execution.id}/").json()

    assert body["status"] == "completed"
    assert body["result"] == {"a": 1, "b": 2, "c": {"sum": 3}}
    assert (body["error"], body["metadata"], body["deliveries"]) == (None, {}, 1)
    assert "lease_token" not in body and "lease_expires_at" not in body


@pytest.mark.parametrize("execution_id", ["no-such-execution", "nul%00id", "x" * 201, "%F0%9F%98%80"])
def test_an_unknown_id_is_404(api, execution_id):
    for path in (f"executions/{execution_id}/", f"executions/{execution_id}/journal/"):
        error(api.get(path), 404, "NOT_FOUND")
    for action in ("cancel", "retry"):
        error(api.post(f"executions/{execution_id}/{action}/"), 404, "NOT_FOUND")


def test_wait_answers_at_once_for_a_finished_run_and_after_the_wait_for_an_unfinished_one(api):
    done = durableflow.start("t.steps")
    _deliver_all(done.id)
    pending = durableflow.start("t.steps")

    started = time.monotonic()
    assert api.get(f"executions/{done.id}/?wait=30").json()["status"] == "completed"
    assert time.monotonic() - started < 5
    started = time.monotonic()
    assert api.get(f"executions/{pending.id}/?wait=0.3").json()["status"] == "pending"
    assert 0.3 <= time.monotonic() - started < 5
    error(api.get("executions/nope/?wait=1"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    "wait", ["31", "-1", "nan", "inf", "1e1", "", "0x10", "5000000000", "%C2%B2", "%D9%A1", "1%0A", "9" * 5000]
)
def test_wait_is_a_number_of_seconds_up_to_30(api, wait):
    execution = durableflow.start("t.steps")
    body = error(api.get(f"executions/{execution.id}/?wait={wait}"), 400, "INVALID_REQUEST")
    assert "wait" in body["detail"]


@pytest.mark.django_db
def test_wait_finished_returns_the_execution_finished_or_not(no_send):
    with pytest.raises(durableflow.ExecutionNotFound):
        operations.wait_finished("nope", 0.01)
    execution = durableflow.start("t.steps")
    assert operations.wait_finished(execution.id, 0.05).status == "pending"
    durableflow.cancel(execution.id)
    assert operations.wait_finished(execution.id, None).status == "cancelled"


# The journal ------------------------------------------------------------------------------


def test_the_journal_lists_the_spec_fields_in_journal_order(api):
    execution = durableflow.start("t.loop", {"n": 12})
    _deliver_all(execution.id)

    first = api.get(f"executions/{execution.id}/journal/?page_size=5").json()
    pages, page = [first], first
    while page["next"]:
        page = api.client.get(page["next"]).json()
        pages.append(page)

    records = [record for page in pages for record in page["results"]]
    assert [len(page["results"]) for page in pages] == [5, 5, 2]
    assert [r["key"] for r in records] == [f"s{i}" for i in range(12)]
    assert set(records[0]) == {"key", "kind", "status", "attempts", "value", "error", "started_at", "finished_at"}
    fourth = records[3]
    assert (fourth["kind"], fourth["status"], fourth["value"], fourth["attempts"]) == ("run", "completed", 3, 1)
    back = api.client.get(pages[2]["previous"]).json()
    assert [r["key"] for r in back["results"]] == [f"s{i}" for i in range(5, 10)]


def test_a_10000_step_journal_pages_by_key_set_off_its_index(api, django_assert_max_num_queries):
    execution = durableflow.start("t.loop", {"n": 0})
    StepRecord.objects.bulk_create(
        [StepRecord(execution_id=execution.id, key=f"s{i}", kind="run", status="completed", value=i)
         for i in range(10_000)],
        batch_size=2000,
    )  # fmt: skip
    other = durableflow.start("t.loop", {"n": 0})  # interleaved rows of another journal
    StepRecord.objects.bulk_create(
        [StepRecord(execution_id=other.id, key=f"s{i}", kind="run", status="completed") for i in range(100)]
    )

    url, seen, sqls = f"/api/durableflow/executions/{execution.id}/journal/?page_size=1000", [], []
    while url:
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            page = api.client.get(url).json()
        sqls.append(queries.captured_queries[-1]["sql"])
        seen += [record["value"] for record in page["results"]]
        url = page["next"]

    assert seen == list(range(10_000))
    assert len(sqls) == 10
    # Every page after the first is the same statement: a range of (execution, id), no OFFSET.
    shapes = {_shape(sql) for sql in sqls[1:]}
    assert len(shapes) == 1 and "OFFSET" not in sqls[-1].upper(), shapes
    assert "durableflow_step_journal" in _plan(sqls[-1])


def _shape(sql: str) -> str:
    import re

    return re.sub(r"\b\d+\b|'[^']*'", "?", sql)


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # With sorts and sequential scans priced out, a plan that still sorts could not
            # have read the order off an index.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute("EXPLAIN " + sql)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
        plan = "\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall())
    assert "Sort" not in plan and "TEMP B-TREE" not in plan, plan
    return plan


# Lists ------------------------------------------------------------------------------------


def _executions(count: int, **fields) -> list[Execution]:
    now = timezone.now()
    rows = [
        Execution(id=uid("e"), workflow=fields.get("workflow", "t.steps"), status=fields.get("status", "completed"),
                  queue="q", root_id=fields.get("root_id", "r"), parent_id=fields.get("parent_id"),
                  created_at=fields.get("created_at", now - timedelta(seconds=i)))
        for i in range(count)
    ]  # fmt: skip
    return Execution.objects.bulk_create(rows)


def _all_pages(api: Api, query: str) -> list[list[str]]:
    pages, url = [], f"/api/durableflow/executions/?{query}"
    while url:
        response = api.client.get(url)
        assert response.status_code == 200, response.content
        pages.append([row["id"] for row in response.json()["results"]])
        url = response.json()["next"]
    return pages


def test_lists_page_newest_first_by_key_set_with_ties_on_created_at(api):
    same_moment = timezone.now() - timedelta(hours=1)
    tied = _executions(7, created_at=same_moment)  # one timestamp: the id breaks the tie
    newer = _executions(4)
    expected = [e.id for e in newer] + sorted((e.id for e in tied), reverse=True)

    pages = _all_pages(api, "page_size=3")

    assert [len(page) for page in pages] == [3, 3, 3, 2]
    assert [i for page in pages for i in page] == expected
    oldest_first = _all_pages(api, "page_size=4&ordering=created_at")
    assert [i for page in oldest_first for i in page] == expected[::-1]


def test_a_previous_link_reads_the_page_before(api):
    _executions(9)
    first = api.get("executions/?page_size=4").json()
    second = api.client.get(first["next"]).json()
    back = api.client.get(second["previous"]).json()

    assert first["previous"] is None
    assert [r["id"] for r in back["results"]] == [r["id"] for r in first["results"]]
    assert back["next"] is not None


def test_lists_filter_by_status_workflow_parent_and_root(api):
    parent = _executions(1)[0]
    children = _executions(2, parent_id=parent.id, root_id=parent.id, workflow="t.loop", status="failed")
    _executions(3, status="waiting")

    def ids(query):
        return {row["id"] for row in api.get(f"executions/?{query}").json()["results"]}

    assert ids("status=failed") == {c.id for c in children}
    assert ids("workflow=t.loop&status=failed") == {c.id for c in children}
    assert ids(f"parent={parent.id}") == ids(f"root={parent.id}") == {c.id for c in children}
    assert len(ids("status=waiting")) == 3
    assert ids("workflow=t.none") == set()
    row = api.get("executions/?status=failed").json()["results"][0]
    assert "params" not in row and "result" not in row and row["parent"] == parent.id


@pytest.mark.parametrize(
    "query, field",
    [
        ("status=bogus", "status"),
        ("_connector=OR", "_connector"),
        ("lease_token=x", "lease_token"),
        ("status__in=failed", "status__in"),
        ("ordering=lease_token", "ordering"),
        ("ordering=-id", "ordering"),
        ("page_size=10000000", "page_size"),
        ("page_size=0", "page_size"),
        ("page_size=%C2%B2", "page_size"),  # ², which str.isdigit() takes and int() refuses
        ("page_size=%E2%91%A0", "page_size"),  # ①
        ("page_size=%D9%A1", "page_size"),  # ١, an Arabic-Indic one that int() reads as 1
        ("page_size=" + "9" * 5000, "page_size"),
        ("page_size=+5", "page_size"),
        ("cursor=" + "W" * 1024, "cursor"),
        ("cursor=" + "WwpbW1tb" * 100, "cursor"),  # base64 of deep brackets
        ("cursor=!!!", "cursor"),
        ("cursor=WyJ4Il0", "cursor"),  # base64 of '["x"]'
        ("workflow=a%00b", "workflow"),
        ("parent=" + "x" * 201, "parent"),
        ("status=", "status"),
        ("status=failed&status=completed", "status"),
    ],
)
def test_unknown_or_invalid_list_parameters_are_400(api, query, field):
    body = error(api.get(f"executions/?{query}"), 400, "INVALID_REQUEST")
    assert field in body["detail"]


@pytest.mark.parametrize("size", ["%C2%B2", "%E2%91%A0", "%D9%A1", "9" * 5000, "%EF%BC%95"])
def test_odd_digits_in_page_size_are_400_on_every_list(api, size):
    execution = durableflow.start("t.steps")
    operations.save_document("paged", {"$workflow": "0.2", "initial": "d", "states": {"d": {"final": True}}})
    for path in ("executions/", f"executions/{execution.id}/journal/", "documents/", "documents/paged/revisions/"):
        body = error(api.get(f"{path}?page_size={size}"), 400, "INVALID_REQUEST")
        assert "page_size" in body["detail"], path


def test_a_forged_cursor_only_moves_the_position(api):
    import base64
    import json

    rows = _executions(3)
    # The cursor's timestamp as the database compares it: exact on PostgreSQL, stored text on SQLite.
    stored = Execution.objects.annotate(text=Cast("created_at", TextField())).get(pk=rows[1].pk).text
    moment = rows[1].created_at.isoformat() if connection.vendor == "postgresql" else stored
    cursor = base64.urlsafe_b64encode(json.dumps([False, [moment, rows[1].id]]).encode()).decode().rstrip("=")

    assert [r["id"] for r in api.get(f"executions/?cursor={cursor}").json()["results"]] == [rows[2].id]


# Steering ---------------------------------------------------------------------------------


def test_cancel_records_the_reason_and_a_second_cancel_is_409(api):
    execution = durableflow.start("t.steps")

    cancelled = api.post(f"executions/{execution.id}/cancel/", {"reason": "not needed"})
    again = api.post(f"executions/{execution.id}/cancel/")

    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["error"] == {"code": "CANCELLED", "message": "not needed"}
    error(again, 409, "INVALID_TRANSITION")


def test_retrying_a_completed_run_is_409_and_a_failed_one_resumes(api):
    done = durableflow.start("t.steps")
    _deliver_all(done.id)
    failed = durableflow.start("t.steps")
    Execution.objects.filter(pk=failed.id).update(status="failed", error={"code": "STEP_FAILED", "message": "boom"})

    error(api.post(f"executions/{done.id}/retry/"), 409, "INVALID_TRANSITION")
    resumed = api.post(f"executions/{failed.id}/retry/")

    assert resumed.status_code == 200 and resumed.json()["status"] == "pending"
    assert Execution.objects.get(pk=done.id).status == "completed"


def test_steering_bodies_take_only_their_fields(api):
    execution = durableflow.start("t.steps")
    error(api.post(f"executions/{execution.id}/cancel/", {"reason": 5}), 400, "INVALID_REQUEST")
    error(api.post(f"executions/{execution.id}/cancel/", {"status": "cancelled"}), 400, "INVALID_REQUEST")
    error(api.post(f"executions/{execution.id}/retry/", {"force": True}), 400, "INVALID_REQUEST")
    assert Execution.objects.get(pk=execution.id).status == "pending"


# Workflows, schema, the rest --------------------------------------------------------------


def test_workflows_lists_the_registered_workflows(api):
    results = api.get("workflows/").json()["results"]
    steps = next(w for w in results if w["name"] == "t.steps")
    assert steps == {"name": "t.steps", "version": "1", "kind": "code", "description": "", "on_event": None, "default": True}
    assert [w["name"] for w in results] == sorted(w["name"] for w in results)


def test_workflows_lists_every_registered_version_and_which_one_a_start_runs(api):
    from durableflow.registry import WorkflowDefinition, registry

    def steps_v2(ctx, params):
        return 2

    registry.register(WorkflowDefinition("t.steps", steps_v2, version="2"))
    try:
        listed = [(w["version"], w["default"]) for w in api.get("workflows/").json()["results"] if w["name"] == "t.steps"]
    finally:
        registry.unregister("t.steps", "2")
    assert listed == [("1", False), ("2", True)]


def test_the_schema_is_openapi_3_of_the_api_alone(api):
    response = api.get("schema/")
    schema = response.json()

    assert response.status_code == 200
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == {
        "/api/durableflow/executions/",
        "/api/durableflow/executions/{id}/",
        "/api/durableflow/executions/{id}/journal/",
        "/api/durableflow/executions/{id}/streams/{stream_id}/",
        "/api/durableflow/executions/{id}/cancel/",
        "/api/durableflow/executions/{id}/retry/",
        "/api/durableflow/executions/{id}/rerun/",
        "/api/durableflow/executions/{id}/fork/",
        "/api/durableflow/executions/{id}/signals/",
        "/api/durableflow/workflows/",
        "/api/durableflow/events/",
        "/api/durableflow/tokens/{token}/complete/",
        "/api/durableflow/documents/",
        "/api/durableflow/documents/{name}/",
        "/api/durableflow/documents/{name}/revisions/",
    }
    start = schema["paths"]["/api/durableflow/executions/"]["post"]
    assert {"200", "201", "400", "409", "413", "415"} <= set(start["responses"])
    assert start["responses"]["409"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    yaml = api.get("schema/", HTTP_ACCEPT="application/vnd.oai.openapi")
    assert yaml["Content-Type"].startswith("application/vnd.oai.openapi") and b"openapi: 3." in yaml.content


@pytest.mark.parametrize("path", ["", "nope/", "executions", "executions/x/y/z/"])
def test_other_paths_under_the_mount_answer_a_json_404(api, path):
    error(api.get(path), 404, "NOT_FOUND")


def test_methods_and_media_types_the_api_does_not_serve(api):
    put = api.client.put("/api/durableflow/executions/", "{}", content_type="application/json")
    error(put, 405, "METHOD_NOT_ALLOWED")
    error(api.client.options("/api/durableflow/executions/"), 405, "METHOD_NOT_ALLOWED")
    error(api.get("executions/", HTTP_ACCEPT="text/html"), 406, "NOT_ACCEPTABLE")
    assert api.client.head("/api/durableflow/executions/").status_code == 200


def test_the_error_of_a_refused_surrogate_is_still_valid_json(api):
    response = api.post("executions/", raw='{"workflow": "w\\ud800"}')
    body = error(response, 400, "UNKNOWN_WORKFLOW")
    assert "\\ud800" in body["message"]


def test_ids_with_url_characters_are_addressable(api):
    execution_id = "a b?c#d%e"
    assert api.post("executions/", {"workflow": "t.steps", "execution_id": execution_id}).status_code == 201
    assert api.get(f"executions/{quote(execution_id, safe='')}/").json()["id"] == execution_id


@pytest.mark.parametrize(
    "query",
    ["", "status=failed", "workflow=t.loop", "workflow=t.loop&status=failed", "ordering=created_at&status=completed"],
)
def test_every_list_page_is_an_index_range_without_a_sort(api, query):
    from django.test.utils import CaptureQueriesContext

    _executions(30, workflow="t.loop", status="failed")
    _executions(30, status="completed")
    first = api.get(f"executions/?page_size=10&{query}").json()
    assert first["next"], first
    with CaptureQueriesContext(connection) as queries:
        assert api.client.get(first["next"]).status_code == 200
    page_sql = queries.captured_queries[-1]["sql"]

    assert "OFFSET" not in page_sql.upper() and "COUNT(" not in page_sql.upper()
    assert "durableflow_exec_" in _plan(page_sql)


def test_the_demo_serves_swagger_ui_from_local_assets(api):
    page = api.client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html  # no CDN
    assert "/api/durableflow/schema/" in html


def test_a_journal_page_ends_before_4_mb_of_values_and_holds_one_record_at_least(api):
    execution = durableflow.start("t.loop", {"n": 0})
    big = "x" * 900_000
    StepRecord.objects.bulk_create(
        [StepRecord(execution_id=execution.id, key=f"s{i}", kind="run", status="completed", value=big)
         for i in range(10)]
        + [StepRecord(execution_id=execution.id, key="huge", kind="run", status="completed", value="y" * 5_000_000)]
        + [StepRecord(execution_id=execution.id, key=f"t{i}", kind="run", status="completed", value=i)
           for i in range(3)],
    )  # fmt: skip

    pages, url = [], f"/api/durableflow/executions/{execution.id}/journal/?page_size=1000"
    while url:
        response = api.client.get(url)
        assert len(response.content) < 6_000_000
        pages.append([record["key"] for record in response.json()["results"]])
        url = response.json()["next"]

    assert pages == [[f"s{i}" for i in range(4)], [f"s{i}" for i in range(4, 8)], ["s8", "s9"], ["huge"],
                     ["t0", "t1", "t2"]]  # fmt: skip
    back = api.client.get(api.get(f"executions/{execution.id}/journal/?page_size=3").json()["next"]).json()
    previous = api.client.get(back["previous"]).json()
    assert [record["key"] for record in previous["results"]] == ["s0", "s1", "s2"]
