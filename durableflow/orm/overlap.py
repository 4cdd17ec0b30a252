"""One statement sent to PostgreSQL, something else done while the server runs and commits it.

A start is an INSERT that must commit and a broker publish; done one after the other, the
caller waits for the server's commit (its disk flush) and then for the broker. Here the INSERT
is sent through psycopg's libpq wrapper (``Connection.pgconn``, the ``psycopg.pq`` module) and
the publish runs while the server executes and commits it; then its result is read. Only on
PostgreSQL with psycopg 3, in autocommit (outside any transaction: the statement is its own),
and when no ``execute_wrapper`` is installed (those wrap Django's cursors, which this bypasses:
with one installed, the caller takes the ordinary path so that they see the statement).
Errors are raised as Django's database errors, and query logging (``CaptureQueriesContext``,
``DEBUG``) records the statement as a cursor would.
"""

from __future__ import annotations

import selectors
import time
from typing import Any, Callable

__all__ = ["possible", "run"]


def possible(connection) -> bool:
    """Whether ``run`` can serve a statement on Django's ``connection`` now."""
    if connection.vendor != "postgresql" or connection.in_atomic_block or connection.execute_wrappers:
        return False
    import psycopg

    connection.ensure_connection()
    return isinstance(connection.connection, psycopg.Connection) and connection.get_autocommit()


def run(connection, sql: str, params: list[Any], meanwhile: Callable[[], Any]) -> list[tuple]:
    """Send ``sql`` (placeholders ``$1``, ``$2``...) with ``params``, call ``meanwhile()`` while the
    server runs it, then return its rows. ``possible(connection)`` must be true.

    ``meanwhile`` runs once the statement has left this process, whether or not it then
    succeeds; the statement's result is read even if ``meanwhile`` raises.
    """
    from psycopg.adapt import PyFormat, Transformer

    connection.validate_thread_sharing()
    raw = connection.connection
    transformer = Transformer(raw)
    started = time.monotonic()
    # Not under psycopg's connection lock: ``meanwhile`` (a Celery publish, its signal receivers)
    # could use this connection, and would then fail (psycopg: another command is in progress)
    # rather than wait for ever.
    with connection.wrap_database_errors:
        pgconn = raw.pgconn
        dumped = transformer.dump_sequence(params, [PyFormat.AUTO] * len(params))
        pgconn.send_query_params(sql.encode(), dumped, transformer.types, transformer.formats)
        _flush(pgconn)
        try:
            meanwhile()
        finally:
            results = _results(pgconn)
        rows = _rows(transformer, results)
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
    return rows


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


def _rows(transformer, results: list[Any]) -> list[tuple]:
    from psycopg import errors, pq

    rows: list[tuple] = []
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            state = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
            message = (result.error_message or b"").decode(errors="replace").strip()
            try:
                kind = errors.lookup(state)
            except KeyError:
                kind = errors.DatabaseError
            raise kind(message)
        if result.status == pq.ExecStatus.TUPLES_OK:
            transformer.set_pgresult(result)
            rows.extend(transformer.load_row(i, tuple) for i in range(result.ntuples))
    return rows
