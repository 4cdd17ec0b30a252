"""Composition (children, map, run(queue=), continue_as_new, on_event), held against both storages."""

from __future__ import annotations

import durableflow
from durableflow import ChildExecutionError, RetryableError


def _run_tree(backend, execution_id: str, rounds: int = 20):
    """Deliver every runnable execution of the tree (and their items) until the root ends."""
    for _ in range(rounds):
        root = backend.get(execution_id)
        if root.status in ("completed", "failed", "cancelled"):
            return root
        ids = [execution_id, *backend.storage.execution_ids(statuses=["pending", "running", "waiting"])]
        for pk in dict.fromkeys(ids):
            execution = backend.get(pk)
            if execution.root_id == execution_id or pk == execution_id:
                backend.run(pk)
    return backend.get(execution_id)


# Children -------------------------------------------------------------------------------------


@durableflow.workflow("compose.double")
def double_wf(ctx, params):
    if params.get("fail"):
        ctx.step.run("boom", _boom)
    return ctx.step.run("double", lambda: params["n"] * 2)


def _boom():
    raise LookupError("the child broke")


@durableflow.workflow("compose.parent")
def parent_wf(ctx, params):
    try:
        return {"value": ctx.step.invoke("child", "compose.double", params)}
    except ChildExecutionError as exc:
        return {"status": exc.status, "error": exc.error["message"], "type": exc.error.get("type"), "child": exc.execution_id}


@durableflow.workflow("compose.double-when-told")
def double_when_told_wf(ctx, params):
    ctx.step.wait_for_signal("go", "go")
    return ctx.step.run("double", lambda: params["n"] * 2)


@durableflow.workflow("compose.parent-of-waiting")
def parent_of_waiting_wf(ctx, params):
    try:
        return {"value": ctx.step.invoke("child", "compose.double-when-told", params)}
    except ChildExecutionError as exc:
        return {"status": exc.status, "error": exc.error["message"], "child": exc.execution_id}


@durableflow.workflow("compose.start-then-wait")
def start_then_wait_wf(ctx, params):
    """A child started (sent to the workers), then waited for: what invoke does with a child it
    cannot deliver itself."""
    child = ctx.step.start("child:start", "compose.double", params)
    return {"value": ctx.step.wait_for_execution("child", child)}


def test_invoke_of_a_child_that_completes_at_once_returns_its_value_in_one_delivery_of_the_parent(backend):
    parent = backend.start("compose.parent", {"n": 21})
    backend.deliver(parent)

    done = backend.get(parent)
    assert (done.status, done.result, done.deliveries) == ("completed", {"value": 42}, 1)
    started, waited = backend.records(parent)
    assert (started.key, started.kind, waited.key, waited.kind) == ("child:start", "start", "child", "wait_execution")
    assert (waited.status, waited.value, waited.meta["execution_id"]) == ("completed", 42, started.value)
    child = backend.get(started.value)
    assert (child.parent_id, child.root_id, child.workflow) == (parent, parent, "compose.double")
    assert (child.status, child.deliveries) == ("completed", 1)
    assert backend.storage.get_waiter(parent, "child") is None  # an ended child needs no waiter


def test_a_child_that_waits_wakes_its_parent_when_it_completes_with_the_parents_step_recorded(backend):
    parent = backend.start("compose.parent-of-waiting", {"n": 21})
    backend.deliver(parent)
    child = backend.records(parent)[0].value
    assert backend.get(child).status == "waiting"  # delivered within the parent's delivery, waiting now
    assert backend.get(parent).waiting_for == {"kind": "child", "execution_id": child, "step": "child", "until": None}

    backend.signal(child, "go")
    backend.deliver(child)

    assert backend.get(parent).status == "pending"  # woken by the child's outcome, not the sweep
    waited = backend.records(parent)[1]
    assert (waited.status, waited.value) == ("completed", 42)  # recorded by the child's end
    backend.deliver(parent)
    assert backend.get(parent).result == {"value": 42}


def test_a_failed_child_raises_child_execution_error_with_the_child_error(backend):
    parent = backend.start("compose.parent", {"n": 1, "fail": True})
    result = _run_tree(backend, parent).result
    assert result["status"] == "failed"
    assert result["error"] == "the child broke"
    assert result["type"] == "builtins.LookupError"
    record = backend.records(parent)[-1]
    assert (record.status, record.error["code"]) == ("failed", "CHILD_FAILED")


def test_a_cancelled_child_wakes_its_parent_with_child_execution_error(backend):
    parent = backend.start("compose.parent-of-waiting", {"n": 1})
    backend.deliver(parent)
    child = backend.records(parent)[0].value
    backend.cancel(child, "not needed")
    assert backend.get(parent).status == "pending"
    backend.deliver(parent)
    assert backend.get(parent).result["status"] == "cancelled"


def test_cancelling_a_parent_cancels_its_unfinished_children(backend):
    parent = backend.start("compose.parent-of-waiting", {"n": 1})
    backend.deliver(parent)
    child = backend.records(parent)[0].value
    backend.cancel(parent)
    assert backend.get(child).status == "cancelled"


@durableflow.workflow("compose.fan")
def fan_wf(ctx, params):
    ids = []
    for i in range(params["n"]):
        ids.append(ctx.step.start(f"c{i}", "compose.double", {"n": i}))
        if i % 5 == 4:
            ctx.step.sleep(f"pause{i}", 1)  # a replay in between
    return [ctx.step.wait_for_execution(f"w{i}", pk) for i, pk in enumerate(ids)]


def test_children_started_with_replays_in_between_are_started_once_each(backend):
    parent = backend.start("compose.fan", {"n": 20})
    result = _run_tree(backend, parent, rounds=60).result
    assert result == [2 * i for i in range(20)]
    children = backend.storage.execution_ids(parent_id=parent)
    assert len(children) == 20


def test_waiting_for_an_unknown_execution_raises_at_that_step(backend):
    @durableflow.workflow("compose.wait-nobody")
    def wait_nobody(ctx, params):
        try:
            ctx.step.wait_for_execution("w", "nobody-has-this-id")
        except durableflow.ExecutionNotFound as exc:
            return exc.code

    execution_id = backend.start("compose.wait-nobody")
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == "NOT_FOUND"


@durableflow.workflow("compose.forever")
def forever_wf(ctx, params):
    return ctx.step.wait_for_signal("never", "never")


@durableflow.workflow("compose.child-timeout")
def child_timeout_wf(ctx, params):
    child = ctx.step.start("slow", "compose.forever")
    try:
        ctx.step.wait_for_execution("wait", child, timeout=5)
    except durableflow.WaitTimeout:
        return "gave up"


def test_a_wait_for_an_execution_times_out(backend):
    parent = backend.start("compose.child-timeout")
    assert backend.run(parent).result == "gave up"


def test_a_child_finishing_while_its_parent_runs_is_not_missed(backend, monkeypatch):
    """The child ends after the parent read its status and before the parent suspends."""
    parent = backend.start("compose.start-then-wait", {"n": 5})
    real_get, real_watch = backend.storage.get_execution, backend.storage.watch_execution
    raced, watching, watched = [], [], []

    def watch(execution_id):
        watching.append(execution_id)
        try:
            return real_watch(execution_id)
        finally:
            watching.clear()
            watched.append(execution_id)

    def read_then_child_finishes(execution_id, *args):
        row = real_get(execution_id, *args)
        if execution_id != parent and not raced and not watching and watched:
            raced.append(execution_id)
            assert backend.deliver(execution_id) == "completed"
        return row

    monkeypatch.setattr(backend.storage, "watch_execution", watch)
    monkeypatch.setattr(backend.storage, "get_execution", read_then_child_finishes)
    assert backend.deliver(parent) == "requeued"  # it suspended, but was woken meanwhile
    monkeypatch.undo()

    assert raced and backend.get(parent).status == "pending"  # the suspension became a replay
    backend.deliver(parent)
    assert backend.get(parent).result == {"value": 10}


# map and run(queue=) --------------------------------------------------------------------------


def square(n: int) -> int:
    if n == -1:
        raise ValueError("negative one")
    return n * n


def add(a: int, b: int = 0) -> int:
    return a + b


attempts: dict[str, int] = {}


def flaky_add(tag: str, a: int) -> int:
    attempts[tag] = attempts.get(tag, 0) + 1
    if attempts[tag] < 3:
        raise RetryableError("not yet", max_attempts=5, retry_interval=2)
    return a + 1


@durableflow.workflow("compose.map")
def map_wf(ctx, params):
    try:
        return ctx.step.map("squares", square, params["items"], max_concurrency=params.get("limit"))
    except ValueError as exc:
        return {"error": str(exc)}


def test_map_runs_each_item_as_its_own_task_and_returns_results_in_order(backend):
    execution_id = backend.start("compose.map", {"items": list(range(7))})
    backend.deliver(execution_id)
    waiting = backend.get(execution_id)
    assert (waiting.status, waiting.waiting_for["kind"], waiting.wake_at) == ("waiting", "task", None)
    items = [r for r in backend.records(execution_id) if r.kind == "item"]
    assert [r.key for r in items] == [f"squares[{i}]" for i in range(7)]

    assert backend.run_items(execution_id) == ["completed"] * 7
    assert backend.get(execution_id).status == "pending"  # the last item woke it
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == [i * i for i in range(7)]


def test_a_failed_item_raises_in_the_workflow_after_the_others_finished(backend):
    execution_id = backend.start("compose.map", {"items": [1, -1, 3]})
    assert backend.run(execution_id).result == {"error": "negative one"}
    statuses = {r.key: r.status for r in backend.records(execution_id) if r.kind == "item"}
    assert statuses == {"squares[0]": "completed", "squares[1]": "failed", "squares[2]": "completed"}


def test_map_max_concurrency_sends_the_next_item_as_one_finishes(backend):
    execution_id = backend.start("compose.map", {"items": list(range(5)), "limit": 2})
    backend.deliver(execution_id)
    sent = [r.key for r in backend.records(execution_id) if r.kind == "item" and r.started_at is not None]
    assert sent == ["squares[0]", "squares[1]"]
    assert backend.run(execution_id).result == [0, 1, 4, 9, 16]


def test_an_empty_map_returns_an_empty_list(backend):
    execution_id = backend.start("compose.map", {"items": []})
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == []


def test_a_duplicate_or_stale_item_task_records_once(backend):
    execution_id = backend.start("compose.map", {"items": [2]})
    backend.deliver(execution_id)
    assert backend.engine.run_item(execution_id, "squares[0]") == "completed"
    assert backend.engine.run_item(execution_id, "squares[0]") == "skipped"
    assert [r.attempts for r in backend.records(execution_id) if r.kind == "item"] == [1]


def test_the_sweep_resends_an_item_whose_worker_died(backend):
    execution_id = backend.start("compose.map", {"items": [3, 4]})
    backend.deliver(execution_id)
    # Item 0 was claimed by a worker that died: running, its attempt never recorded.
    assert backend.storage.claim_item(execution_id, "squares[0]", 60) is not None
    backend.engine.run_item(execution_id, "squares[1]")
    assert backend.sweep()["items"] == 0  # not overdue yet
    backend.advance(61)
    assert backend.sweep()["items"] == 1
    assert backend.engine.run_item(execution_id, "squares[0]") == "completed"
    assert backend.run(execution_id).result == [9, 16]
    item = next(r for r in backend.records(execution_id) if r.key == "squares[0]")
    assert item.attempts == 2


@durableflow.workflow("compose.remote")
def remote_wf(ctx, params):
    total = ctx.step.run("add", add, 1, b=2, queue="elsewhere")
    again = ctx.step.run("flaky", flaky_add, params["tag"], total, queue="elsewhere")
    return [total, again]


def test_run_on_a_queue_runs_the_body_as_its_own_task_with_durable_retries(backend):
    tag = f"remote-{backend.name}"
    execution_id = backend.start("compose.remote", {"tag": tag})
    backend.deliver(execution_id)
    (step, body) = backend.records(execution_id)
    assert (step.key, step.status, body.key, body.meta["queue"]) == ("add", "waiting", "add@1", "elsewhere")

    assert backend.run(execution_id).result == [3, 4]
    assert attempts[tag] == 3
    flaky = next(r for r in backend.records(execution_id) if r.key == "flaky")
    assert (flaky.status, flaky.attempts) == ("completed", 3)


# continue_as_new, on_event ------------------------------------------------------------------


@durableflow.workflow("compose.counter")
def counter_wf(ctx, params):
    i = params["i"]
    for _ in range(params["every"]):
        i = ctx.step.run(f"s{i}", lambda i=i: i + 1)
    if i < params["until"]:
        ctx.continue_as_new({**params, "i": i})
    return i


def test_continue_as_new_keeps_each_journal_short_and_result_follows_the_chain(backend):
    first = backend.start("compose.counter", {"i": 0, "every": 10, "until": 50})
    ids = [first]
    for _ in range(5):
        backend.deliver(ids[-1])
        execution = backend.get(ids[-1])
        assert execution.status == "completed"
        assert len(backend.records(ids[-1])) == 10
        if execution.continued_as:
            following = backend.get(execution.continued_as)
            assert (following.root_id, following.workflow) == (first, "compose.counter")
            ids.append(following.id)
    assert len(ids) == 5
    assert backend.engine.outcome(backend.get(first)) == (True, 50)


@durableflow.workflow("compose.on-order", on_event="compose.order-created")
def on_order_wf(ctx, params):
    return {"order": params["order"]}


def test_on_event_starts_one_execution_per_event(backend):
    backend.send_event("compose.order-created", {"order": 1}, event_id="order-1")
    backend.send_event("compose.order-created", {"order": 1}, event_id="order-1")
    backend.send_event("compose.order-created", {"order": 2})

    started = [backend.get(pk) for pk in backend.storage.execution_ids()]
    mine = sorted(e.params["order"] for e in started if e.workflow == "compose.on-order")
    assert mine == [1, 2]


def test_the_sweep_wakes_a_parent_whose_childs_end_was_not_announced(backend, monkeypatch):
    parent = backend.start("compose.start-then-wait", {"n": 4})
    backend.deliver(parent)
    child = backend.records(parent)[0].value
    # The worker died right after (the delivery runs the verbs on its own guard of the storage).
    monkeypatch.setattr(type(backend.engine), "finished", lambda engine, execution_id, fields=None: [])
    backend.deliver(child)
    monkeypatch.undo()
    assert backend.get(parent).status == "waiting"

    backend.sweep()

    assert backend.get(parent).status == "pending"
    assert backend.run(parent).result == {"value": 8}


def test_items_of_a_cancelled_map_are_not_run_or_resent(backend):
    execution_id = backend.start("compose.map", {"items": [1, 2]})
    backend.deliver(execution_id)
    backend.cancel(execution_id)
    assert backend.engine.run_item(execution_id, "squares[0]") == "skipped"
    backend.advance(120)
    assert backend.sweep()["items"] == 0
    statuses = {r.status for r in backend.records(execution_id) if r.kind == "item"}
    assert statuses == {"failed"}


@durableflow.workflow("compose.parent-of-counter")
def parent_of_counter_wf(ctx, params):
    return ctx.step.invoke("count", "compose.counter", {"i": 0, "every": 2, "until": 6})


def test_a_wait_for_a_child_that_continued_as_new_follows_it_to_the_end(backend):
    parent = backend.start("compose.parent-of-counter")
    assert _run_tree(backend, parent, rounds=40).result == 6
    runs = [backend.get(pk) for pk in backend.storage.execution_ids(parent_id=parent)]
    assert len(runs) == 3 and {run.root_id for run in runs} == {parent}


@durableflow.workflow("compose.parent-strict")
def parent_strict_wf(ctx, params):
    return ctx.step.invoke("child", "compose.double", params)


def test_retry_of_a_parent_failed_by_a_child_that_had_failed_already_waits_again(backend):
    parent = backend.start("compose.parent-strict", {"n": 1, "fail": True})
    backend.deliver(parent)  # the child fails inside this delivery: the wait fails at once, no waiter
    failed = backend.get(parent)
    assert (failed.status, failed.error["code"]) == ("failed", "CHILD_FAILED")
    assert backend.storage.get_waiter(parent, "child") is None

    backend.retry(parent)
    backend.deliver(parent)  # the child is still failed: the wait, registered now, fails again

    again = backend.get(parent)
    assert (again.status, again.error["code"]) == ("failed", "CHILD_FAILED")
    assert backend.storage.get_waiter(parent, "child") is not None
