"""The undocumented parts of Django and psycopg that durableflow uses, checked on the installed
versions: a release that renames or reshapes one fails here, by name, not in a delivery.

They are used in ``durableflow/orm/backend.py`` only (the architecture test holds the rest of
the package to that); its ``INTERNALS`` lists them, and each has a check here.
"""

from __future__ import annotations

import inspect

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from durableflow.orm import backend


def _parameters(function) -> list[str]:
    return [name for name in inspect.signature(function).parameters if name != "self"]


def test_django_s_connection_attributes_used_exist_with_their_shape(db):
    connection.ensure_connection()
    assert backend.driver(connection) is connection.connection is not None
    assert isinstance(connection.in_atomic_block, bool)
    assert isinstance(connection.execute_wrappers, list)
    assert isinstance(connection.queries_logged, bool)
    assert hasattr(connection.queries_log, "append")
    assert _parameters(connection.make_cursor) == ["cursor"]
    assert _parameters(connection.make_debug_cursor) == ["cursor"]
    with connection.wrap_database_errors:
        pass
    # A start's publish while the caller's COMMIT runs: Django's commit, its on_commit list.
    assert _parameters(type(connections[DEFAULT_DB_ALIAS])._commit) == []
    with transaction.atomic():
        transaction.on_commit(print)
        ((savepoints, callback, robust),) = connection.run_on_commit
        assert isinstance(savepoints, set) and (callback, robust) == (print, False)
        connection.run_on_commit.clear()


def test_django_s_debug_transaction_used_exists_with_its_shape():
    from django.db.backends.utils import debug_transaction

    assert _parameters(debug_transaction) == ["connection", "sql"]


def test_django_s_converters_and_cursor_wrappers_used_exist_with_their_shape():
    from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
    from django.db.models.expressions import Col

    from durableflow.models import Execution

    assert issubclass(CursorDebugWrapper, CursorWrapper)
    assert _parameters(CursorDebugWrapper.debug_sql)[:2] == ["sql", "params"]
    assert _parameters(CursorWrapper.execute)[:2] == ["sql", "params"]
    assert _parameters(connection.ops.get_db_converters) == ["expression"]
    assert _parameters(Col.get_db_converters) == ["connection"]
    column = Execution._meta.get_field("created_at").get_col(Execution._meta.db_table)
    assert isinstance(backend.db_converters(connection, column), list)


def test_psycopg_s_libpq_layer_used_exists_with_its_shape():
    psycopg = pytest.importorskip("psycopg")
    from psycopg import pq
    from psycopg.adapt import PyFormat, Transformer

    assert "prepare_threshold" in dir(psycopg.Connection)
    assert PyFormat.AUTO
    for name in ("dump_sequence", "set_pgresult", "load_row"):
        assert callable(getattr(Transformer, name)), name
    for name in ("send_query", "send_query_params", "flush", "is_busy", "consume_input", "get_result"):
        assert callable(getattr(pq.PGconn, name)), name
    assert pq.ExecStatus.FATAL_ERROR and pq.ExecStatus.TUPLES_OK and pq.DiagnosticField.SQLSTATE
    # A start that opens the caller's transaction: its BEGIN in one pipeline with the INSERT.
    for name in ("enter_pipeline_mode", "pipeline_sync", "exit_pipeline_mode"):
        assert callable(getattr(pq.PGconn, name)), name
    assert hasattr(pq.PGconn, "transaction_status")
    assert pq.ExecStatus.PIPELINE_SYNC and pq.TransactionStatus.IDLE != pq.TransactionStatus.INTRANS
    assert callable(psycopg.Pipeline.is_supported)
    for name in ("isolation_level", "read_only", "deferrable"):
        assert isinstance(getattr(psycopg.Connection, name), property), name
    assert psycopg.IsolationLevel.REPEATABLE_READ.name == "REPEATABLE_READ"


def test_the_libpq_layer_works_on_this_connection(db):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: the libpq layer is psycopg's")
    pgconn = backend.driver(connection).pgconn
    assert isinstance(pgconn.socket, int)
    assert backend.driver(connection).prepare_threshold is None or backend.driver(connection).prepare_threshold >= 0


def test_every_internal_is_listed():
    listed = " ".join(what for what, _ in backend.INTERNALS)
    for name in ("in_atomic_block", "execute_wrappers", "queries_log", "make_cursor", "make_debug_cursor",
                 "get_db_converters", "pgconn", "prepare_threshold", "wrap_database_errors", "enter_pipeline_mode",
                 "pipeline_sync", "exit_pipeline_mode", "transaction_status", "isolation_level"):  # fmt: skip
        assert name in listed, name
