"""Every part of Django's database layer and of psycopg that durableflow uses beyond their
documented API, in this one module.

``tests/orm/test_backend_internals.py`` checks each of them (``INTERNALS``) on the installed Django
and psycopg, so that a release that changes one fails that test by name rather than a delivery.
The architecture test rejects these names anywhere else in the package.

What is here:

- accessors: the driver's connection under Django's (``driver``), whether a transaction is open
  (``in_transaction``), whether an ``execute_wrapper`` is installed, a column's converters;
- ``cursor``: a psycopg cursor for durableflow's prepared statements, wrapped as Django wraps its
  own (``make_cursor`` / ``make_debug_cursor``), so that errors are translated and query
  logging still sees it;
- ``possible`` / ``run``: one statement sent to PostgreSQL and something else done while the
  server runs it;
- ``on_commit_sent``: an ``on_commit`` callback called while the transaction's ``COMMIT`` runs.

A start is an INSERT that must commit and a broker publish; done one after the other, the
caller waits for the server's commit (its disk flush) and then for the broker. ``run`` sends the
INSERT through psycopg's libpq wrapper (``Connection.pgconn``, the ``psycopg.pq`` module) and
calls ``meanwhile`` while the server executes it; then its result is read. In autocommit (the
statement is its own transaction) a start publishes its delivery meanwhile, while the server
executes and commits the INSERT. Inside a transaction (the caller's ``transaction.atomic()``)
the message is only built meanwhile and published while the transaction's ``COMMIT`` runs
(``on_commit_sent``, below); if the INSERT
is the transaction's first statement, the ``BEGIN`` psycopg would have sent on its own, one
round trip earlier, goes with it in one libpq pipeline (``BEGIN``, the INSERT, a sync: one
round trip), spelled from the connection's public ``isolation_level``, ``read_only`` and
``deferrable`` as psycopg spells it.

Inside a transaction, ``on_commit_sent`` takes the publish off the caller's path as autocommit
does: the connection's commit (Django's ``_commit``, on that connection only) sends ``COMMIT``,
calls the callbacks registered with it (those of savepoints rolled back are gone from Django's
list by then) while the server commits, then reads the result; Django then runs its
``on_commit`` callbacks, in which these do nothing more. The publish is made only once the
application has sent ``COMMIT``: a transaction rolled back publishes nothing; one whose
``COMMIT`` fails leaves a delivery that finds no row, waits for it a little and is dropped, as
after a failed INSERT in autocommit.

Only on PostgreSQL with psycopg 3, in autocommit or in an open transaction that has not failed,
and when no ``execute_wrapper`` is installed (those wrap Django's cursors, which this bypasses:
with one installed, the caller takes the ordinary path so that they see the statement).
Errors are raised as Django's database errors, and query logging (``CaptureQueriesContext``,
``DEBUG``) records the statement as a cursor would (the ``BEGIN`` is logged by Django when the
transaction opens, as always).
"""

from __future__ import annotations

import contextlib
import functools
import selectors
import time
from typing import Any, Callable, Iterator

from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

__all__ = [
    "INTERNALS",
    "driver",
    "in_transaction",
    "has_execute_wrappers",
    "db_converters",
    "cursor",
    "pipeline",
    "possible",
    "run",
    "on_commit_sent",
]

# (what, where) for each undocumented name used here: the test checks every one exists.
INTERNALS = (
    ("connection.connection", "django.db.backends.base.base.BaseDatabaseWrapper"),
    ("connection.in_atomic_block", "django.db.backends.base.base.BaseDatabaseWrapper"),
    ("connection.execute_wrappers", "django.db.backends.base.base.BaseDatabaseWrapper"),
    ("connection.queries_logged", "django.db.backends.base.base.BaseDatabaseWrapper"),
    ("connection.queries_log", "django.db.backends.base.base.BaseDatabaseWrapper"),
    ("connection.make_cursor", "django.db.backends.base.base.BaseDatabaseWrapper"),
    ("connection.make_debug_cursor", "django.db.backends.base.base.BaseDatabaseWrapper"),
    ("connection.wrap_database_errors", "django.db.backends.base.base.BaseDatabaseWrapper"),
    ("connection.ops.get_db_converters", "django.db.backends.base.operations.BaseDatabaseOperations"),
    ("Col.get_db_converters", "django.db.models.expressions.Col"),
    ("CursorWrapper, CursorDebugWrapper.debug_sql", "django.db.backends.utils"),
    ("Connection.pgconn, prepare_threshold", "psycopg.Connection"),
    ("Transformer, PyFormat", "psycopg.adapt"),
    ("PGconn.send_query_params, flush, is_busy, consume_input, get_result, socket", "psycopg.pq"),
    ("PGconn.transaction_status, enter_pipeline_mode, pipeline_sync, exit_pipeline_mode", "psycopg.pq"),
    ("Connection.isolation_level, read_only, deferrable: the BEGIN psycopg sends", "psycopg.Connection"),
    ("connection._commit, run_on_commit: (savepoint ids, callback, robust)", "django.db.backends.base.base"),
    ("debug_transaction", "django.db.backends.utils"),
    ("PGconn.send_query", "psycopg.pq"),
)


def driver(connection) -> Any:
    """The driver's connection under Django's ``connection`` (None until it connects)."""
    return connection.connection


def in_transaction(connection) -> bool:
    """Whether ``connection`` is inside ``transaction.atomic`` (a caller's, a test's, ours)."""
    return connection.in_atomic_block


def has_execute_wrappers(connection) -> bool:
    return bool(connection.execute_wrappers)


def db_converters(connection, column) -> list:
    """The converters Django applies to ``column``'s values read on ``connection``."""
    return connection.ops.get_db_converters(column) + column.get_db_converters(connection)


@contextlib.contextmanager
def pipeline(connection) -> Iterator[None]:
    """psycopg's pipeline on Django's ``connection``: the statements executed in the block are
    sent together and their results read at its end (one round trip); outside a transaction,
    they are one transaction, committed at the end. Errors are raised as Django's."""
    connection.ensure_connection()
    with connection.wrap_database_errors, driver(connection).pipeline():
        yield


def possible(connection) -> bool:
    """Whether ``run`` can serve a statement on Django's ``connection`` now."""
    if connection.vendor != "postgresql" or has_execute_wrappers(connection):
        return False
    import psycopg
    from psycopg import pq

    connection.ensure_connection()
    raw = driver(connection)
    if not isinstance(raw, psycopg.Connection):
        return False
    if not in_transaction(connection):
        return connection.get_autocommit()
    status = raw.pgconn.transaction_status
    # Not begun yet on the server: BEGIN goes with the statement, in a pipeline (libpq >= 14).
    return status == pq.TransactionStatus.INTRANS or (
        status == pq.TransactionStatus.IDLE and not raw.autocommit and psycopg.Pipeline.is_supported()
    )


def run(connection, sql: str, params: list[Any], meanwhile: Callable[[], Any]) -> list[tuple]:
    """Send ``sql`` (placeholders ``$1``, ``$2``...) with ``params``, call ``meanwhile()`` while the
    server runs it, then return its rows. ``possible(connection)`` must be true.

    ``meanwhile`` runs once the statement has left this process, whether or not it then
    succeeds; the statement's result is read even if ``meanwhile`` raises. Inside a transaction
    the statement is the transaction's (begun with it if it had not begun on the server yet).
    """
    from psycopg import pq
    from psycopg.adapt import PyFormat, Transformer

    connection.validate_thread_sharing()
    raw = driver(connection)
    transformer = Transformer(raw)
    started = time.monotonic()
    # Not under psycopg's connection lock: ``meanwhile`` (a Celery publish, its signal receivers)
    # could use this connection, and would then fail (psycopg: another command is in progress)
    # rather than wait for ever.
    with connection.wrap_database_errors:
        pgconn = raw.pgconn
        dumped = transformer.dump_sequence(params, [PyFormat.AUTO] * len(params))
        begin = not raw.autocommit and pgconn.transaction_status == pq.TransactionStatus.IDLE
        if not begin:
            pgconn.send_query_params(sql.encode(), dumped, transformer.types, transformer.formats)
        else:
            pgconn.enter_pipeline_mode()
            try:
                pgconn.send_query_params(_begin_statement(raw), None)
                pgconn.send_query_params(sql.encode(), dumped, transformer.types, transformer.formats)
                pgconn.pipeline_sync()
            except BaseException:
                raw.close()  # a pipeline half sent: nothing psycopg could go on with
                raise
        _flush(pgconn)
        try:
            meanwhile()
        finally:
            results = _pipeline_results(raw) if begin else _results(pgconn)
        rows = _rows(transformer, results)
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
    return rows


class _Sent:
    """An ``on_commit`` callback that runs once: while the ``COMMIT`` runs, or after it."""

    __slots__ = ("fn", "done")

    def __init__(self, fn: Callable[[], Any]):
        self.fn, self.done = fn, False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            self.fn()


def on_commit_sent(connection, fn: Callable[[], Any]) -> None:
    """Call ``fn`` once the transaction open on ``connection`` commits, as ``on_commit`` does;
    on PostgreSQL (psycopg 3) while the server runs its ``COMMIT`` (module docstring)."""
    from django.db import transaction

    callback = _Sent(fn)
    transaction.on_commit(callback, using=connection.alias)
    if "_commit" not in vars(connection) and possible(connection) and in_transaction(connection):
        connection._commit = functools.partial(_commit, connection, type(connection)._commit)


def _commit(connection, commit: Callable[[Any], Any]) -> Any:
    """Django's commit of ``connection``, calling the ``on_commit_sent`` callbacks meanwhile."""
    from django.db.backends.utils import debug_transaction
    from psycopg import pq

    due = [fn for _, fn, _ in connection.run_on_commit if isinstance(fn, _Sent) and not fn.done]
    raw = driver(connection)
    if not due or raw is None or raw.pgconn.transaction_status != pq.TransactionStatus.INTRANS:
        return commit(connection)
    pgconn = raw.pgconn
    with debug_transaction(connection, "COMMIT"), connection.wrap_database_errors:
        pgconn.send_query(b"COMMIT")
        _flush(pgconn)
        try:
            for callback in due:
                try:
                    callback()
                except Exception:  # noqa: BLE001 - raised again where Django runs it, after the commit
                    callback.done = False
        finally:
            results = _results(pgconn)
        _succeeded(results)  # a failed COMMIT raises (the transaction is over either way)


def _begin_statement(raw) -> bytes:
    """The ``BEGIN`` psycopg sends before a transaction's first statement, from the connection's
    public settings (Django sets ``isolation_level`` from ``OPTIONS``)."""
    from psycopg import IsolationLevel

    parts = [b"BEGIN"]
    if raw.isolation_level is not None:
        parts += [b"ISOLATION LEVEL", IsolationLevel(raw.isolation_level).name.replace("_", " ").encode()]
    if raw.read_only is not None:
        parts.append(b"READ ONLY" if raw.read_only else b"READ WRITE")
    if raw.deferrable is not None:
        parts.append(b"DEFERRABLE" if raw.deferrable else b"NOT DEFERRABLE")
    return b" ".join(parts)


def _flush(pgconn) -> None:
    if not pgconn.flush():  # a start's INSERT: sent whole at once
        return
    with selectors.DefaultSelector() as selector:
        selector.register(pgconn.socket, selectors.EVENT_WRITE)
        while pgconn.flush():
            selector.select()


def _results(pgconn) -> list[Any]:
    """Every result of the statement sent, waiting for the server without holding the GIL."""
    results: list[Any] = []
    with selectors.DefaultSelector() as selector:
        selector.register(pgconn.socket, selectors.EVENT_READ)
        while True:
            while pgconn.is_busy():
                selector.select()
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                return results
            results.append(result)


def _pipeline_results(raw) -> list[Any]:
    """Every result of a pipeline (``BEGIN``, the statement, a sync), then out of pipeline mode.

    A pipeline left with results unread (an interrupted read) is not left to psycopg, which
    would misread them: the connection is closed (Django then opens a new one).
    """
    from psycopg import pq

    pgconn = raw.pgconn
    results: list[Any] = []
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(pgconn.socket, selectors.EVENT_READ)
            while True:
                while pgconn.is_busy():
                    selector.select()
                    pgconn.consume_input()
                result = pgconn.get_result()
                if result is None:  # the end of one statement's results
                    continue
                if result.status == pq.ExecStatus.PIPELINE_SYNC:
                    break
                results.append(result)
        pgconn.exit_pipeline_mode()
    except BaseException:
        raw.close()
        raise
    return results


def _rows(transformer, results: list[Any]) -> list[tuple]:
    from psycopg import pq

    rows: list[tuple] = []
    for result in _succeeded(results):
        if result.status == pq.ExecStatus.TUPLES_OK:
            transformer.set_pgresult(result)
            rows.extend(transformer.load_row(i, tuple) for i in range(result.ntuples))
    return rows


def _succeeded(results: list[Any]) -> list[Any]:
    """``results``, unless one is an error: that is raised as psycopg raises it."""
    from psycopg import errors, pq

    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            state = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
            message = (result.error_message or b"").decode(errors="replace").strip()
            try:
                kind = errors.lookup(state)
            except KeyError:
                kind = errors.DatabaseError
            raise kind(message)
    return results


def cursor(connection, *, prepare: bool = True):
    """A cursor for these statements, wrapped by the connection's public ``make_cursor`` /
    ``make_debug_cursor`` as ``connection.cursor()`` wraps its own, so that errors are translated
    and query logging (``CaptureQueriesContext``, debug) still sees it.

    On PostgreSQL it binds on the server and, with ``prepare``, prepares what it runs: the server
    parses and plans each statement once per connection instead of on every call (about half of
    a claim's cost, a third of a step's). Django connects with ``prepare_threshold=None``
    (psycopg never prepares on its own), so this cursor asks for it on each ``execute``; psycopg
    keeps the prepared statements per connection (at most ``prepared_max``, 100 by default).
    ``prepare=False``: statements run once or rarely (a multi-row INSERT of a given size), and
    projects whose pooler does not carry prepared statements (``PREPARED_STATEMENTS``).
    """
    if connection.vendor != "postgresql":
        return connection.cursor()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    pg = driver(connection)
    if prepare and pg.prepare_threshold is None:
        # Django's "never": psycopg then refuses even an explicit prepare. A threshold no
        # statement reaches keeps Django's own queries unprepared and lets these ask for it.
        pg.prepare_threshold = _ONLY_WHEN_ASKED
    raw = _cursor_class(prepare)(pg)
    if not connection.queries_logged:
        return connection.make_cursor(raw)
    return _StatementLogged(raw, connection) if prepare else connection.make_debug_cursor(raw)


class _StatementLogged(CursorDebugWrapper):
    """Logs each statement as written. Django's ``last_executed_query`` reads the text psycopg
    keeps of an unprepared execution; of a prepared one it keeps none (it would log ``None``)."""

    def execute(self, sql, params=None):
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


@functools.cache
def _cursor_class(prepare: bool) -> type:
    import psycopg

    if not prepare:
        return psycopg.Cursor

    class PreparingCursor(psycopg.Cursor):
        """A server-binding cursor whose ``execute`` prepares unless told otherwise."""

        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)

    return PreparingCursor


# A prepare threshold no statement reaches: see ``cursor``.
_ONLY_WHEN_ASKED = 2**62
