"""Step timeouts: the host's alarm survives, late returns are dropped, stuck bodies are stopped.

The unit tests call ``call_with_timeout`` in the main thread (SIGALRM) and from a plain thread
(a daemon helper thread and an asynchronous exception). pytest-timeout's own SIGALRM timer is
the host's alarm in every one of them; tests that set an outer alarm of their own hand
pytest-timeout's back afterwards (``host_alarm``). The integration tests run the same on real
Celery workers: the threads pool (off the main thread) and prefork (the main thread).
"""

from __future__ import annotations

import contextvars
import math
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

import pytest

import durableflow
from durableflow.engine import timeouts
from durableflow.engine.timeouts import call_with_timeout
from durableflow.exceptions import StepTimeout
from tests.cluster import ROOT, Process
from tests.helpers import steps_of, uid, wait_for, wait_status

# Deadlines are short; how late an alarm or an interruption may come on a busy 2-core machine.
LATE = 0.5


class Outer:
    """An outer SIGALRM handler that records when it ran (and raises ``error`` if given)."""

    def __init__(self, error: BaseException | None = None):
        self.calls: list[tuple[int, float]] = []
        self.error = error

    def __call__(self, signum, frame):
        self.calls.append((signum, time.monotonic()))
        if self.error is not None:
            raise self.error


@pytest.fixture
def host_alarm():
    """Stand pytest-timeout's alarm aside for a test that sets its own, and give it back after."""
    handler = signal.getsignal(signal.SIGALRM)
    left, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    taken = time.monotonic()
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, handler)
    if left:
        signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - taken), 1e-6), interval)


def in_a_thread(call):
    """Run ``call()`` in a plain (non-main) thread; return its value or raise its exception here."""
    box = {}

    def target():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="caller")
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the calling thread did not come back"
    if "error" in box:
        raise box["error"]
    return box["value"]


def in_the_main_thread(call):
    return call()


WHERE = pytest.mark.parametrize("where", [in_the_main_thread, in_a_thread], ids=["main-thread", "other-thread"])


@pytest.fixture
def thread_errors(monkeypatch):
    """Exceptions that escaped any thread during the test."""
    escaped = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    return escaped


def helpers_alive() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("durableflow-step")]


# The argument and the plain cases ---------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf])
def test_a_timeout_must_be_a_positive_number_of_seconds(timeout):
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        call_with_timeout(lambda: 1, (), {}, timeout)


def test_no_timeout_calls_the_body_in_the_callers_thread():
    assert call_with_timeout(lambda a, b: (a, b, threading.current_thread()), (1,), {"b": 2}, None) == (
        1,
        2,
        threading.current_thread(),
    )


@WHERE
def test_a_body_that_ends_in_time_gives_its_value_or_its_error(where):
    variable = contextvars.ContextVar("variable")

    def call():
        variable.set("the caller's")
        return call_with_timeout(lambda x: (x, variable.get()), (2,), {}, 5)

    assert where(lambda: contextvars.copy_context().run(call)) == (2, "the caller's")
    with pytest.raises(KeyError, match="missing"):
        where(lambda: call_with_timeout({}.__getitem__, ("missing",), {}, 5))


# In the main thread: interrupted where it stands, and the host's alarm kept -----------------------------


@WHERE
def test_a_body_past_its_deadline_is_interrupted_where_it_stands(where):
    stopped = threading.Event()

    def body():
        try:
            time.sleep(0.01)  # a loop of short C calls: interruptible in any thread
            while True:
                time.sleep(0.01)
        finally:
            stopped.set()

    started = time.monotonic()
    with pytest.raises(StepTimeout, match="ran longer than 0.2 s") as caught:
        where(lambda: call_with_timeout(body, (), {}, 0.2))

    assert 0.2 <= time.monotonic() - started < 0.2 + LATE
    assert caught.value.code == "STEP_TIMEOUT"
    assert stopped.wait(5), "the body went on running after its deadline"
    wait_for(lambda: not helpers_alive(), timeout=10, what="the helper thread to end")


@WHERE
def test_except_exception_in_the_body_cannot_swallow_the_interruption(where):
    swallowed, stopped = [], threading.Event()

    def body():
        try:
            while True:
                try:
                    time.sleep(0.01)
                except Exception as exc:  # noqa: BLE001 - what a body that swallows the interrupt does
                    swallowed.append(exc)
        finally:
            stopped.set()

    with pytest.raises(StepTimeout):
        where(lambda: call_with_timeout(body, (), {}, 0.2))

    assert stopped.wait(5)
    assert swallowed == []


@WHERE
def test_a_late_return_is_never_returned(where):
    """A body that catches BaseException survives the interruption; its return still does not count."""
    returned = threading.Event()

    def body():
        try:
            while True:
                time.sleep(0.01)
        except BaseException:  # noqa: BLE001 - the interrupt, whatever it is, ends the loop
            returned.set()
            return "late"

    with pytest.raises(StepTimeout):
        where(lambda: call_with_timeout(body, (), {}, 0.2))
    assert returned.wait(5)


def test_pytest_timeouts_own_alarm_survives_steps_with_timeouts():
    handler = signal.getsignal(signal.SIGALRM)
    left, interval = signal.getitimer(signal.ITIMER_REAL)
    assert callable(handler) and left > 10, "pytest-timeout should have set its SIGALRM timer for this test"
    started = time.monotonic()

    assert call_with_timeout(lambda: "in time", (), {}, 30) == "in time"
    with pytest.raises(StepTimeout):
        call_with_timeout(time.sleep, (30,), {}, 0.2)

    assert signal.getsignal(signal.SIGALRM) is handler
    now_left, now_interval = signal.getitimer(signal.ITIMER_REAL)
    elapsed = time.monotonic() - started
    assert left - elapsed - LATE < now_left <= left - elapsed + 0.1
    assert now_interval == interval


def test_an_outer_alarm_due_before_the_deadline_fires_on_time_with_its_own_handler(host_alarm):
    outer = Outer()
    signal.signal(signal.SIGALRM, outer)
    set_at = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 0.3)

    # Its handler returns, so the sleep goes on (PEP 475) until the step's own deadline.
    with pytest.raises(StepTimeout):
        call_with_timeout(time.sleep, (30,), {}, 1.0)

    assert time.monotonic() - set_at >= 1.0
    [(signum, fired_at)] = outer.calls
    assert signum == signal.SIGALRM
    assert 0.3 <= fired_at - set_at < 0.3 + LATE
    assert signal.getsignal(signal.SIGALRM) is outer
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_an_outer_alarm_due_after_the_deadline_fires_on_time_after_the_call(host_alarm):
    outer = Outer()
    signal.signal(signal.SIGALRM, outer)
    set_at = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 1.0)

    with pytest.raises(StepTimeout):
        call_with_timeout(time.sleep, (30,), {}, 0.2)

    assert outer.calls == []
    assert signal.getsignal(signal.SIGALRM) is outer
    left, interval = signal.getitimer(signal.ITIMER_REAL)
    assert 1.0 - (time.monotonic() - set_at) - 0.01 <= left <= 0.8 + 0.001 and interval == 0
    wait_for(lambda: outer.calls, timeout=10, interval=0.01, what="the outer alarm")
    [(signum, fired_at)] = outer.calls
    assert signum == signal.SIGALRM
    assert 1.0 <= fired_at - set_at < 1.0 + LATE


def test_an_outer_interval_timer_ticks_through_the_call_and_keeps_its_interval(host_alarm):
    outer = Outer()
    signal.signal(signal.SIGALRM, outer)
    set_at = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 0.25, 0.25)

    with pytest.raises(StepTimeout):
        call_with_timeout(time.sleep, (30,), {}, 1.1)

    ticks = [fired_at - set_at for _, fired_at in outer.calls]
    assert len(ticks) >= 4  # 0.25, 0.5, 0.75, 1.0 s; one more if the call ended late
    assert all(0.25 * n <= tick < 0.25 * n + LATE for n, tick in enumerate(ticks, 1)), ticks
    assert signal.getsignal(signal.SIGALRM) is outer
    left, interval = signal.getitimer(signal.ITIMER_REAL)
    assert interval == 0.25 and 0 < left <= 0.25
    wait_for(lambda: len(outer.calls) >= 6, timeout=10, interval=0.01, what="two more ticks")


def test_an_outer_handler_that_raises_ends_the_call_with_its_exception(host_alarm):
    """pytest-timeout's handler fails the test from inside whatever runs: a step must let it."""
    outer = Outer(error=KeyboardInterrupt("the host's deadline"))
    signal.signal(signal.SIGALRM, outer)
    signal.setitimer(signal.ITIMER_REAL, 0.2)

    with pytest.raises(KeyboardInterrupt, match="the host's deadline"):
        call_with_timeout(time.sleep, (30,), {}, 1.0)

    assert len(outer.calls) == 1
    assert signal.getsignal(signal.SIGALRM) is outer
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_an_enclosing_call_is_an_outer_alarm_like_any_other():
    handler = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()

    with pytest.raises(StepTimeout, match="0.3 s"):
        call_with_timeout(call_with_timeout, (time.sleep, (30,), {}, 5), {}, 0.3)
    assert 0.3 <= time.monotonic() - started < 0.3 + LATE

    def inner_times_out():
        with pytest.raises(StepTimeout, match="0.2 s"):
            call_with_timeout(time.sleep, (30,), {}, 0.2)
        return "the inner deadline came first"

    assert call_with_timeout(inner_times_out, (), {}, 5) == "the inner deadline came first"
    assert signal.getsignal(signal.SIGALRM) is handler


def test_an_outer_alarm_under_the_default_disposition_still_ends_the_process():
    script = (
        "import signal, time\n"
        "from durableflow.engine.timeouts import call_with_timeout\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.3)\n"
        "call_with_timeout(time.sleep, (30,), {}, 10)\n"
        "print('the step outlived the process alarm')\n"
    )
    started = time.monotonic()
    ended = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert ended.returncode == -signal.SIGALRM, ended
    assert time.monotonic() - started < 10


# Off the main thread: a daemon helper, an asynchronous exception, and its races -------------------------


def test_off_the_main_thread_the_body_runs_in_a_daemon_helper_that_calls_on_thread_exit_last():
    seen = {}

    def body():
        seen["body"] = threading.current_thread()
        return "done"

    def on_exit():
        seen["exit"] = threading.current_thread()

    assert in_a_thread(lambda: call_with_timeout(body, (), {}, 5, on_thread_exit=on_exit)) == "done"

    helper = seen["body"]
    assert helper.daemon and helper.name == f"durableflow-step:{__name__}.{body.__qualname__}"
    wait_for(lambda: "exit" in seen, timeout=10, what="on_thread_exit")
    assert seen["exit"] is helper


def test_off_the_main_thread_a_body_in_a_c_call_stops_when_the_call_returns(caplog, thread_errors):
    reached, exited = [], threading.Event()

    def body():
        time.sleep(0.8)  # cannot be interrupted off the main thread
        reached.append("the line after the sleep")

    caplog.set_level("INFO", logger="durableflow.timeouts")
    started = time.monotonic()
    with pytest.raises(StepTimeout):
        in_a_thread(lambda: call_with_timeout(body, (), {}, 0.2, on_thread_exit=exited.set))

    assert time.monotonic() - started < 0.2 + LATE  # raised at the deadline, not when the body ended
    assert exited.wait(10)
    assert reached == []
    assert thread_errors == []
    warning, stopped = [(r.levelname, r.getMessage()) for r in caplog.records]
    name = f"{__name__}.test_off_the_main_thread_a_body_in_a_c_call_stops_when_the_call_returns.<locals>.body"
    assert warning == (
        "WARNING",
        f"step body {name} ran longer than its 0.2 s timeout; interrupting it "
        "(a body blocked in a C call stops only when the call returns)",
    )
    assert stopped[0] == "INFO" and stopped[1].startswith(f"timed-out step body {name} stopped ")


def test_an_interrupt_fired_as_the_body_returns_never_escapes_the_helper(monkeypatch, thread_errors):
    """The caller fires once the body has returned: the interrupt lands in the helper's own code."""
    returned = threading.Event()
    closed = []
    fired = []
    real_set_async_exc = timeouts._set_async_exc

    def fire_after_the_body_returned(ident, exc):
        if exc is not None:
            returned.wait(10)
            # The helper is back in its own frame, on its way to the lock the caller holds now.
            wait_for(lambda: sys._current_frames()[ident].f_code.co_name == "_attempt", timeout=10, interval=0.001)
            fired.append(exc)
        return real_set_async_exc(ident, exc)

    monkeypatch.setattr(timeouts, "_set_async_exc", fire_after_the_body_returned)

    def body():
        time.sleep(0.4)
        returned.set()
        return "late"

    def on_exit():
        for n in range(100_000):  # plenty of bytecodes for a stray interrupt to land on
            pass
        closed.append(n)

    with pytest.raises(StepTimeout):
        in_a_thread(lambda: call_with_timeout(body, (), {}, 0.1, on_thread_exit=on_exit))

    wait_for(lambda: closed, timeout=10, what="on_thread_exit to finish")
    assert fired == [timeouts._Interrupted]
    assert closed == [99_999]
    wait_for(lambda: not helpers_alive(), timeout=10, what="the helper thread to end")
    assert thread_errors == []


def test_bodies_ending_at_their_deadline_give_their_value_or_step_timeout_and_nothing_else(thread_errors):
    """Provoke the race between the body's return and the caller's interrupt many times."""
    rounds, closed, outcomes = 120, [], []

    def body(seconds):
        until = time.monotonic() + seconds
        while time.monotonic() < until:  # bytecodes all the way: an interrupt lands at once
            pass
        return "value"

    def on_exit():
        for n in range(2_000):
            pass
        closed.append(n)

    def rounds_of_calls():
        for i in range(rounds):
            timeout = 0.004
            try:
                outcomes.append(
                    call_with_timeout(body, (timeout * (0.5 + i % 10 / 10),), {}, timeout, on_thread_exit=on_exit)
                )
            except StepTimeout:
                outcomes.append("timeout")

    in_a_thread(rounds_of_calls)

    wait_for(lambda: len(closed) == rounds, timeout=30, what="every helper's on_thread_exit")
    assert set(outcomes) <= {"value", "timeout"} and len(outcomes) == rounds
    assert closed == [1_999] * rounds
    wait_for(lambda: not helpers_alive(), timeout=10, what="the helper threads to end")
    assert thread_errors == []


def test_a_helper_thread_stuck_in_a_c_call_does_not_hold_up_interpreter_exit():
    script = (
        "import threading, time\n"
        "from durableflow.engine.timeouts import call_with_timeout\n"
        "from durableflow.exceptions import StepTimeout\n"
        "def caller():\n"
        "    try:\n"
        "        call_with_timeout(time.sleep, (60,), {}, 0.2)\n"
        "    except StepTimeout:\n"
        "        print('timed out', flush=True)\n"
        "thread = threading.Thread(target=caller)\n"
        "thread.start()\n"
        "thread.join()\n"
    )
    started = time.monotonic()
    ended = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert (ended.returncode, ended.stdout) == (0, "timed out\n"), ended
    assert time.monotonic() - started < 10


# On real workers ----------------------------------------------------------------------------------------


@contextmanager
def threads_worker(cluster, queue: str):
    """A worker with the threads pool on ``queue``: step bodies run off the main thread."""
    name = uid("threads")
    argv = [sys.executable, "-m", "celery", "-A", "project", "worker", "-P", "threads", "-c", "2", "-Q", queue]
    argv += ["-n", f"{name}@%h", "-l", "info", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    process = Process(name, argv, cluster.env, cluster.log_dir)
    try:
        wait_for(lambda: " ready." in process.log() or not process.alive(), timeout=60, what=f"{name} to start")
        assert process.alive(), f"{name} died at start:\n{process.log()}"
        yield process
    finally:
        process.stop()


@pytest.mark.integration
def test_a_threads_worker_shuts_down_warm_while_a_timed_out_body_is_stuck(cluster, live_db):
    queue = uid("threads")
    with threads_worker(cluster, queue) as worker:
        execution = durableflow.start("t.timeout-stuck", {"seconds": 60, "timeout": 1}, queue=queue)

        done = wait_status(execution.id, timeout=60)

        assert done.result == "STEP_TIMEOUT"
        [record] = steps_of(execution.id)
        assert (record.key, record.status, record.error["code"]) == ("stuck", "failed", "STEP_TIMEOUT")
        body = "tests.testapp.timeout_workflows.stuck"
        wait_for(lambda: f"step body {body} ran longer than its 1 s timeout" in worker.log(), timeout=10)
        assert f"timed-out step body {body} stopped" not in worker.log()  # still in its time.sleep(60)

        # Well before the body's 60 s sleep ends. On RabbitMQ a worker's warm shutdown takes
        # seconds even with nothing running (measured here: 5.9 s for an idle threads worker,
        # 3.7 s for a prefork one), so the bound is wider there.
        bound = 30 if cluster.env.get("CELERY_BROKER_URL", "").startswith("amqp://") else 10
        worker.kill(signal.SIGTERM)
        stopping = time.monotonic()
        try:
            worker.popen.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not shut down within {bound} s of SIGTERM:\n{worker.log()}")
        assert time.monotonic() - stopping < bound
        assert worker.popen.returncode == 0, worker.log()


@pytest.mark.integration
def test_a_prefork_worker_interrupts_a_timed_out_body_where_it_stands(cluster, live_db):
    from tests.testapp.models import Marker

    queue, tag = uid("prefork"), uid("stubborn")
    worker = cluster.worker(queue)
    try:
        execution = durableflow.start("t.timeout-stubborn", {"tag": tag, "seconds": 60, "timeout": 1}, queue=queue)

        done = wait_status(execution.id, timeout=60)

        assert done.result == "STEP_TIMEOUT"
        [record] = steps_of(execution.id)
        assert (record.status, record.error["code"]) == ("failed", "STEP_TIMEOUT")
        marks = {mark.name.removeprefix(f"{tag}:"): mark for mark in Marker.objects.filter(name__startswith=tag)}
        assert sorted(marks) == ["started", "stopped"]  # neither swallowed by `except Exception` nor finished
        assert marks["stopped"].created_at - marks["started"].created_at < timedelta(seconds=10)
    finally:
        worker.stop()
