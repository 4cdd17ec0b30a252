"""Store workflows the test suite runs on real worker processes, a view that changes a store,
and a crash injected between a store's commit and the step's journal record."""

from __future__ import annotations

import json
import os
import signal

from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import durableflow
from durableflow.engine.journal import Journal
from tests.testapp.models import Marker

Counter = durableflow.define_store("t-counter", initial=lambda: {"n": 0})
Board = durableflow.define_store("t-board", initial=lambda: {"ready": False, "other": 0, "items": []})


def increment(draft):
    draft["n"] += 1


@durableflow.workflow("t.store-increments")
def store_increments(ctx, params):
    counter = ctx.step.store(Counter, id=params["store"])
    return [counter.update(f"inc-{i}", increment).version for i in range(params["n"])]


@durableflow.workflow("t.store-when")
def store_when(ctx, params):
    board = ctx.step.store(Board, id=params["store"])
    ready = board.when("ready", lambda state: state["ready"])
    return {"ready": ready, "after": ctx.step.run("after", Marker.hit, f"{params['store']}:after")}


@durableflow.workflow("t.store-take")
def store_take(ctx, params):
    board = ctx.step.store(Board, id=params["store"])
    return board.take(
        "claim",
        lambda state: state["items"][0] if state["items"] else None,
        lambda draft, item: draft["items"].remove(item),
    )


CRASH_KEY = "crash-after-commit"


@durableflow.workflow("t.store-crash")
def store_crash(ctx, params):
    counter = ctx.step.store(Counter, id=params["store"])
    result = counter.update(CRASH_KEY, increment)
    return result.as_value()


# The crash: a worker that is about to journal the step CRASH_KEY (its store change committed)
# dies, once per execution. Test-only: installed where this module is imported (the workers).
_write_step = Journal.write_step


def _write_step_or_die(self, record, *, new):
    if record.key == CRASH_KEY and record.kind == "store_update" and not Marker.count(f"{self.execution_id}:died"):
        Marker.hit(f"{self.execution_id}:died")
        os.kill(os.getpid(), signal.SIGKILL)
    return _write_step(self, record, new=new)


Journal.write_step = _write_step_or_die


@csrf_exempt
@require_POST
def set_board(request, store_id: str) -> HttpResponse:
    """A view that changes a store: its waiters wake once the request's transaction commits."""
    changes = json.loads(request.body)
    result = durableflow.stores.update(Board, store_id, lambda draft: draft.update(changes))
    return JsonResponse(result.as_value())
