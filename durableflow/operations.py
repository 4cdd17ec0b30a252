"""The Python API: the engine's verbs on the project's database.

Views, Celery tasks, admin actions, the REST API and management commands call these. Each is
a call into ``durableflow.engine.verbs.Engine`` over the ORM storage; nothing here decides
what may change (that is the engine's), it only picks the storage and the settings.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any, Callable, Iterable, Iterator, cast

from django.db import connections
from django.utils import timezone
from django.utils.dateparse import parse_duration

from durableflow import dispatch, exceptions, monitoring, signals
from durableflow.conf import df_settings
from durableflow.engine.replays import Verdict
from durableflow.engine.settings import EngineSettings
from durableflow.engine.states import TERMINAL
from durableflow.engine.steering import OUTCOME_FIELDS
from durableflow.engine.verbs import Engine
from durableflow.models import Execution
from durableflow.orm import OrmStorage, db_alias, documents, waiting
from durableflow.registry import WorkflowDefinition

__all__ = [
    "engine",
    "prune",
    "parse_age",
    "engine_settings",
    "start",
    "start_many",
    "start_execution",
    "get",
    "cancel",
    "retry",
    "rerun",
    "fork",
    "result",
    "send_event",
    "signal",
    "complete_token",
    "wait_finished",
    "deliver",
    "run_item",
    "sweep",
    "publish",
    "save_document",
    "validate_document",
    "replay_check",
    "export",
    "parse_since",
]


def engine_settings() -> EngineSettings:
    return EngineSettings(
        default_retry=df_settings.DEFAULT_RETRY,
        max_payload_bytes=df_settings.MAX_PAYLOAD_BYTES,
        default_queue=df_settings.DEFAULT_QUEUE,
        lease_seconds=df_settings.LEASE_SECONDS,
        sweep_batch_size=df_settings.SWEEP_BATCH_SIZE,
        max_lost_deliveries=df_settings.MAX_LOST_DELIVERIES,
        on_thread_exit=connections.close_all,
        notify=signals.notifier(),
    )


def engine(storage: OrmStorage | None = None) -> Engine:
    """The verbs on the ORM storage (on the alias the routers give durableflow's tables), with
    the code workflows and the workflow documents."""
    return Engine(storage or OrmStorage(), documents.registry, engine_settings())


# Starting and steering ------------------------------------------------------------------


def start(
    workflow: str | Callable[..., Any] | WorkflowDefinition,
    params: Any = None,
    *,
    execution_id: str | None = None,
    idempotency_key: str | None = None,
    queue: str | None = None,
    deadline: float | datetime | None = None,
) -> Execution:
    """Start an execution inside the caller's transaction; its delivery is sent on commit.

    ``deadline`` (seconds from now, or an aware datetime): if the execution is unfinished
    then, the sweep cancels it with its compensations (error code ``DEADLINE_EXCEEDED``).
    A rolled-back transaction starts nothing. A repeated ``idempotency_key`` (or
    ``execution_id``) returns the first execution, or raises ``IDEMPOTENCY_CONFLICT`` if the
    params differ. Invalid input raises ``WorkflowStartError`` and writes nothing.
    """
    return start_execution(
        workflow, params, execution_id=execution_id, idempotency_key=idempotency_key, queue=queue, deadline=deadline
    )[0]


def start_execution(workflow, params=None, *, execution_id=None, idempotency_key=None, queue=None, deadline=None):
    """``start``, returning ``(execution, created)`` for callers that answer 201 or 200."""
    return engine().start(
        workflow, params, execution_id=execution_id, idempotency_key=idempotency_key, queue=queue, deadline=deadline
    )


def start_many(
    workflow: str | Callable[..., Any] | WorkflowDefinition,
    params_list: Iterable[Any],
    idempotency_keys: Iterable[str | None] | None = None,
    *,
    queue: str | None = None,
    deadline: float | datetime | None = None,
) -> list[Execution]:
    """Start one execution per params, in one transaction (inside the caller's, if any) with
    one bulk INSERT; their deliveries are sent together on commit. The executions, in order.

    Every params is checked first: ``INVALID_PARAMS`` names the position (``params[3]: ...``)
    and nothing is written. ``idempotency_keys`` (one per params, or ``None``) behave as
    ``start``'s, as if started one after another: a repeat returns the first execution at its
    position, a key repeated in the list with the same params gives both positions one execution,
    and other params for a taken key raise ``IDEMPOTENCY_CONFLICT`` with nothing written.
    ``deadline`` is each new execution's, as ``start``'s.
    """
    return engine().start_many(workflow, params_list, idempotency_keys, queue=queue, deadline=deadline)


def get(execution_id: str) -> Execution:
    """The execution, or ``ExecutionNotFound``."""
    return cast(Execution, engine().get(execution_id))  # the ORM storage's rows are the models


def cancel(execution_id: str, reason: str | None = None) -> Execution:
    """Cancel an unfinished execution (``InvalidTransition`` for a finished one).

    Its compensations run (in a delivery sent at once) before it ends ``cancelled``.
    """
    return engine().cancel(execution_id, reason)


def retry(execution_id: str) -> Execution:
    """Resume a failed (or stalled) execution from the step that failed it."""
    return engine().retry(execution_id)


def rerun(execution_id: str) -> Execution:
    """Start a new execution with the same workflow and params as a finished one, linked to it."""
    return engine().rerun(execution_id)


def fork(execution_id: str, *, from_step: str) -> Execution:
    """Start a new execution keeping a finished one's journal before ``from_step``; the rest runs anew."""
    return engine().fork(execution_id, from_step=from_step)


def send_event(event_type: str, payload: Any = None, event_id: str | None = None) -> int:
    """Publish an event; return how many waits it satisfied (0 for a repeated ``event_id``).

    Every wait for ``event_type`` whose ``match`` the payload contains takes it (each
    execution once), and each workflow declared ``on_event=event_type`` starts an execution
    with the payload as params (once per ``event_id``).
    """
    return engine().send_event(event_type, payload, event_id)


def signal(execution_id: str, name: str, payload: Any = None) -> int:
    """Send a signal to an unfinished execution: its next ``wait_for_signal(name)`` gets it, in order."""
    return engine().signal(execution_id, name, payload)


def complete_token(token: str, payload: Any = None) -> int:
    """Complete a token once (``TOKEN_ALREADY_COMPLETED`` after that): its wait returns ``payload``."""
    return engine().complete_token(token, payload)


def result(execution_id: str, timeout: float | None = None) -> Any:
    """Block until the execution finishes and return its result.

    Woken by the finishing transaction's notification on PostgreSQL, which carries the outcome
    (no read after the wake-up unless it was too large to carry), re-reading the database at
    least every ``RESULT_RECHECK_SECONDS`` (see ``durableflow.orm.waiting``). A run that
    continued as new answers with the result of the one that carries it on. Raises
    ``ExecutionFailed`` if it ended without completing, ``WaitTimeout`` after ``timeout``
    seconds, ``ExecutionNotFound`` for an unknown id.
    """
    verbs = engine()
    execution = _wait(verbs, execution_id, timeout, follow=True)
    done, value = verbs.outcome(execution)
    if not done:
        raise exceptions.WaitTimeout(message=f"execution {execution_id} is still {execution.status} after {timeout} s")
    return value


def wait_finished(execution_id: str, timeout: float | None) -> Execution:
    """Block until the execution is finished or ``timeout`` seconds passed; return it either way.

    What ``GET executions/{id}/?wait=`` long-polls on. ``ExecutionNotFound`` for an unknown id.
    """
    return _wait(engine(), execution_id, timeout, follow=False)


def _wait(verbs: Engine, execution_id: str, timeout: float | None, *, follow: bool) -> Execution:
    """The one way to wait for an execution's end (``durableflow.orm.waiting.until``)."""
    alias = db_alias()
    return waiting.until(
        execution_id,
        (lambda: verbs.final(verbs.get(execution_id, OUTCOME_FIELDS))) if follow else (lambda: verbs.get(execution_id)),
        lambda execution: execution.status in TERMINAL,
        lambda execution: execution.id,
        timeout,
        alias=alias,
        recheck=df_settings.RESULT_RECHECK_SECONDS,
        # The outcome a notification carried is what a read would return: no read after the wake.
        notice=(lambda fields: verbs.final(_announced(alias, fields))) if follow else None,
    )


def _announced(alias: str, fields: dict[str, Any]) -> Execution:
    """The execution as its finishing transaction announced it (``OUTCOME_FIELDS``; the rest deferred)."""
    return Execution.from_db(alias, list(OUTCOME_FIELDS), [fields[name] for name in OUTCOME_FIELDS])


# Workflow documents -------------------------------------------------------------------------


def save_document(name: str, document: Any, *, new: bool | None = None):
    """Save ``document`` as the next revision of workflow document ``name``: ``(row, created)``.

    ``DocumentError`` (with ``.code`` and ``.pointer``) if it is invalid: nothing is saved.
    ``new=True`` refuses an existing name (``DOCUMENT_EXISTS``), ``new=False`` a new one
    (``NOT_FOUND``). Running executions keep the revision they started with.
    """
    return documents.save(name, document, new=new)


def validate_document(pk: int) -> dict[str, int]:
    """Compile a stored revision again (after a deploy changed the tasks) and record the verdict."""
    from durableflow.models import WorkflowDocument

    return documents.validate_again(WorkflowDocument.objects.using(db_alias()).filter(pk=pk))


# Deliveries -------------------------------------------------------------------------------


def deliver(execution_id: str) -> str:
    """One delivery of ``execution_id`` (what the Celery task runs); what happened, for logs.

    ``"storage-fault"``: the database failed under it; it ended without an outcome and should
    be sent again (the task does, with back-off).
    """
    return engine().deliver(execution_id)


def run_item(execution_id: str, key: str) -> str:
    """One step body run as its own task: a map item or a run(queue=) attempt (what the task runs)."""
    return engine().run_item(execution_id, key)


def sweep() -> dict[str, int]:
    """Wake due executions and re-send lost wake-ups (what beat runs every SWEEP_INTERVAL); its
    run is recorded (``durableflow.monitoring.last_sweep``: is beat running?)."""
    started = time.monotonic()
    counts = engine().sweep()
    monitoring.record_sweep(counts, time.monotonic() - started)
    return counts


def prune(older_than: timedelta | str | float, *, batch: int = 1000) -> int:
    """Delete the executions that finished more than ``older_than`` ago, with their journals
    (``Engine.prune``); return how many. ``older_than``: a ``timedelta``, seconds, or text:
    ``"30d"``, ``"12h"``, ``"15m"``, ``"90s"``, ``"2w"`` or ISO 8601 (``"P30D"``)."""
    return engine().prune(parse_age(older_than), batch=batch)


def replay_check(
    *,
    workflow: str | None = None,
    last: int | None = None,
    since: datetime | timedelta | str | None = None,
    finished: bool = False,
) -> Iterator[Verdict]:
    """Replay the stored journals of unfinished executions (also finished ones with ``finished``)
    against the code installed in this process, newest first; one ``Verdict`` each.

    Reads only (each execution's row and journal; ``Engine.replay_check``): it can run against a
    replica or as a database role that may only read. ``workflow``: of that name only; ``last``:
    the newest N; ``since``: created since then (a datetime, or an age as ``prune`` takes it).
    """
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
        raise ValueError(f"last must be a positive number of executions, not {last!r}")
    rows = Execution.objects.using(db_alias()).order_by("-created_at", "-id")
    if not finished:
        rows = rows.unfinished()
    if workflow is not None:
        rows = rows.filter(workflow=workflow)
    if since is not None:
        rows = rows.filter(created_at__gte=parse_since(since))
    ids = rows.values_list("id", flat=True)
    verbs = engine()
    for execution_id in list(ids[:last] if last is not None else ids):  # read before any journal is
        yield verbs.replay_check(execution_id)


def export(execution_id: str) -> dict[str, Any]:
    """The execution's row and its journal as JSON values (``durableflow.testing.replay`` reads it)."""
    return engine().export(execution_id)


def parse_since(value: datetime | timedelta | str) -> datetime:
    """A moment: an aware datetime, ISO 8601 text (a date, or a date and time; UTC if no offset), or an
    age before now (``parse_age``); ``ValueError`` with what is accepted."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and re.match(r"\d{4}-\d\d-\d\d", value.strip()):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{value!r} is not an ISO 8601 date or time (2026-12-01, 2026-12-01T08:00+01:00)"
            ) from None
    else:
        return timezone.now() - parse_age(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt_timezone.utc)


_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(value: timedelta | str | float) -> timedelta:
    """``value`` as a ``timedelta`` (see ``prune``); ``ValueError`` with what is accepted."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=value)
    text = value.strip() if isinstance(value, str) else ""
    if text:
        match = _AGE.fullmatch(text.lower())
        if match:
            return timedelta(seconds=float(match[1]) * _AGE_UNITS[match[2]])
        parsed = parse_duration(text)
        if parsed is not None and parsed >= timedelta(0):
            return parsed
    raise ValueError(
        f"{value!r} is not an age: give a number with a unit (30d, 12h, 15m, 90s, 2w), seconds, "
        "or an ISO 8601 duration (P30D)"
    )


def publish(execution_id: str, queue: str | None = None) -> bool:
    """Send a wake-up for ``execution_id`` now (the sweep re-sends one that is lost)."""
    return dispatch.send(dispatch.DELIVER, (execution_id,), queue or df_settings.DEFAULT_QUEUE)
