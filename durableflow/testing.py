"""Test your workflows without a database, a broker or a worker.

    from durableflow.testing import WorkflowTester

    def test_fulfil():
        tester = WorkflowTester()
        execution = tester.start("order-fulfilment", {"order_id": 7})
        assert tester.run_until_finished(execution.id) == {"receipt": ...}
        assert [r.key for r in tester.records(execution.id)] == ["load-order", "cool-off", ...]

Timers and retries fire at once: ``run_until_finished`` moves the tester's clock to the next
due time whenever nothing else is runnable. The verbs are the engine's, the ones the workers
run; only the storage is kept in memory. Waits are satisfied through the same verbs:

    execution = tester.start("approval", {"order": 7})
    tester.run()                                   # now waiting for its event
    tester.send_event("order.approved", {"order": 7})
    tester.signal(execution.id, "note", "hello")   # or complete_token(f"{execution.id}:approve")
    assert tester.run_until_finished(execution.id) == ...

Children run as the workers would run them, and the step bodies a workflow sends as their
own tasks (``map`` items, ``run(queue=)``) are run by ``run()`` from the outbox.

Sagas run as on the workers: ``cancel`` a run (or let a step fail uncaught) and ``run()``
delivers its compensations; the report is on the execution:

    tester.cancel(execution.id)
    tester.run()
    assert tester.get(execution.id).status == "cancelled"
    report = tester.get(execution.id).compensations   # last-completed first
    assert [(c["step"], c["status"]) for c in report] == [("charge", "completed"), ("reserve", "completed")]

Rate limits (``ctx.step.run(..., rate_limit=RateLimit(key, limit, window))``) hold in memory as on
the workers: a step over its limit waits, and ``run_until_finished`` moves the clock to the moment a
unit frees; ``tester.storage.admissions(key)`` lists a key's admissions and waiting requests.

Transactional steps (``ctx.step.transaction``) keep their all-or-nothing in memory: when the
body raises, or the step's record cannot be written (another delivery took the lease or
recorded the step first), the step's transaction rolls back. The project's models are not in
memory, so give the body a test double that takes part in the rollback:

    from durableflow.testing import MemoryTable, WorkflowTester

    orders = MemoryTable({7: {"paid": False}})  # a dict; changes made in a body roll back with it

    def mark_paid(order_id):
        orders[order_id]["paid"] = True

or register an undo with ``current_transaction().on_rollback(fn)`` from any double: it is
called if the transactional step whose body is running rolls back.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any, Callable, NamedTuple, cast

from durableflow import dispatch, exceptions, values
from durableflow.documents.source import MemoryDocuments
from durableflow.engine.memory import InMemoryStorage, ManualClock, MemoryExecution, MemoryTable
from durableflow.engine import replays
from durableflow.engine.records import StepRecordData
from durableflow.engine.settings import EngineSettings
from durableflow.engine.states import TERMINAL, ExecutionStatus
from durableflow.engine.store_types import (
    StoreDefinition,
    StoreFailure,
    StoreResult,
    StoreSnapshot,
    check_store_id,
    resolve_store,
)
from durableflow.engine.transactions import current as current_transaction
from durableflow.engine.verbs import Engine
from durableflow.registry import Registry, WorkflowDefinition
from durableflow.registry import registry as default_registry

__all__ = ["WorkflowTester", "Call", "InMemoryStorage", "ManualClock", "MemoryTable", "current_transaction", "replay"]


class Call(NamedTuple):
    """A step body the tester really called: the step's key, its kind, and the body's arguments."""

    key: str
    kind: str  # "run", "transaction" or "effect" (an effect's perform)
    args: tuple
    kwargs: dict


class WorkflowTester:
    """The engine on an in-memory storage, with a manual clock and helpers to drive executions."""

    def __init__(
        self,
        registry: Registry = default_registry,
        *,
        clock: Callable[[], datetime] | None = None,
        settings: EngineSettings | None = None,
        now: datetime | None = None,
        events: dict[str, Any] | None = None,
        signals: dict[str, Any] | None = None,
        tokens: dict[str, Any] | None = None,
        children: dict[str, Any] | None = None,
        seed: str | int | None = None,
        steps: dict[str, Any] | None = None,
    ):
        """``now``: where the tester's clock starts (an aware datetime), so ``ctx.now()`` is known.

        ``events={"order.approved": payload}``, ``signals={"name": payload}``,
        ``tokens={"token or step key": payload}``: each wait for one of them is satisfied when a run
        reaches it, through the same verbs (``send_event``, ``signal``, ``complete_token``), once per wait.
        ``children={"workflow-name": result}``: runs of that workflow (children, or any start of it)
        return ``result`` at once, or fail with it if it is an exception instance.
        ``seed``: what seeds ``ctx.random()`` and ``ctx.uuid()`` in every run (else each run's id).
        ``steps={"charge": value | exception instance | callable}``: a ``run``, ``transaction`` or
        ``effect`` step with that key records ``value`` (or fails with the exception, through the
        step's retry policy) without calling its body; a callable is called instead of the body,
        with its arguments. ``calls`` lists the bodies really called, in order (``Call``).
        """
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (str, int))):
            raise TypeError(f"seed is a string or an integer, not {seed!r}")
        for name, given in (
            ("events", events),
            ("signals", signals),
            ("tokens", tokens),
            ("children", children),
            ("steps", steps),
        ):
            if given is not None and (not isinstance(given, dict) or not all(isinstance(k, str) for k in given)):
                raise TypeError(f"{name}= is a dict of payloads by name, not {given!r}")
        if now is not None and (not isinstance(now, datetime) or now.tzinfo is None):
            raise ValueError(f"now must be a timezone-aware datetime, not {now!r}")
        if now is not None and clock is not None:
            raise ValueError("give the tester a clock or where its clock starts (now=), not both")
        self.clock = clock or ManualClock(now)
        self.storage = InMemoryStorage(self.clock) if seed is None else _Seeded(self.clock, str(seed))
        self.calls: list[Call] = []
        self._steps: dict[str, Any] = dict(steps or {})
        settings = dataclasses.replace(settings or EngineSettings(), step_body=self._step_body)
        self.engine = Engine(self.storage, _StandIns(registry, children or {}), settings)
        self.documents: MemoryDocuments | None = None
        self._schedules: dict[str, datetime] = {}  # name -> the tick its first tick here was at
        self._fixtures = {"event": events or {}, "signal": signals or {}, "token": tokens or {}}
        self._injected: set[tuple[str, str]] = set()  # (execution, step) of the waits satisfied so

    def fixture(self, key: str, value: Any) -> None:
        """Stand in for the body of step ``key`` from now on, as ``steps={key: value}`` does."""
        if not isinstance(key, str):
            raise TypeError(f"a fixture's key is a step key (a string), not {key!r}")
        self._steps[key] = value

    def _step_body(self, kind: str, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if key in self._steps:
            given = self._steps[key]
            if isinstance(given, BaseException):

                def failing(*args: Any, **kwargs: Any) -> Any:
                    raise given

                return failing
            if callable(given):
                return given
            return lambda *args, **kwargs: given

        def body(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(Call(key, kind, args, kwargs))
            return fn(*args, **kwargs)

        return body

    # The verbs ------------------------------------------------------------------------

    def start(self, workflow, params: Any = None, **options: Any) -> MemoryExecution:
        return self.engine.start(workflow, params, **options)[0]

    def start_many(
        self, workflow, params_list, idempotency_keys=None, *, queue=None, deadline=None
    ) -> list[MemoryExecution]:
        return self.engine.start_many(workflow, params_list, idempotency_keys, queue=queue, deadline=deadline)

    def get(self, execution_id: str) -> MemoryExecution:
        return cast(MemoryExecution, self.engine.get(execution_id))  # the in-memory storage's rows

    def cancel(self, execution_id: str, reason: str | None = None) -> MemoryExecution:
        return self.engine.cancel(execution_id, reason)

    def retry(self, execution_id: str) -> MemoryExecution:
        return self.engine.retry(execution_id)

    def rerun(self, execution_id: str) -> MemoryExecution:
        return self.engine.rerun(execution_id)

    def fork(self, execution_id: str, *, from_step: str) -> MemoryExecution:
        return self.engine.fork(execution_id, from_step=from_step)

    def deliver(self, execution_id: str) -> str:
        return self.engine.deliver(execution_id)

    def send_event(self, event_type: str, payload: Any = None, event_id: str | None = None) -> int:
        return self.engine.send_event(event_type, payload, event_id)

    def signal(self, execution_id: str, name: str, payload: Any = None) -> int:
        return self.engine.signal(execution_id, name, payload)

    def complete_token(self, token: str, payload: Any = None) -> int:
        return self.engine.complete_token(token, payload)

    def sweep(self) -> dict[str, int]:
        return self.engine.sweep()

    def tick(
        self,
        name: str,
        workflow: Any,
        params: Any = None,
        *,
        crontab: str | None = None,
        every: float | None = None,
        catch_up: str = "one",
    ) -> list[MemoryExecution]:
        """What a tick of schedule ``name`` (as ``durableflow.schedule`` takes it) starts at the
        tester's clock: the executions, oldest tick first (those started before included). The
        schedule counts from the tick current at this tester's first tick of ``name``, which starts
        that tick's execution; ``advance()`` past a few ticks, then tick once, to see what
        ``catch_up`` starts after downtime."""
        from durableflow import schedules

        ticks = schedules.ticks_for(crontab=crontab, every=every)
        if name not in self._schedules:
            self._schedules[name] = ticks.latest(self.storage.now()) or self.storage.now()
        floor = self._schedules[name]
        return self.engine.tick(name, workflow, params, ticks, catch_up=catch_up, floor=floor)

    def save_document(self, name: str, document: Any) -> int:
        """Keep a workflow document in memory as the next revision of ``name``; its number.

        ``DocumentError`` for an invalid one. ``start(name)`` then runs its newest revision,
        as ``durableflow.start`` runs a saved document's.
        """
        if self.documents is None:
            self.documents = MemoryDocuments(self.engine.registry)
            self.engine.registry = self.engine.registry.layered(self.documents)
        return self.documents.save(name, document)

    def get_store(self, definition: StoreDefinition | str, store_id: str) -> StoreSnapshot:
        """A store's state, version and instance id (``durableflow.stores.get`` in memory)."""
        return self.engine.store_get(resolve_store(definition), check_store_id(store_id))

    def update_store(self, definition: StoreDefinition | str, store_id: str, updater: Callable[[Any], Any]):
        """Change a store from outside the workflows (``durableflow.stores.update`` in memory):
        its matching waiters become runnable; ``run()`` delivers them."""
        try:
            value = self.engine.store_update(resolve_store(definition), check_store_id(store_id), updater)
        except StoreFailure as failure:
            raise failure.error from None
        return StoreResult.from_value(value)

    # Driving --------------------------------------------------------------------------

    def runnable(self) -> list[str]:
        return self.storage.claimable_ids()

    def run(self, max_deliveries: int = 10_000) -> int:
        """Deliver every runnable execution until none is left; return the number of deliveries.

        The storage is the truth, as on the workers: what is runnable is delivered, so the
        wake-up messages in the outbox are only drained; the step bodies sent as their own
        tasks (map items, ``run(queue=)``) are run from it, as a worker would.
        """
        count = 0
        while count < max_deliveries:
            sent, self.storage.outbox[:] = list(self.storage.outbox), []
            items = [args for task, args, _ in sent if task == dispatch.RUN_ITEM]
            for execution_id, key in items:
                self.engine.run_item(execution_id, key)
            ready = self.runnable()
            if not ready and not items and not self._inject():
                return count
            for execution_id in ready:
                if self.deliver(execution_id) == "stalled":
                    raise self._stall(execution_id)
                count += 1
        raise RuntimeError(f"still runnable after {max_deliveries} deliveries: does a workflow loop?")

    def advance(self, seconds: float) -> None:
        if not isinstance(self.clock, ManualClock):
            raise TypeError("advance() needs the tester's ManualClock")
        self.clock.advance(seconds)

    def run_until_finished(self, execution_id: str, *, max_deliveries: int = 10_000) -> Any:
        """Deliver (moving the clock over timers and deadlines) until the execution ends; return its
        result. A run cancelled at its deadline raises ``ExecutionFailed`` (``DEADLINE_EXCEEDED``)."""
        for _ in range(max_deliveries):
            if self.storage.lock_overdue(1):  # a deadline passed: the sweep cancels, as beat's would
                self.sweep()
            execution = self.engine.final(self.get(execution_id))  # continued as new: the last one
            if execution.status in TERMINAL:
                return self.result(execution_id)
            sent = any(task == dispatch.RUN_ITEM for task, _, _ in self.storage.outbox)
            if self.runnable() or sent or self._inject():
                self.run(max_deliveries=max_deliveries)
                continue
            executions = self.storage.tables.executions.values()
            due = [e.wake_at for e in executions if e.status == ExecutionStatus.WAITING and e.wake_at]
            due += [e.deadline_at for e in executions if e.status not in TERMINAL and e.deadline_at]
            if not due:
                raise exceptions.WaitTimeout(
                    message=f"execution {execution_id} waits for something no timer will bring: {execution.waiting_for}"
                )
            self.advance(max(0.0, (min(due) - self.clock()).total_seconds()))
        raise RuntimeError(f"execution {execution_id} did not finish in {max_deliveries} deliveries")

    def _inject(self) -> int:
        """Satisfy the waits reached that the ``events=``, ``signals=`` and ``tokens=`` fixtures name."""
        injected = 0
        for execution in list(self.storage.tables.executions.values()):
            waiting = execution.waiting_for or {}
            kind, step = waiting.get("kind"), waiting.get("step")
            if execution.status != ExecutionStatus.WAITING or kind not in self._fixtures:
                continue
            fixtures = self._fixtures[kind]
            name = waiting.get({"event": "event_type", "signal": "name", "token": "token"}[kind])
            found = name if name in fixtures else step if kind == "token" and step in fixtures else None
            if found is None or name is None or step is None or (execution.id, step) in self._injected:
                continue
            self._injected.add((execution.id, step))
            payload = fixtures[found]
            if kind == "event":
                self.send_event(name, payload)
            elif kind == "signal":
                self.signal(execution.id, name, payload)
            else:
                self.complete_token(name, payload)
            injected += 1
        return injected

    def _stall(self, execution_id: str) -> exceptions.NonDeterminismError:
        """A run the workers would stall (its code does not match its journal), raised into the test."""
        error = values.decode_error(self.get(execution_id).error or {})
        if isinstance(error, exceptions.NonDeterminismError):
            return error
        return exceptions.NonDeterminismError(getattr(error, "code", None), str(error), execution_id=execution_id)

    # Reading --------------------------------------------------------------------------

    def waiting_for(self, execution_id: str) -> dict[str, Any] | None:
        """What a paused run waits for (``{"kind": "signal", "name": ...}``, a timer, an event...);
        None once it is not waiting. Satisfy it (``signal``, ``send_event``, ``complete_token``,
        ``advance``) and ``run()`` again."""
        execution = self.engine.final(self.get(execution_id))
        return execution.waiting_for if execution.status == ExecutionStatus.WAITING else None

    def result(self, execution_id: str) -> Any:
        """The result of a completed execution; ``ExecutionFailed`` if it ended otherwise."""
        done, value = self.engine.outcome(self.get(execution_id))
        if not done:
            status = self.engine.final(self.get(execution_id)).status
            raise exceptions.WaitTimeout(message=f"execution {execution_id} is still {status}")
        return value

    def records(self, execution_id: str) -> list[StepRecordData]:
        return self.storage.steps(execution_id)

    def export(self, execution_id: str) -> dict[str, Any]:
        """The execution and its journal as ``manage.py durableflow export`` writes them."""
        return self.engine.export(execution_id)

    def replay(self, execution_id: str, workflow=None) -> replays.Verdict:
        """``replay()`` of one of the tester's executions (against ``workflow``, else its registered version)."""
        return replay(self.export(execution_id), workflow, registry=self.engine.registry)

    def step_values(self, execution_id: str) -> dict[str, Any]:
        return {record.key: record.value for record in self.records(execution_id)}

    def metadata(self, execution_id: str) -> dict[str, Any]:
        """The run's metadata (``ctx.metadata``)."""
        return self.get(execution_id).metadata

    def streams(self, execution_id: str) -> dict[str, list[Any]]:
        """The run's streams (``ctx.stream``, ``ctx.step.stream``): ``{stream_id: [chunk, ...]}`` in order."""
        return {
            stream_id: [row["chunk"] for row in self.engine.read_stream(execution_id, stream_id, 0, last)["chunks"]]
            for stream_id, last in self.engine.stream_ids(execution_id).items()
        }

    def compensations(self, execution_id: str) -> list[dict[str, Any]]:
        """The compensations that ran, in the order they ran (empty if none did)."""
        return self.get(execution_id).compensations or []

    @property
    def started(self) -> list[MemoryExecution]:
        """The executions runs started, in start order: children, and the runs ``continue_as_new``
        carried on to (not the ones the test started itself)."""
        executions = list(self.storage.tables.executions.values())
        carried = {e.continued_as for e in executions if e.continued_as}
        return [self.get(e.id) for e in executions if e.parent_id is not None or e.id in carried]


class _Seeded(InMemoryStorage):
    """The in-memory storage, giving every execution written without a seed of its own ``seed``."""

    def __init__(self, clock: Callable[[], datetime], seed: str):
        super().__init__(clock)
        self._seed = seed

    def create_execution(self, values: dict[str, Any]) -> MemoryExecution | None:
        return super().create_execution({**values, "seed": values.get("seed") or self._seed})


class _StandIns(Registry):
    """``registry``, with the workflows ``children=`` names answered by a stand-in that returns at once."""

    def __init__(self, registry: Registry, results: dict[str, Any]):
        super().__init__()
        # The same workflows as ``registry`` (registered before or after), as ``layered`` shares them.
        self._definitions, self._versions, self._lock = registry._definitions, registry._versions, registry._lock
        self._sources = registry._sources
        self._base, self._results = registry, results

    def layered(self, *sources: Any) -> Registry:
        return _StandIns(self._base.layered(*sources), self._results)

    def get(self, name: str, version: str | None = None) -> WorkflowDefinition | None:
        found = self._base.get(name, version)
        if name not in self._results:
            return found
        result = self._results[name]

        def stand_in(ctx, params):
            if isinstance(result, BaseException):
                raise result
            return result

        pinned = version or (found.version if found is not None else "1")
        return WorkflowDefinition(name, stand_in, version=pinned, description="a WorkflowTester(children=) stand-in")


def replay(execution: str | dict[str, Any], workflow=None, *, registry: Registry = default_registry) -> replays.Verdict:
    """Replay a recorded journal against the code installed now, writing nothing; raise
    ``NonDeterminismError`` naming the step where it diverges, else return what was replayed.

    ``execution``: what ``manage.py durableflow export <id>`` writes (its JSON text, or the parsed
    dict), or an execution id to read from the project's database. ``workflow``: a function
    (decorated or not) to replay against instead of the version the execution started with:
    the code you are about to deploy.

        from durableflow.testing import replay

        def test_last_weeks_orders_replay_on_the_new_code():
            replay(Path("tests/journals/order-7.json").read_text())
    """
    import json

    if isinstance(execution, str) and execution.lstrip().startswith("{"):
        execution = json.loads(execution)
    if isinstance(execution, str):
        from durableflow import operations  # the database: Django is needed only here

        execution = operations.export(execution)
    try:
        claim, status = replays.from_export(execution, datetime.now(timezone.utc))
    except ValueError as exc:
        raise TypeError(f"replay() takes an exported execution or an execution id: {exc}") from None
    verdict = replays.replay(claim, registry, status=status, code=workflow)
    if not verdict.ok:
        raise verdict.error()
    return verdict
