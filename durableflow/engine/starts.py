"""Starting executions: what is checked before anything is written, and the ``start`` and
``start_many`` verbs."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Iterable

from durableflow import exceptions, values
from durableflow.engine import names, tracing
from durableflow.engine.concurrency import key_for
from durableflow.engine.records import Claim, Continued
from durableflow.engine.states import ExecutionStatus
from durableflow.engine.storage import NOW
from durableflow.registry import Registry, WorkflowDefinition

if TYPE_CHECKING:
    from durableflow.engine.rows import ExecutionRow
    from durableflow.engine.verbs import Engine

__all__ = [
    "StartRequest",
    "prepare_start",
    "check_deadline",
    "check_repeat",
    "route_fault",
    "Starts",
    "MAX_ID_LENGTH",
    "MAX_DEADLINE_SECONDS",
    "DEADLINE_EXCEEDED",
]

MAX_ID_LENGTH = 200
MAX_DEADLINE_SECONDS = 100 * 366 * 86_400  # a century, as the longest durable timer
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # the code of a run the sweep cancelled at its deadline


# What no URL can carry to a view: a slash ends the path segment, control characters (Unicode
# category Cc) are refused or mangled on the way, "." and ".." are removed by every client.
_UNROUTABLE = re.compile(r"[/\x00-\x1f\x7f-\x9f]")


def route_fault(execution_id: str) -> str | None:
    """Why an execution id could not name its execution in a URL (the REST API's
    ``executions/<id>/``, the admin's page), or None."""
    found = _UNROUTABLE.search(execution_id)
    if found is not None:
        what = "'/'" if found.group() == "/" else f"a control character (U+{ord(found.group()):04X})"
        return f"it holds {what} at index {found.start()}, which no URL of the execution could carry"
    if execution_id in (".", ".."):
        return f"{execution_id!r} is a relative path segment, which no URL of the execution could carry"
    return None


@dataclass(frozen=True)
class StartRequest:
    definition: WorkflowDefinition
    execution_id: str
    params: Any
    canonical_params: str
    idempotency_key: str | None
    named: bool = False  # the caller gave the execution id (else it is a new uuid)
    deadline: timedelta | datetime | None = None  # from the start (seconds), or when
    concurrency_key: str | None = None  # the workflow's concurrency key for these params (None: not limited)


def check_deadline(deadline: Any) -> timedelta | datetime | None:
    """A start's ``deadline``: seconds from the start (above 0, at most a century) or an aware
    datetime (one already past is cancelled by the next sweep); ``INVALID_PARAMS`` otherwise."""
    if deadline is None:
        return None
    if isinstance(deadline, datetime):
        if deadline.utcoffset() is None:
            raise exceptions.WorkflowStartError(
                "INVALID_PARAMS", "deadline: a datetime deadline must be timezone-aware (a naive one names no moment)"
            )
        return deadline
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not 0 < deadline <= MAX_DEADLINE_SECONDS:
        raise exceptions.WorkflowStartError(
            "INVALID_PARAMS",
            f"deadline: {deadline!r} is neither a number of seconds above 0 and at most {MAX_DEADLINE_SECONDS:,} "
            "(a century) nor a timezone-aware datetime",
        )
    return timedelta(seconds=deadline)


def prepare_start(
    registry: Registry,
    workflow: str | Callable[..., Any] | WorkflowDefinition,
    params: Any,
    *,
    execution_id: str | None = None,
    idempotency_key: str | None = None,
    max_payload_bytes: int | None = None,
    index: int | None = None,
    deadline: Any = None,
) -> StartRequest:
    """Validate a start; raise ``WorkflowStartError`` before anything is written.

    ``index``: the start's position in a ``start_many``, named in the messages (``params[3]``).
    """
    definition = registry.resolve(workflow)
    at = "" if index is None else f"[{index}]"
    try:
        canonical, decoded = values.roundtrip(params, max_bytes=max_payload_bytes)
    except exceptions.WorkflowValueError as exc:
        raise exceptions.WorkflowStartError("INVALID_PARAMS", f"params{at}: {exc.message}", **exc.detail) from None
    key_name = "idempotency_key" if index is None else f"idempotency_keys{at}"
    for name, value in (("execution_id", execution_id), (key_name, idempotency_key)):
        if value is None:
            continue
        if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
            raise exceptions.WorkflowStartError(
                "INVALID_PARAMS", f"{name} must be a non-empty string of at most {MAX_ID_LENGTH} characters"
            )
        fault = values.text_fault(value) or (route_fault(value) if name == "execution_id" else None)
        if fault is not None:
            raise exceptions.WorkflowStartError("INVALID_PARAMS", f"{name}: {fault}")
    return StartRequest(
        definition=definition,
        execution_id=execution_id or uuid.uuid4().hex,
        params=decoded,
        canonical_params=canonical,
        idempotency_key=idempotency_key,
        named=execution_id is not None,
        deadline=check_deadline(deadline),
        concurrency_key=key_for(definition.concurrency, decoded),
    )


def check_repeat(request: StartRequest, workflow: str, params: Any) -> None:
    """A start that names an existing execution must ask for the same thing."""
    try:
        same = workflow == request.definition.name and values.encode(params) == request.canonical_params
    except exceptions.WorkflowValueError:  # stored before today's rules: not the same request
        same = False
    if not same:
        named = (
            f"idempotency key {request.idempotency_key!r}"
            if request.idempotency_key is not None
            else f"execution id {request.execution_id!r}"
        )
        raise exceptions.WorkflowStartError(
            "IDEMPOTENCY_CONFLICT",
            f"{named} already started workflow {workflow!r} with other params; use a new key for a new execution",
        )


def _fields(
    request: StartRequest,
    queue: str,
    parent_id: str | None = None,
    root_id: str | None = None,
    now: Callable[[], datetime] | None = None,
) -> dict[str, Any]:
    """The new execution's row. ``now``: the storage's clock, read for a deadline in seconds."""
    fields = {
        "id": request.execution_id,
        "workflow": request.definition.name,
        "version": request.definition.version,
        "status": ExecutionStatus.PENDING,
        "params": request.params,
        "idempotency_key": request.idempotency_key,
        "queue": queue,
        "parent_id": parent_id,
        "root_id": root_id or request.execution_id,
        "enqueued_at": NOW,
        "created_at": NOW,
    }
    deadline = request.deadline
    if deadline is not None:  # only then a column of the INSERT (one statement for most starts)
        if isinstance(deadline, timedelta):
            if now is None:
                raise TypeError("a deadline in seconds needs the storage's clock (now)")
            fields["deadline_at"] = now() + deadline
        else:
            fields["deadline_at"] = deadline
    if request.concurrency_key is not None:  # the same: only for a run that is limited
        fields["concurrency_key"] = request.concurrency_key
    trace_context = tracing.carrier()  # the start's span, where tracing is on: its deliveries' parent
    if trace_context is not None:
        fields["trace_context"] = trace_context
    return fields


class Starts:
    """The ``start`` and ``start_many`` verbs (a mixin of ``Engine``)."""

    def start(
        self: Engine,
        workflow: str | Callable[..., Any] | WorkflowDefinition,
        params: Any = None,
        *,
        execution_id: str | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
        parent_id: str | None = None,
        root_id: str | None = None,
        deadline: float | datetime | None = None,
        send: bool = True,
    ) -> tuple[Any, bool]:
        """Write a new execution and ask for its delivery once the transaction commits.

        ``send=False``: ask for none; the caller delivers it itself (an ``invoke``'s child, in its
        parent's delivery) and sends its delivery if it cannot (the sweep does, should the caller die).

        ``deadline`` (seconds from now, or an aware datetime): the sweep cancels the execution
        if it is still unfinished then (``DEADLINE_EXCEEDED``, its compensations run).
        Returns ``(execution, created)``. A repeated ``idempotency_key`` (or
        ``execution_id``) returns the first execution, or raises ``IDEMPOTENCY_CONFLICT`` if
        it asked for something else. Invalid input raises ``WorkflowStartError`` and writes
        nothing. The storage's unique constraints, not a pre-check, decide what is a repeat.
        """
        request = prepare_start(
            self.registry,
            workflow,
            params,
            execution_id=execution_id,
            idempotency_key=idempotency_key,
            max_payload_bytes=self.settings.max_payload_bytes,
            deadline=deadline,
        )
        queue = queue or self.settings.default_queue
        definition = request.definition
        with tracing.starting(definition.name, definition.version, queue, request.execution_id):
            return self._start(request, queue, parent_id, root_id, send=send)

    def _start(
        self: Engine,
        request: StartRequest,
        queue: str,
        parent_id: str | None = None,
        root_id: str | None = None,
        hand_on: bool = False,
        send: bool = True,
    ) -> tuple[Any, bool]:
        """``start``'s writes. ``hand_on``: the run takes the slot of the one it carries on;
        ``send``: ask for its delivery."""
        fields = _fields(request, queue, parent_id, root_id, self.storage.now)
        if request.concurrency_key is not None:
            return self._start_limited(request, fields, hand_on, send)
        if not send or request.named or request.idempotency_key is not None:  # may be a repeat: no message for it
            execution = self.storage.create_execution(fields)
            if execution is not None and send:
                self.storage.enqueue(names.DELIVER, (execution.id,), queue)
        else:  # a new id: its delivery may be sent while the row is written
            execution = self.storage.create_and_enqueue(fields, names.DELIVER, (request.execution_id,), queue)
        if execution is None:
            return self._repeated(request), False
        return execution, True

    def _start_limited(
        self: Engine, request: StartRequest, fields: dict[str, Any], hand_on: bool, send: bool = True
    ) -> tuple[Any, bool]:
        """A start of a run with a concurrency key: it holds a slot if one is free, and is
        queued for one otherwise (``durableflow.engine.concurrency``), in one transaction."""
        definition, key = request.definition, request.concurrency_key
        if definition.concurrency is None or key is None:
            raise TypeError(f"workflow {definition.name!r} has no concurrency limit: not a limited start")
        with self.storage.atomic():
            holds = hand_on or self.take_slot(definition.name, key, definition.concurrency.limit, fields)
            execution = self.storage.create_execution(fields)
            if execution is not None and holds and send:
                self.storage.enqueue(names.DELIVER, (execution.id,), fields["queue"])
        if execution is None:
            return self._repeated(request), False
        return execution, True

    def start_many(
        self: Engine,
        workflow: str | Callable[..., Any] | WorkflowDefinition,
        params_list: Iterable[Any],
        idempotency_keys: Iterable[str | None] | None = None,
        *,
        queue: str | None = None,
        deadline: float | datetime | None = None,
    ) -> list[Any]:
        """Start one execution per params in one transaction: one bulk insert, then the
        deliveries of the new ones, sent together once it commits. The executions, in order.
        ``deadline`` is each new execution's, as ``start``'s.

        Everything is validated before anything is written (``INVALID_PARAMS`` names the
        position: ``params[3]: ...``). ``idempotency_keys`` (one per params, ``None`` for none)
        act as if the starts ran one after another: a key started before returns its
        execution at that position; a key repeated in the list with the same params gives
        both positions the one execution. Other params for a key taken either way raise
        ``IDEMPOTENCY_CONFLICT``, and then nothing is written.
        """
        definition = self.registry.resolve(workflow)
        check_deadline(deadline)  # refused even when there is nothing to start
        params_list = list(params_list)
        keys = [None] * len(params_list) if idempotency_keys is None else list(idempotency_keys)
        if len(keys) != len(params_list):
            raise exceptions.WorkflowStartError(
                "INVALID_PARAMS", f"{len(keys)} idempotency keys for {len(params_list)} params: give one per params"
            )
        requests = [
            prepare_start(
                self.registry,
                definition,
                params,
                idempotency_key=key,
                max_payload_bytes=self.settings.max_payload_bytes,
                index=index,
                deadline=deadline,
            )
            for index, (params, key) in enumerate(zip(params_list, keys))
        ]
        # The position whose execution each position gets: its own, or the first with its key.
        first: dict[str, int] = {}
        owner = []
        for index, request in enumerate(requests):
            earlier = first.setdefault(request.idempotency_key, index) if request.idempotency_key else index
            if earlier != index:
                check_repeat(request, definition.name, requests[earlier].params)
            owner.append(earlier)
        if not requests:
            return []
        writes = [index for index in range(len(requests)) if owner[index] == index]
        queue = queue or self.settings.default_queue
        with tracing.starting(definition.name, definition.version, queue):
            return self._start_many(definition, requests, writes, owner, queue, deadline)

    def _start_many(self: Engine, definition, requests, writes, owner, queue, deadline) -> list[Any]:
        if definition.concurrency is not None:  # each start decides its slot after the ones before it
            with self.storage.atomic():
                found = {index: self._start(requests[index], queue)[0] for index in writes}
            return [found[index] for index in owner]
        with self.storage.atomic():
            now = self.storage.now() if deadline is not None else None
            clock = None if now is None else (lambda: now)
            rows = self.storage.create_executions([_fields(requests[index], queue, now=clock) for index in writes])
            found = {index: row or self._repeated(requests[index]) for index, row in zip(writes, rows)}
            self.storage.enqueue_many(names.DELIVER, [(row.id,) for row in rows if row is not None], queue)
        return [found[index] for index in owner]

    def _repeated(self: Engine, request: StartRequest) -> ExecutionRow:
        """The execution a refused insert's id or key names, if it asked for the same thing."""
        existing = self.storage.get_execution(request.execution_id) if request.named else None
        if existing is None and request.idempotency_key is not None:
            existing = self.storage.find_execution(request.definition.name, request.idempotency_key)
        if existing is None:  # pragma: no cover - deleted between the insert and the read
            raise exceptions.WorkflowStartError("IDEMPOTENCY_CONFLICT", "the execution vanished; start again")
        check_repeat(request, existing.workflow, existing.params)
        return existing

    def continue_as(self: Engine, claim: Claim, outcome: Continued) -> Any:
        """Start the execution that carries ``claim``'s on (``ctx.continue_as_new``).

        Called in the transaction that completes the old one; its id is derived from the old
        one's, so a repeated outcome names the same execution. The new one keeps the old one's
        deadline: a deadline bounds the run however often it continues.
        """
        old = self.storage.get_execution(claim.execution_id, ("deadline_at", "concurrency_key"))
        if old is None:  # pragma: no cover - read in the transaction that completes it
            raise RuntimeError(f"execution {claim.execution_id} vanished while it completed")
        request = prepare_start(
            self.registry,
            claim.workflow,
            outcome.params,
            execution_id=outcome.execution_id,
            max_payload_bytes=self.settings.max_payload_bytes,
            deadline=old.deadline_at,
        )
        # The same key: the new run takes the old one's slot (they never both run). Another
        # key: the new one asks for a slot, and the old one's is freed as it ends.
        hand_on = old.concurrency_key is not None and request.concurrency_key == old.concurrency_key
        execution, _ = self._start(request, claim.queue, claim.parent_id, claim.root_id, hand_on=hand_on)
        return execution
