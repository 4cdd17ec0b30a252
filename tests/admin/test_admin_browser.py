"""The admin in a real browser (headless Chromium) against runs on real workers: log in, read a
running execution's timeline, cancel it through its confirmation page, retry a failed run.

Screenshots of the changelist and the execution pages are written to
``$DURABLEFLOW_TEST_ARTIFACTS`` (default: a pytest temporary folder, printed in the report).
"""

from __future__ import annotations

import pytest
from django.urls import reverse

import durableflow
from durableflow.models import Execution
from tests.browser import AdminServer, missing_browser
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker

MISSING = missing_browser()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(MISSING is not None, reason=f"browser tests skipped: {MISSING}"),
]


def open_execution(page, server: AdminServer, execution_id: str) -> None:
    page.goto(f"{server.url}{reverse('admin:durableflow_execution_change', args=[execution_id])}")


def shown_status(page) -> str:
    return page.locator(".field-status_badge .df-status").inner_text().strip()


def reload_until_status(page, status: str, timeout: float = 60) -> None:
    from playwright.sync_api import Error

    def shows() -> bool:
        # Load the page anew rather than reload(): a reload issued while the confirmation's
        # redirect is still settling fails with "Not attached to an active page".
        try:
            page.wait_for_load_state("load")
            page.goto(page.url, wait_until="load")
        except Error:
            return False
        return shown_status(page) == status

    wait_for(shows, timeout=timeout, interval=0.5, what=f"the page to show {status}")


def test_log_in_read_a_running_execution_and_cancel_it(cluster, page, admin_server, artifacts):
    tag = uid("hold")
    running = durableflow.start("t.admin-hold", {"tag": tag, "seconds": 90, "cool_off": 1})
    try:
        # Neighbours for the changelist's screenshot: one of each outcome.
        done = durableflow.start("t.steps")
        failed = durableflow.start("t.admin-fail", {"tag": uid("fail")})
        sleeping = durableflow.start("t.timer", {"seconds": 3600})
        wait_for(lambda: Marker.count(f"{tag}:holding"), timeout=60, what="the run to be in its held step")
        wait_status(done.id, "completed")
        wait_status(failed.id, "failed")
        wait_status(sleeping.id, "waiting")

        ids = ",".join(e.id for e in (running, done, failed, sleeping))
        page.goto(f"{admin_server.url}{reverse('admin:durableflow_execution_changelist')}?id__in={ids}")
        assert page.locator("#result_list tbody tr").count() == 4
        assert page.locator("#result_list .df-status-running").count() == 1
        artifacts.screenshot(page, "admin-changelist")

        page.locator("#result_list th.field-id a", has_text=running.id).click()
        assert shown_status(page) == "running"
        keys = page.locator("table.df-timeline tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")
        assert keys == ["prepare", "reserve-stock", "cool-off", "charge"]
        assert page.locator("table.df-timeline .df-bar-completed").count() == 4
        artifacts.screenshot(page, "admin-execution")

        page.click("a.df-action[data-action=cancel]")
        assert "Cancel this execution?" in page.locator("#content-main").inner_text()
        assert Execution.objects.get(pk=running.id).status == "running"  # the confirmation changed nothing
        page.fill("#id_reason", "stopped from the browser test")
        artifacts.screenshot(page, "admin-confirm-cancel")
        page.click("input[name=confirm]")

        assert f"Execution {running.id} cancelled." in page.locator("ul.messagelist").inner_text()
        reload_until_status(page, "cancelled")
        assert "stopped from the browser test" in page.locator(".field-error_html").inner_text()
    finally:
        Marker.hit(f"{tag}:release")
    # The delivery still running the held step is fenced out when it tries to record it.
    wait_for(lambda: cluster.main.count_in_log(f"lease lost: execution {running.id}"), timeout=60)
    assert Execution.objects.get(pk=running.id).status == "cancelled"
    assert Marker.count(f"{tag}:finish") == 0


def test_retry_a_failed_run_from_its_page(cluster, page, admin_server, artifacts):
    tag = uid("fail")
    execution = durableflow.start("t.admin-fail", {"tag": tag})
    wait_status(execution.id, "failed")

    open_execution(page, admin_server, execution.id)
    assert "the payment service said no" in page.locator(".field-error_html").inner_text()
    page.click(".field-error_html summary")  # unfold the traceback (a <details>: no script)
    assert "ValueError: the payment service said no" in page.locator(".field-error_html pre").inner_text()
    artifacts.screenshot(page, "admin-execution-failed")

    Marker.hit(f"{tag}:fixed")
    page.click("a.df-action[data-action=retry]")
    page.click("input[name=confirm]")

    assert f"Execution {execution.id} retried." in page.locator("ul.messagelist").inner_text()
    reload_until_status(page, "completed")
    keys = page.locator("table.df-timeline tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")
    assert keys == ["load", "charge"]
    assert "charged" in page.locator("tr[data-key=charge] .df-value").inner_text()


def test_complete_a_token_from_the_form(cluster, page, admin_server, artifacts):
    """A run waits in ``ctx.step.wait_for_token("approve")``; on its page "Complete token", type
    ``{"approved": true}`` in the payload form (the token is filled in), confirm, and reload
    until the page shows ``completed`` with the payload as the step's value."""
    execution = durableflow.start("t.token")
    wait_status(execution.id, "waiting")

    open_execution(page, admin_server, execution.id)
    assert "approve" in page.locator("table.df-waits").inner_text()  # the waits panel
    page.click("a.df-action[data-action=complete-token]")
    assert page.locator("#id_token").input_value() == f"{execution.id}:approve"
    page.fill("#id_payload", '{"approved": true}')
    artifacts.screenshot(page, "admin-complete-token")
    page.click("input[name=confirm]")

    reload_until_status(page, "completed")
    assert '"approved": true' in page.locator("tr[data-key=approve] .df-value").inner_text()


def test_the_streams_panel_shows_chunks_as_the_run_writes_them(cluster, page, admin_server, artifacts):
    execution = durableflow.start("t.stream", {"n": 100, "pause": 0.03})  # about three seconds
    wait_for(lambda: execution.chunks.filter(stream_id="tokens").exists(), timeout=30, what="the first chunk")
    open_execution(page, admin_server, execution.id)
    tokens = page.locator('.df-stream[data-stream="tokens"] .df-stream-chunks li')
    first_shown = tokens.count()

    # No reload: the panel's script adds the chunks the run writes, and says when it is finished.
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            """() => document.querySelectorAll('.df-stream[data-stream="tokens"] li').length === 100
                && document.querySelector('[data-df-streams]').hasAttribute('data-done')""",
            timeout=30_000,
        )
    except PlaywrightTimeout:
        run = Execution.objects.get(pk=execution.id)
        shown = page.locator("#df-panel-streams").inner_text()[-300:]
        raise AssertionError(f"{tokens.count()} shown, run {run.status}, {execution.chunks.count()} chunks: {shown}")

    assert first_shown < 100, "the run had finished before its page was opened"
    assert [int(seq) for seq in tokens.evaluate_all("items => items.map(li => li.dataset.seq)")] == list(range(1, 101))
    assert tokens.nth(99).inner_text() == "token 100"
    assert "The run is finished" in page.locator("#df-panel-streams").inner_text()
    assert wait_status(execution.id).result == 100
    artifacts.screenshot(page, "execution-streams")
