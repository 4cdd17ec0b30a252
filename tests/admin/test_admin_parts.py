"""The admin's parts on their own: the timeline's arithmetic, value display, counting, dates."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone

from durableflow.admin import display, paging, timeline
from durableflow.admin.dates import date_hierarchy
from durableflow.admin.forms import JsonField
from durableflow.models import Execution

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


@dataclass
class Record:
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


def at(seconds: float) -> dt.datetime:
    return T0 + timedelta(seconds=seconds)


# Timeline ------------------------------------------------------------------------------------------


def test_steps_share_one_axis_from_the_start_to_the_end():
    records = [Record(at(0), at(1)), Record(at(1), at(3)), Record(at(3), at(4))]

    laid = timeline.build(records, started=at(0), finished=at(4), now=at(100))

    assert [(row.offset, row.width) for row in laid.rows] == [(0.0, 25.0), (25.0, 50.0), (75.0, 25.0)]
    assert [row.duration_text for row in laid.rows] == ["1.0 s", "2.0 s", "1.0 s"]
    assert [row.start_text for row in laid.rows] == ["+0 ms", "+1.0 s", "+3.0 s"]
    assert laid.span_text == "4.0 s"
    assert [label for _, label in laid.ticks] == ["0", "+1.0 s", "+2.0 s", "+3.0 s", "+4.0 s"]


def test_an_unfinished_run_ends_its_axis_now_and_an_open_step_reaches_it():
    laid = timeline.build([Record(at(0), at(2)), Record(at(2), None)], started=at(0), finished=None, now=at(8))

    done, waiting = laid.rows
    assert (done.offset, done.width, done.open) == (0.0, 25.0, False)
    assert (waiting.offset, waiting.width, waiting.open) == (25.0, 75.0, True)
    assert waiting.duration == timedelta(seconds=6)


def test_a_tiny_step_stays_visible_and_within_the_axis():
    laid = timeline.build(
        [Record(at(0), at(0.002)), Record(at(86_399.999), at(86_400))], started=at(0), finished=at(86_400), now=at(0)
    )

    first, last = laid.rows
    assert first.width == timeline.MIN_WIDTH
    assert last.offset + last.width <= 100.0


def test_steps_without_times_draw_no_bar_and_an_empty_journal_has_no_axis():
    laid = timeline.build([Record(None, None)], started=None, finished=None, now=at(0))

    assert (laid.rows[0].offset, laid.rows[0].width, laid.rows[0].start_text) == (0.0, 0.0, "")
    assert timeline.build([], started=None, finished=None, now=at(0)).ticks == []


# Display ------------------------------------------------------------------------------------------


def test_short_json_is_shown_and_long_json_collapsed_behind_a_preview():
    short = display.pretty_json({"a": 1})
    long = display.pretty_json({"items": list(range(50))})

    assert short == '<pre class="df-json">{\n  &quot;a&quot;: 1\n}</pre>'
    assert long.startswith('<details class="df-json-long"><summary><code>{&quot;items&quot;:[0,1,2,')
    assert "54 lines" in long


def test_huge_json_is_cut_for_display_and_says_so():
    shown = display.pretty_json("x" * (display.DISPLAY_CHARS + 10))

    assert "Cut at 100,000 characters for display" in shown
    assert len(shown) < display.DISPLAY_CHARS + 1000


def test_values_are_escaped():
    assert "&lt;script&gt;" in display.pretty_json("<script>")
    assert "&lt;b&gt;" in display.error_block({"code": "X", "message": "<b>"})
    assert "&lt;i&gt;" in display.waiting_text({"kind": "<i>"})


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0.0123, "12 ms"),
        (3.44, "3.4 s"),
        (125, "2 min 5 s"),
        (120, "2 min"),
        (3 * 3600 + 120, "3 h 2 min"),
        (2 * 86400 + 3 * 3600, "2 d 3 h"),
    ],
)
def test_durations_read_at_a_glance(seconds, text):
    assert display.duration_text(timedelta(seconds=seconds)) == text


def test_waiting_names_the_kind_the_step_and_the_deadline():
    until = timezone.now() + timedelta(minutes=5)

    text = display.waiting_text({"kind": "token", "step": "approve", "token": "tok-1"}, until)

    assert text.startswith(
        "<strong>token</strong> · step <code>approve</code> · token <code>tok-1</code> · until <time"
    )
    assert 'title="in 4\xa0minutes"' in text or 'title="in 5\xa0minutes"' in text


# The JSON payload field -----------------------------------------------------------------------------


def test_the_payload_field_takes_json_data_and_empty_means_null():
    field = JsonField(required=False)

    assert field.clean('{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert field.clean("  ") is None
    assert field.prepare_value({"a": 1}) == '{\n  "a": 1\n}'


@pytest.mark.parametrize(
    "typed, message",
    [
        ("{a: 1}", "Not valid JSON: Expecting property name"),
        ("[Infinity]", "Not valid JSON: Infinity is not JSON"),
        ('{"deep": 9223372036854775808}', "INVALID_PAYLOAD: payload: not a durable value at /deep"),
        ("[" * 100_000, "Not valid JSON: it nests deeper than a durable value may"),
        ("[" * 600 + "]" * 600, "INVALID_PAYLOAD: payload: not a durable value at " + "/0" * 512),
    ],
)
def test_the_payload_field_refuses_what_is_not_a_durable_value(typed, message):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match=message):
        JsonField().clean(typed)


# Counting ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_count_is_exact_below_the_cap_and_more_than_the_cap_above_it():
    Execution.objects.bulk_create(Execution(id=f"c{n}", workflow="w", queue="q", root_id="r") for n in range(12))

    assert paging.estimated_count(Execution.objects.all(), cap=20) == paging.Estimate(12)
    assert str(paging.estimated_count(Execution.objects.all(), cap=5)) == "more than 5"
    assert paging.estimated_count(Execution.objects.filter(id="c3"), cap=5) == paging.Estimate(1)


@pytest.mark.django_db
def test_an_estimated_count_never_links_to_pages_that_may_not_exist():
    Execution.objects.bulk_create(Execution(id=f"p{n:03d}", workflow="w", queue="q", root_id="r") for n in range(120))

    class Capped(paging.EstimatedCountPaginator):
        cap = 100

    exact = paging.EstimatedCountPaginator(Execution.objects.all(), 10)
    capped = Capped(Execution.objects.all(), 10)

    assert list(exact.get_elided_page_range(1)) == [1, 2, 3, 4, "…", 11, 12]
    assert list(capped.get_elided_page_range(1)) == [1, 2, 3, 4, "…"]
    assert list(capped.get_elided_page_range(7)) == [1, 2, "…", 4, 5, 6, 7, 8, 9, 10]


# The date hierarchy ----------------------------------------------------------------------------------


class FakeChangeList:
    date_hierarchy = "created_at"

    def __init__(self, params):
        self.params = params
        self.queryset = Execution.objects.all()

    def get_query_string(self, new_params, remove):
        return "?" + "&".join(f"{k}={v}" for k, v in sorted(new_params.items()))


@pytest.mark.django_db
def test_the_date_hierarchy_offers_the_periods_between_the_first_and_the_last_run():
    for n, created in enumerate(
        [dt.datetime(2024, 11, 3, tzinfo=dt.timezone.utc), dt.datetime(2026, 2, 9, tzinfo=dt.timezone.utc)]
    ):
        Execution.objects.create(id=f"d{n}", workflow="w", queue="q", root_id="r", created_at=created)

    years = date_hierarchy(FakeChangeList({}))
    cl = FakeChangeList({"created_at__year": "2026"})
    cl.queryset = Execution.objects.filter(created_at__year=2026)
    months = date_hierarchy(cl)

    assert [c["title"] for c in years["choices"]] == ["2024", "2025", "2026"]
    assert [c["title"] for c in months["choices"]] == ["February 2026"]
    assert months["choices"][0]["link"] == "?created_at__month=2&created_at__year=2026"
