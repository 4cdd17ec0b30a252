"""Errors raised by durableflow.

Every class carries a stable ``code`` string (the API and the journal speak in codes)
and a message that names the likely cause. ``CODES`` below is the one list of codes: every
code the package raises or records is in it (``tests/engine/test_error_codes.py`` checks the
source), and this tree names the class that carries each::

    DurableflowError              DURABLEFLOW_ERROR
    ├── WorkflowStartError        START_FAILED, UNKNOWN_WORKFLOW, INVALID_PARAMS, IDEMPOTENCY_CONFLICT,
    │                             UNKNOWN_STEP, FORK_VERSION_MISMATCH (fork)
    ├── ScheduleError             INVALID_SCHEDULE, UNKNOWN_WORKFLOW, INVALID_PARAMS (schedule, unschedule)
    ├── WorkflowValueError        INVALID_STEP_VALUE, INVALID_RESULT, INVALID_STEP_KEY, DUPLICATE_STEP_KEY,
    │                             NESTED_STEP, STEP_SCHEMA_INVALID, PAYLOAD_TOO_LARGE, STORE_SCHEMA_INVALID,
    │                             INVALID_STORE_STATE, INVALID_STORE_ID, UNKNOWN_STORE, STORE_READ_ONLY,
    │                             STORE_CALLBACK_NOT_SYNC, TRANSACTION_FORBIDDEN_CALL, TRANSACTION_WRONG_ALIAS,
    │                             TRANSACTION_ASYNC_BODY, INVALID_PAYLOAD, INVALID_EVENT, INVALID_METADATA,
    │                             INVALID_DELAY (ctx.step.sleep), INVALID_RATE_LIMIT (ctx.step.run's key),
    │                             INVALID_STREAM (ctx.stream)
    ├── NonDeterminismError       NON_DETERMINISM, UNKNOWN_WORKFLOW, UNKNOWN_VERSION, UNKNOWN_TASK (a
    │                             document's, on a worker), NEW_STEP (a replay check's only)
    ├── RetryableError            RETRYABLE, TRANSACTION_CONFLICT
    ├── StepTimeout               STEP_TIMEOUT
    ├── StepError                 STEP_FAILED (a recorded error whose class cannot be rebuilt)
    ├── WaitTimeout (TimeoutError) WAIT_TIMEOUT
    ├── ChildExecutionError       CHILD_FAILED
    ├── WorkflowEffectError       EFFECT_REQUEST_MISMATCH, INVALID_EFFECT_REQUEST
    ├── EffectDeliveryError       INVALID_EFFECT_RESULT, INVALID_EFFECT_LOOKUP (fail the delivery)
    ├── DocumentError             (a workflow document, ``.pointer`` names the offending member)
    │     at compile time:        DOCUMENT_NOT_JSON, DOCUMENT_TOO_LARGE, DOCUMENT_FORMAT, UNKNOWN_MEMBER,
    │                             MISSING_MEMBER, INVALID_MEMBER, INVALID_STATE_NAME, STATE_FORM,
    │                             UNDECLARED_STATE, MISSING_OTHERWISE, EMPTY_WAIT, INVALID_DELAY,
    │                             INVALID_LIMIT, NESTING_TOO_DEEP, UNBOUNDED_CYCLE, INVALID_EXPRESSION,
    │                             UNKNOWN_TASK, DAG_ENDPOINTS, DAG_UNKNOWN_NODE, DAG_EDGE, DAG_CYCLE,
    │                             DAG_UNREACHABLE
    │     when saved:             INVALID_DOCUMENT_NAME, DOCUMENT_NAME_TAKEN, DOCUMENT_EXISTS
    │     at run time:            VISIT_LIMIT_EXCEEDED, EXPRESSION_FAILED
    ├── ExecutionFailed           EXECUTION_FAILED
    ├── ExecutionNotFound         NOT_FOUND, TOKEN_NOT_FOUND
    └── InvalidTransition         INVALID_TRANSITION, TOKEN_ALREADY_COMPLETED, NOT_FINISHED (rerun, fork)

Recorded on an execution rather than raised: CANCELLED (the error of a cancelled run),
DEADLINE_EXCEEDED (of a run the sweep cancelled at its deadline), DELIVERY_LOST (of a run whose
deliveries died with their process too often in a row),
COMPENSATION_FAILED (of a run whose ``ctx.compensate()`` left a compensation failed), and in a
compensation report: COMPENSATION_INTERRUPTED, COMPENSATION_UNREACHED.

Answered by the REST API only (``durableflow.api.errors``: no exception class carries them;
the API also answers with the codes above, e.g. ``NOT_FOUND``, ``PAYLOAD_TOO_LARGE``)::

    400 INVALID_JSON, INVALID_REQUEST     401/403 NOT_AUTHENTICATED, PERMISSION_DENIED
    405 METHOD_NOT_ALLOWED                406 NOT_ACCEPTABLE
    415 UNSUPPORTED_MEDIA_TYPE            429 THROTTLED
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DurableflowError",
    "WorkflowStartError",
    "ScheduleError",
    "WorkflowValueError",
    "NonDeterminismError",
    "RetryableError",
    "StepTimeout",
    "StepError",
    "WaitTimeout",
    "ChildExecutionError",
    "WorkflowEffectError",
    "EffectDeliveryError",
    "ExecutionFailed",
    "ExecutionNotFound",
    "InvalidTransition",
    "DocumentError",
]


CODES: dict[str, str] = {
    "DURABLEFLOW_ERROR": "an error without a more precise code",
    # starting
    "START_FAILED": "the execution could not be started",
    "UNKNOWN_WORKFLOW": "no workflow is registered under that name (at start; on a worker, the run stalls)",
    "INVALID_PARAMS": "params, execution_id, idempotency_key or deadline are not acceptable; nothing was written",
    "IDEMPOTENCY_CONFLICT": "the idempotency key or execution id already started something else",
    "UNKNOWN_STEP": "fork: the step key is not in the execution's journal (or is reserved, or a map item)",
    "FORK_VERSION_MISMATCH": "fork: the version the execution ran with is not registered",
    # schedules
    "INVALID_SCHEDULE": "a schedule's name, crontab, every or catch_up is not acceptable (or the name is another "
    "periodic task's); nothing was written",
    # values and keys
    "INVALID_STEP_VALUE": "a step value is not a durable value (JSON data)",
    "INVALID_RESULT": "the workflow returned a value that is not a durable value",
    "INVALID_STEP_KEY": "a step key is empty, reserved ($...) or too long",
    "DUPLICATE_STEP_KEY": "a step key was reached twice in one execution",
    "NESTED_STEP": "a step was called inside another step's body",
    "STEP_SCHEMA_INVALID": "a step value failed its schema",
    "PAYLOAD_TOO_LARGE": "a value is larger than MAX_PAYLOAD_BYTES",
    "INVALID_RATE_LIMIT": "a rate limit's key (or what its key function returned) is not a non-empty string of "
    "at most 200 characters, or the key function raised",
    # stores
    "STORE_SCHEMA_INVALID": "a store's new state failed its schema",
    "INVALID_STORE_STATE": "a store's new (or initial) state is not a durable value",
    "INVALID_STORE_ID": "a store id is not a non-empty string of at most 200 characters",
    "UNKNOWN_STORE": "no store is defined under that name",
    "STORE_READ_ONLY": "a store selector tried to change the state it reads",
    "STORE_CALLBACK_NOT_SYNC": "a store selector, updater, claim or initial is asynchronous",
    "INVALID_PAYLOAD": "an event, signal or token payload is not a durable value",
    "INVALID_EVENT": "an event type, event id, signal name, token or match is empty, too long or not text",
    "INVALID_STREAM": "a stream id is not a non-empty string of at most 200 characters, or a chunk is not a "
    "durable value",
    "INVALID_METADATA": "a metadata key, target or value is not acceptable, or the change does not fit the "
    "current value (increment of a non-number, append to a non-list)",
    # replay
    "NON_DETERMINISM": "the journal does not match the workflow code (another step kind, or a deprecated patch's "
    "old branch)",
    "NEW_STEP": "replay check: the code reaches a step its journal lacks before steps the journal recorded (a "
    "change not behind ctx.patched(), or step keys that moved)",
    "UNKNOWN_VERSION": "on a worker: the version an execution started with is not registered (the run stalls until "
    "it is)",
    # steps and waits
    "RETRYABLE": "a step body asked to be retried",
    "STEP_TIMEOUT": "one attempt of a step ran longer than its timeout",
    "STEP_FAILED": "a step failed with an error that carries no code of its own",
    "WAIT_TIMEOUT": "a durable wait (or result()) reached its timeout",
    # transactional steps
    "TRANSACTION_FORBIDDEN_CALL": "a transactional step's body sent a task message (Celery) inside its transaction",
    "TRANSACTION_WRONG_ALIAS": "a transactional step's body queried a database alias other than durableflow's",
    "TRANSACTION_ASYNC_BODY": "a transactional step's body is a coroutine function or returned an awaitable",
    "TRANSACTION_CONFLICT": "a transactional step's transaction kept failing on serialization failures or deadlocks",
    "CHILD_FAILED": "a child execution did not complete",
    # effects
    "EFFECT_REQUEST_MISMATCH": "an effect id is known with another operation or input",
    "INVALID_EFFECT_REQUEST": "an effect descriptor is invalid",
    "INVALID_EFFECT_RESULT": "an effect's result (from perform or lookup) is not a durable value",
    "INVALID_EFFECT_LOOKUP": "an effect's lookup answered something other than settled, not-found or unknown",
    # workflow documents (JSON statecharts): compile time, with the JSON pointer of the member
    "DOCUMENT_NOT_JSON": "a workflow document is not JSON data (a durable value)",
    "DOCUMENT_TOO_LARGE": "a workflow document has more states, nodes or characters than the compiler takes",
    "DOCUMENT_FORMAT": "a document lacks \"$workflow\": \"0.2\" (or a DAG \"$dag\": \"0.1\")",
    "UNKNOWN_MEMBER": "a document member the format does not have (a typo?)",
    "MISSING_MEMBER": "a member the document needs is missing (initial, then, a branch's to...)",
    "INVALID_MEMBER": "a document member has the wrong type or shape",
    "INVALID_STATE_NAME": "a state or node name is empty, too long or not storable text",
    "STATE_FORM": "a state declares none or more than one of work, choose, on, flow, final",
    "UNDECLARED_STATE": "a transition names a state that its scope does not declare",
    "MISSING_OTHERWISE": "a choose state has no otherwise branch",
    "EMPTY_WAIT": "an on state has neither an event branch nor an after delay",
    "INVALID_DELAY": "a sleep's seconds or an after delay's milliseconds are not a number from 0 to a century",
    "INVALID_LIMIT": "a state's limit is not a positive integer",
    "NESTING_TOO_DEEP": "flows are nested deeper than 64 levels",
    "UNBOUNDED_CYCLE": "a cycle of automatic transitions passes no state with a limit",
    "INVALID_EXPRESSION": "a guard, input or with is not a JMESPath expression",
    "UNKNOWN_TASK": "a task name and version that no @durableflow.task registers",
    "DAG_ENDPOINTS": "a DAG has not exactly one input node and one output node",
    "DAG_UNKNOWN_NODE": "a DAG edge names a node the DAG does not declare",
    "DAG_EDGE": "a DAG edge repeats another, enters the input node or leaves the output node",
    "DAG_CYCLE": "a DAG's edges form a cycle",
    "DAG_UNREACHABLE": "a DAG node is not on a path from the input node to the output node",
    # workflow documents: saving, running
    "INVALID_DOCUMENT_NAME": "a document's name is not a non-blank string of at most 200 characters",
    "DOCUMENT_NAME_TAKEN": "a code workflow is registered under the document's name",
    "DOCUMENT_EXISTS": "a document with that name exists: PUT a new revision instead",
    "VISIT_LIMIT_EXCEEDED": "a document run entered a state more often than its limit",
    "EXPRESSION_FAILED": "a JMESPath guard, input or with failed on the run's data",
    # steering
    "EXECUTION_FAILED": "the execution ended without completing",
    "NOT_FOUND": "no such execution",
    "INVALID_TRANSITION": "the execution's status does not allow that action",
    "NOT_FINISHED": "rerun and fork act on finished executions only",
    # waits
    "TOKEN_NOT_FOUND": "no wait is registered for that token (and it names no unfinished execution's step)",
    "TOKEN_ALREADY_COMPLETED": "the token was completed before; a token is completed once",
    "CANCELLED": "the execution was cancelled",
    "DEADLINE_EXCEEDED": "the execution was still unfinished at its deadline; the sweep cancelled it",
    "DELIVERY_LOST": "more deliveries of the execution in a row than MAX_LOST_DELIVERIES died with their "
    "worker process (killed, out of memory, a crash in native code); it was failed, not delivered again",
    # sagas
    "COMPENSATION_FAILED": "ctx.compensate() ended the run and at least one compensation failed",
    "COMPENSATION_INTERRUPTED": "a compensation was cut short (crash, lost lease); it is not run twice: check it",
    "COMPENSATION_UNREACHED": "a compensable step is recorded, but the replay did not reach it (code changed)",
    # the REST API's own answers (HTTP status in the docstring above)
    "INVALID_JSON": "the request body is not JSON (or nests deeper than a durable value can)",
    "INVALID_REQUEST": "a field or query parameter is missing, unknown or of the wrong type",
    "NOT_AUTHENTICATED": "the request carries no valid credentials",
    "PERMISSION_DENIED": "the user may not do this (the model permission is needed), or CSRF failed",
    "METHOD_NOT_ALLOWED": "the endpoint does not answer this HTTP method",
    "NOT_ACCEPTABLE": "the API answers JSON only",
    "UNSUPPORTED_MEDIA_TYPE": "the API reads application/json bodies only",
    "THROTTLED": "too many requests; retry after the Retry-After header's seconds",
}


class DurableflowError(Exception):
    """A durableflow error."""

    default_code = "DURABLEFLOW_ERROR"

    def __init__(self, code: str | None = None, message: str | None = None, **detail: Any):
        self.code = code or self.default_code
        self.message = message or (self.__doc__ or "").strip() or self.code
        self.detail = detail
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self):
        return (_rebuild, (type(self), self.code, self.message, self.detail))


def _rebuild(cls, code, message, detail):
    return cls(code, message, **detail)


class WorkflowStartError(DurableflowError):
    """The execution could not be started; nothing was written."""

    default_code = "START_FAILED"


class ScheduleError(DurableflowError):
    """The schedule could not be saved; nothing was written."""

    default_code = "INVALID_SCHEDULE"


class WorkflowValueError(DurableflowError):
    """A value crossing the journal is not a valid durable value."""

    default_code = "INVALID_STEP_VALUE"


class NonDeterminismError(DurableflowError):
    """Replay met a journal that the workflow code no longer produces."""

    default_code = "NON_DETERMINISM"


class RetryableError(DurableflowError):
    """Raised by a step body to ask for another attempt after a durable wait."""

    default_code = "RETRYABLE"

    def __init__(
        self,
        message: str = "the step asked to be retried",
        *,
        max_attempts: int | None = None,
        retry_interval: float | None = None,
        code: str | None = None,
    ):
        if max_attempts is not None and max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if retry_interval is not None and retry_interval < 0:
            raise ValueError("retry_interval must not be negative")
        self.max_attempts = max_attempts
        self.retry_interval = retry_interval
        super().__init__(code, message)

    def __reduce__(self):
        return (
            _rebuild_retryable,
            (self.message, self.max_attempts, self.retry_interval, self.code),
        )


def _rebuild_retryable(message, max_attempts, retry_interval, code):
    return RetryableError(message, max_attempts=max_attempts, retry_interval=retry_interval, code=code)


class StepTimeout(DurableflowError):
    """One attempt of a step ran longer than its ``timeout``."""

    default_code = "STEP_TIMEOUT"


class StepError(DurableflowError):
    """A step failed with an error whose class could not be rebuilt on replay."""

    default_code = "STEP_FAILED"


class WaitTimeout(DurableflowError, TimeoutError):
    """A durable wait reached its timeout."""

    default_code = "WAIT_TIMEOUT"


class ChildExecutionError(DurableflowError):
    """A child execution did not complete."""

    default_code = "CHILD_FAILED"

    def __init__(self, code=None, message=None, *, execution_id=None, status=None, error=None, **detail):
        # Kept in ``detail`` too, so that the recorded error (and a replay) carries them.
        super().__init__(code, message, execution_id=execution_id, status=status, error=error, **detail)
        self.execution_id = execution_id
        self.status = status
        self.error = error


class WorkflowEffectError(DurableflowError):
    """An effect request is invalid or does not match the recorded one."""

    default_code = "INVALID_EFFECT_REQUEST"


class EffectDeliveryError(DurableflowError):
    """An effect's lookup or perform answered something the protocol does not allow.

    Workflow code cannot swallow it (the delivery latches it): the run fails at the effect
    step with the effect left pending, and ``durableflow.retry()`` resumes it with a lookup
    once the code is fixed.
    """

    default_code = "INVALID_EFFECT_RESULT"


class DocumentError(DurableflowError):
    """A workflow document is invalid (``.pointer``: the JSON pointer of the offending member)."""

    default_code = "DOCUMENT_FORMAT"

    def __init__(self, code: str | None = None, message: str | None = None, *, pointer: str = "", **detail: Any):
        super().__init__(code, message, pointer=pointer, **detail)

    @property
    def pointer(self) -> str:
        return self.detail.get("pointer", "")

    def __str__(self) -> str:
        # "" is the whole document (RFC 6901), "/" a member named "".
        return f"{self.code} at {self.pointer}: {self.message}" if self.pointer else super().__str__()


class ExecutionFailed(DurableflowError):
    """The execution ended without completing."""

    default_code = "EXECUTION_FAILED"

    def __init__(self, code=None, message=None, *, status: str = "failed", error=None, **detail):
        self.status = status
        self.error = error
        super().__init__(code, message, **detail)

    def __reduce__(self):
        return (
            _rebuild_failed,
            (self.code, self.message, self.status, self.error, self.detail),
        )


def _rebuild_failed(code, message, status, error, detail):
    return ExecutionFailed(code, message, status=status, error=error, **detail)


class ExecutionNotFound(DurableflowError):
    """No execution has that id."""

    default_code = "NOT_FOUND"


class InvalidTransition(DurableflowError):
    """The execution's status does not allow that action."""

    default_code = "INVALID_TRANSITION"
