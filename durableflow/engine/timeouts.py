"""Bounding one attempt of a step body in time, without taking the host's alarm or threads hostage.

``call_with_timeout(fn, args, kwargs, timeout)`` calls ``fn`` and raises ``StepTimeout`` once
``timeout`` seconds have passed. Once the deadline has passed the call never returns the body's
value, even if the body returns afterwards: a timed-out attempt is never recorded as a success.

**In the main thread** (Celery's prefork children and the solo pool run tasks there) the body is
interrupted where it stands: at the deadline a ``SIGALRM`` handler raises ``_Interrupt``, a
``BaseException``, so ``except Exception`` in the body cannot swallow it; a ``time.sleep`` or a
blocking socket read is cut short by the signal. The process has one real-time timer
(``ITIMER_REAL``, also behind ``signal.alarm``), and the host may already be using it
(pytest-timeout, a watchdog of its own). The **outer-alarm rule**: a step never cancels nor
delays an alarm that was set before it. For the length of the call the timer is armed for
whichever comes first, the host's expiry or the step's deadline, and the host's expiry is
passed to the host's own handler on time (a default disposition ends the process, as it would
have; an interval timer keeps ticking at its interval). Afterwards the host's handler is put
back and its timer re-armed with what is left of it. A ``SIGALRM`` that is neither (someone's
``kill``) goes to the host's handler if it is a Python function, and is dropped otherwise. An
enclosing ``call_with_timeout`` is a host like any other, so calls nest.

**Off the main thread** (Celery's threads pool, a web server's request threads) signals cannot be
used; nor can they where ``setitimer`` is missing or ``SIGALRM``'s handler was installed outside
Python (it could not be put back), so those cases take this path too. The body runs in a
*daemon* helper thread, so a stuck body never holds up interpreter exit (a worker's warm
shutdown); the caller waits for it until the deadline. At the deadline the caller sends the
helper an asynchronous exception (``PyThreadState_SetAsyncExc``), logs a warning naming the body,
and raises ``StepTimeout`` at once; the body stops at its next bytecode, so it does not go on
running unnoticed beside the retry. The helper calls ``on_thread_exit`` last, whatever
happened (pass ``django.db.connections.close_all``: an ORM query in the body opened a connection
for that thread). Races: the caller decides, under a lock shared with the helper, whether the body
finished in time; it interrupts only a body that is still running, and the helper clears an
interrupt that had not landed by the time the body ended, inside its own handler, so it can never
surface in ``on_thread_exit`` or in other code.

**What cannot be interrupted**: Python cannot stop C code. A body blocked in a C call that does
not return to the interpreter (a long computation in an extension, a wait that retries on
``EINTR`` without running signal handlers) stops only when the call returns; off the main thread
even ``time.sleep(60)`` runs to its end, quietly in its daemon thread, and the body stops as it
returns (an INFO line says when). A body that catches
``BaseException`` can swallow the interruption and go on; its late return is discarded all the
same. A body that sets its own ``SIGALRM`` timer takes the timer over while it holds it.
"""

from __future__ import annotations

import contextvars
import ctypes
import math
import signal
import threading
import time
from typing import Any, Callable

from durableflow import exceptions
from durableflow.engine import logs

__all__ = ["call_with_timeout"]

logger = logs.logger("durableflow.timeouts")

# A timer expiry is never early by the kernel's clock; this absorbs rounding to microseconds.
_SLACK = 0.001
_SOONEST = 1e-6  # setitimer(0) would disarm the timer, not fire it now


def call_with_timeout(
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    timeout: float | None,
    *,
    on_thread_exit: Callable[[], None] | None = None,
) -> Any:
    """Call ``fn(*args, **kwargs)``; raise ``StepTimeout`` if it runs longer than ``timeout`` seconds.

    ``timeout=None`` calls ``fn`` directly. ``on_thread_exit`` is called by the helper thread
    that runs the body off the main thread, after the body, whatever happened; it is not called
    in the main thread, where the body runs in the caller's own thread. See the module docstring.
    """
    if timeout is None:
        return fn(*args, **kwargs)
    if not 0 < timeout < math.inf:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if _alarm_available():
        return _Alarm(timeout).call(fn, args, kwargs)
    return _Helper(fn, args, kwargs, on_thread_exit).call(timeout)


def _timed_out(timeout: float) -> exceptions.StepTimeout:
    return exceptions.StepTimeout(message=f"the attempt ran longer than {timeout:g} s")


def _describe(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if name and module else repr(fn)


# In the main thread: SIGALRM, shared with the host ----------------------------------------------------


def _alarm_available() -> bool:
    # A handler installed outside Python reads as None and could not be put back.
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) is not None
    )


class _Interrupt(BaseException):
    """Raised into the body at its deadline; a BaseException so ``except Exception`` lets it pass."""

    def __init__(self, alarm: _Alarm):
        super().__init__("step deadline")
        self.alarm = alarm


class _Alarm:
    """One call's deadline on the process's real-time timer, multiplexed with the host's timer.

    Everything here runs in the main thread; the signal handler interleaves with the call only
    between bytecodes, so plain attributes are enough.
    """

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.deadline = 0.0
        self.pending = False  # the deadline is armed and has not interrupted the body
        self.expired = False  # the deadline passed while the body ran: its return is discarded
        self.host_handler: Any = signal.SIG_DFL
        self.host_at: float | None = None  # monotonic time of the host timer's next expiry
        self.host_interval = 0.0

    def call(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        self._take_over()
        try:
            try:
                value = fn(*args, **kwargs)
            finally:
                self.pending = False  # from here on a SIGALRM cannot interrupt anything of ours
        except _Interrupt as exc:
            if exc.alarm is not self:  # an enclosing call's deadline
                raise
            raise _timed_out(self.timeout) from None
        finally:
            self._give_back()
        if self.expired:  # the body swallowed the interrupt, or returned just as it fired
            raise _timed_out(self.timeout)
        return value

    def _take_over(self) -> None:
        self.host_handler = signal.getsignal(signal.SIGALRM)
        # Stopping the timer and reading what was left of it is one call, so no expiry falls between.
        remaining, self.host_interval = signal.setitimer(signal.ITIMER_REAL, 0)
        now = time.monotonic()
        self.host_at = now + remaining if remaining else None
        self.deadline = now + self.timeout
        self.pending = True
        signal.signal(signal.SIGALRM, self._on_alarm)
        self._arm(now)

    def _give_back(self) -> None:
        self.pending = False
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
            # An expiry that came before the line above is handled by _on_alarm as it returns (the
            # interpreter runs pending handlers when a call returns), so it is not lost; the host's
            # handler may raise from there, hence the finally.
        finally:
            signal.signal(signal.SIGALRM, self.host_handler)
            if self.host_at is not None:
                left = max(self.host_at - time.monotonic(), _SOONEST)
                signal.setitimer(signal.ITIMER_REAL, left, self.host_interval)

    def _arm(self, now: float) -> None:
        expiries = [self.host_at] if self.host_at is not None else []
        if self.pending:
            expiries.append(self.deadline)
        delay = max(min(expiries) - now, _SOONEST) if expiries else 0
        signal.setitimer(signal.ITIMER_REAL, delay)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        hosts = self.host_at is not None and now >= self.host_at - _SLACK
        if hosts:
            self.host_at = self._next_host_expiry(now)
        ours = now >= self.deadline - _SLACK
        interrupt = ours and self.pending
        if interrupt:
            self.pending = False
            self.expired = True
        self._arm(now)  # before the host's handler runs: it may raise
        if hosts or not ours:
            self._pass_to_host(signum, frame, due=hosts)
        if interrupt:
            raise _Interrupt(self)

    def _next_host_expiry(self, now: float) -> float | None:
        if not self.host_interval or self.host_at is None:
            return None
        missed = math.floor((now - self.host_at) / self.host_interval) + 1  # the kernel coalesces them too
        return self.host_at + missed * self.host_interval

    def _pass_to_host(self, signum: int, frame: Any, *, due: bool) -> None:
        handler = self.host_handler
        if callable(handler):
            handler(signum, frame)
        elif handler == signal.SIG_DFL and due:
            # The host's timer expired under the default disposition: end the process, as it would have.
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGALRM)


# Off the main thread: a daemon helper thread and an asynchronous exception -------------------------

_STARTING, _RUNNING, _DONE, _TIMED_OUT = "starting", "running", "done", "timed out"


class _Interrupted(BaseException):
    """Raised asynchronously into a helper thread whose body ran past its deadline."""


def _set_async_exc(ident: int, exc: type[BaseException] | None) -> int:
    """Schedule ``exc`` in thread ``ident`` (``None`` clears a scheduled one); the number of threads hit."""
    # Without argtypes, None is passed as NULL: the documented way to clear.
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exc) if exc is not None else None
    )


class _Helper:
    """One attempt of a body in a daemon thread.

    Concurrency: the caller's thread and the helper share ``_lock`` and ``_state``. The helper
    moves ``starting -> running`` before the body and ``running -> done`` after it; the caller, at
    the deadline, moves ``starting`` or ``running`` to ``timed out`` and, only from ``running``,
    fires the interrupt while holding the lock. So the interrupt is fired at most once, and only
    between the helper's two transitions; whatever of it has not landed when the helper takes the
    lock after the body is cleared before the helper leaves its handler for ``_Interrupted``.
    """

    def __init__(self, fn: Callable[..., Any], args: tuple, kwargs: dict, on_thread_exit: Callable[[], None] | None):
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._on_thread_exit = on_thread_exit
        self._context = contextvars.copy_context()
        self._lock = threading.Lock()
        self._state = _STARTING
        self._finished = threading.Event()
        self._outcome: tuple[Any, BaseException | None] = (None, None)
        self._deadline = 0.0
        self._thread = threading.Thread(target=self._run, name=f"durableflow-step:{_describe(fn)}", daemon=True)

    def call(self, timeout: float) -> Any:
        self._deadline = time.monotonic() + timeout
        self._thread.start()
        try:
            finished = self._finished.wait(max(self._deadline - time.monotonic(), 0))
        except BaseException:  # the caller itself was interrupted: so is the body
            self._give_up()
            raise
        if not finished and self._give_up() is not _DONE:
            logger.warning(
                "step body %s ran longer than its %g s timeout; interrupting it (a body blocked in a C call "
                "stops only when the call returns)",
                _describe(self._fn),
                timeout,
            )
            raise _timed_out(timeout)
        value, error = self._outcome
        self._outcome = (None, None)
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no cycle through this frame's traceback
        return value

    def _give_up(self) -> str:
        """Time the attempt out unless it is done; interrupt a running body. The state found."""
        with self._lock:
            state = self._state
            ident = self._thread.ident  # set: the body runs in that thread
            if state is _RUNNING and ident is not None:
                _set_async_exc(ident, _Interrupted)
            if state is not _DONE:
                self._state = _TIMED_OUT
        return state

    def _run(self) -> None:
        try:
            try:
                self._attempt()
            finally:
                # Cleared here, inside the handler below: an interrupt fired as the body ended
                # can land anywhere up to this line, and nowhere after it.
                _set_async_exc(threading.get_ident(), None)
        except _Interrupted:
            pass
        finally:
            self._exit()

    def _attempt(self) -> None:
        with self._lock:
            if self._state is _TIMED_OUT:  # the caller gave up before the body could start
                return
            self._state = _RUNNING
        try:
            outcome: tuple[Any, BaseException | None]
            outcome = (self._context.run(self._fn, *self._args, **self._kwargs), None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, as a future would
            outcome = (None, exc)
        with self._lock:
            if self._state is _RUNNING:
                self._state = _DONE
                self._outcome = outcome
                self._finished.set()

    def _exit(self) -> None:
        if self._state is _TIMED_OUT:
            logger.info(
                "timed-out step body %s stopped %.1f s after its deadline",
                _describe(self._fn),
                time.monotonic() - self._deadline,
            )
        if self._on_thread_exit is not None:
            try:
                self._on_thread_exit()
            except Exception:
                logger.exception("on_thread_exit failed after step body %s", _describe(self._fn))
