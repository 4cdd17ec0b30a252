"""The storage's item methods, on both storages: an item's outcome recorded once, counted off its
step's record, and the execution woken by the last one only, once."""

from __future__ import annotations

import durableflow
from durableflow.engine.states import ExecutionStatus, StepStatus
from durableflow.engine.steering import wake_moves
from durableflow.engine.storage import LEFT, NOW


def double(n: int) -> int:
    return 2 * n


@durableflow.workflow("items.double")
def double_wf(ctx, params):
    return ctx.step.map("double", double, params["items"])


def _done(value):
    return {"status": StepStatus.COMPLETED, "value": value, "finished_at": NOW}


def _fanned_out(backend, n: int) -> str:
    execution_id = backend.start("items.double", {"items": list(range(n))})
    assert backend.deliver(execution_id) == "suspended"
    return execution_id


def _record(backend, execution_id: str, key: str, attempt: int, value=0):
    return backend.storage.record_item(execution_id, key, attempt, _done(value), step="double", wake=wake_moves())


def test_the_fan_out_counts_its_items_on_the_step_s_record_and_names_the_step_on_each(backend):
    execution_id = _fanned_out(backend, 3)
    records = {r.key: r for r in backend.records(execution_id)}

    assert records["double"].meta[LEFT] == 3
    assert {records[f"double[{i}]"].meta["step"] for i in range(3)} == {"double"}


def test_each_item_is_counted_off_once_and_only_the_last_wakes_the_execution(backend):
    execution_id = _fanned_out(backend, 3)
    attempts = [backend.storage.claim_item(execution_id, f"double[{i}]", 60)[0] for i in range(3)]

    first = _record(backend, execution_id, "double[0]", attempts[0])
    assert (first.left, first.woken) == (2, None)
    assert _record(backend, execution_id, "double[0]", attempts[0]) is None  # recorded already: nothing
    assert (_record(backend, execution_id, "double[1]", attempts[1]).left, backend.get(execution_id).status) == (
        1,
        "waiting",
    )
    last = _record(backend, execution_id, "double[2]", attempts[2])

    assert (last.left, last.woken) == (0, ("contract-suite", "waiting"))  # (queue, the status it had)
    assert backend.get(execution_id).status == "pending"
    assert [r.meta[LEFT] for r in backend.records(execution_id) if r.key == "double"] == [0]


def test_a_stale_attempt_records_and_counts_nothing(backend):
    execution_id = _fanned_out(backend, 1)
    stale = backend.storage.claim_item(execution_id, "double[0]", 60)[0]
    backend.advance(61)  # its worker died: a new attempt takes the item over
    current = backend.storage.claim_item(execution_id, "double[0]", 60)[0]

    assert _record(backend, execution_id, "double[0]", stale, value=99) is None
    assert _record(backend, execution_id, "double[0]", current, value=0).left == 0
    assert backend.deliver(execution_id) == "completed"
    assert backend.get(execution_id).result == [0]


def test_the_last_item_of_a_running_execution_marks_the_wake_up_on_it(backend):
    execution_id = _fanned_out(backend, 1)
    attempt = backend.storage.claim_item(execution_id, "double[0]", 60)[0]
    # Its delivery has not recorded its suspension yet (the items were that quick).
    backend.storage.update_execution(execution_id, {"status": ExecutionStatus.RUNNING, "lease_token": "held"})

    recorded = _record(backend, execution_id, "double[0]", attempt)

    assert recorded.woken == ("contract-suite", "running")
    execution = backend.get(execution_id)
    assert (execution.status, execution.wake_pending) == ("running", True)


def test_the_last_item_of_a_cancelled_execution_wakes_nothing(backend):
    execution_id = _fanned_out(backend, 2)
    attempt = backend.storage.claim_item(execution_id, "double[0]", 60)[0]
    backend.cancel(execution_id)  # its items are given their end: nothing may record them now

    assert _record(backend, execution_id, "double[0]", attempt) is None
    assert backend.get(execution_id).status == "cancelled"


def test_an_item_given_back_after_a_fault_is_not_counted(backend):
    execution_id = _fanned_out(backend, 1)
    attempt = backend.storage.claim_item(execution_id, "double[0]", 60)[0]

    given_back = {"status": StepStatus.WAITING, "started_at": NOW}
    assert backend.storage.finish_item(execution_id, "double[0]", attempt, given_back)

    assert [r.meta[LEFT] for r in backend.records(execution_id) if r.key == "double"] == [1]
    assert backend.run(execution_id).result == [0]


def test_items_fanned_out_before_their_step_counted_them_still_wake_the_execution(backend):
    execution_id = _fanned_out(backend, 2)
    for record in backend.records(execution_id):  # as an earlier version wrote them: no count, no step
        meta = {name: value for name, value in record.meta.items() if name not in ("step", LEFT)}
        backend.storage.update_step(execution_id, record.key, {"meta": meta})

    assert backend.run_items(execution_id) == ["completed", "completed"]
    assert backend.get(execution_id).status == "pending"
    assert backend.run(execution_id).result == [0, 2]
