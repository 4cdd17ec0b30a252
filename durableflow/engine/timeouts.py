"""Bounding one attempt of a step body in time."""

from __future__ import annotations

import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable

from durableflow import exceptions


def call_with_timeout(fn: Callable[..., Any], args: tuple, kwargs: dict, timeout: float | None) -> Any:
    """Call ``fn``; raise ``StepTimeout`` if it runs longer than ``timeout`` seconds.

    In the main thread (Celery's prefork and solo pools) a real-time interval timer interrupts
    the body where it stands. Elsewhere the body runs in a helper thread that is abandoned on
    timeout: Python cannot stop a thread, so such a body keeps running in the background.
    """
    if timeout is None:
        return fn(*args, **kwargs)
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        return _with_alarm(fn, args, kwargs, timeout)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="durableflow-step")
    try:
        return pool.submit(fn, *args, **kwargs).result(timeout=timeout)
    except FutureTimeout:
        raise exceptions.StepTimeout(message=f"the attempt ran longer than {timeout:g} s") from None
    finally:
        pool.shutdown(wait=False)


class _Alarm(BaseException):
    """Raised inside the body by the timer; a BaseException so the body cannot swallow it."""


def _with_alarm(fn, args, kwargs, timeout):
    running = [True]

    def on_alarm(signum, frame):
        if running[0]:
            raise _Alarm()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            return fn(*args, **kwargs)
        finally:
            running[0] = False
    except _Alarm:
        raise exceptions.StepTimeout(message=f"the attempt ran longer than {timeout:g} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
