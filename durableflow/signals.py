"""Django signals: a run started, a run finished, a step attempt failed.

Each is sent after the commit that made it true, in the process that committed it (a worker,
for most), and never for a transaction that rolled back::

    from django.dispatch import receiver
    from durableflow.signals import execution_finished

    @receiver(execution_finished)
    def count_finished(sender, execution_id, workflow, status, **kwargs):
        ...

``sender`` is the ``Execution`` model. The keyword arguments:

``execution_started``
    ``execution_id``, ``workflow``, ``status`` (``"running"``): the run's first delivery
    claimed it. Sent once per run (a retried run goes on; it does not start again).
``execution_finished``
    ``execution_id``, ``workflow``, ``status`` (the terminal status: ``completed``, ``failed``,
    ``cancelled``, ``compensated``, ``compensation_failed``), ``error`` (the recorded error, or
    None). A failed run that is retried and ends again sends it again.
``step_failed``
    ``execution_id``, ``workflow``, ``step_key``, ``status`` (the step's: ``waiting`` when
    another attempt follows, ``failed`` when none does), ``attempt`` (its number, from 1),
    ``error`` (the recorded error). Sent for each failed attempt that is recorded.

Receivers run after the commit: what they read is what everyone reads. A receiver that
raises is logged (loggers ``django.dispatch``, with its traceback, and ``durableflow.signals``)
and the others still run; the delivery or
verb that sent the signal is not disturbed. Keep receivers quick, as they run inside the
worker's delivery: send slow work to a task of its own.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from durableflow.engine import logs, observing

__all__ = ["execution_started", "execution_finished", "step_failed"]

logger = logs.logger("durableflow.signals")

execution_started = Signal()
execution_finished = Signal()
step_failed = Signal()

_BY_EVENT = {
    observing.STARTED: execution_started,
    observing.FINISHED: execution_finished,
    observing.STEP_FAILED: step_failed,
}


def notifier() -> observing.Notify | None:
    """What the engine is to tell (``EngineSettings.notify``): ``send`` while any of these
    signals has a receiver, else None (nothing is registered on the commit for nobody)."""
    from durableflow.models import Execution

    if any(signal.has_listeners(Execution) for signal in _BY_EVENT.values()):
        return send
    return None


def send(event: str, fields: dict[str, Any]) -> None:
    """Send the signal of an engine event (``durableflow.engine.observing``) to every receiver."""
    from durableflow.models import Execution

    signal = _BY_EVENT[event]
    # send_robust: a receiver that raises does not stop the others; Django logs its traceback
    # (logger ``django.dispatch``), this names the execution it was told of.
    for receiver, response in signal.send_robust(sender=Execution, **fields):
        if isinstance(response, Exception):
            logger.error(
                "a receiver of %s (%s) raised %r for execution %s; the others were called",
                event,
                getattr(receiver, "__qualname__", receiver),
                response,
                fields.get("execution_id"),
                extra={"execution_id": fields.get("execution_id"), "workflow": fields.get("workflow")},
            )
