"""The database's ceiling and what a workflow costs it (the inputs of ``bench/SCALING.md``).

- ``commit_rate``: C connections (threads, each its own driver connection, autocommit), each
  committing single-row INSERTs as fast as it can for a fixed time: the database's commit rate
  at that concurrency. At C = the worker's pool processes it is the physical ceiling of the
  throughput leg (every step commits at least once).
- ``Primary``: around a live measurement, the write transactions it made (PostgreSQL's next
  transaction id: each committed write takes one, reads take none) and the CPU the server spent
  (this bench database's backends plus the server's own background processes, from /proc: the
  server runs on this machine). ``None`` on SQLite.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

from django.db import connection

__all__ = ["commit_rate", "Primary"]


def _connect():
    if connection.vendor == "postgresql":
        import psycopg

        conn = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, v text)")
        return conn, "INSERT INTO bench_floor (v) VALUES (%s)"
    conn = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, v TEXT)")
    return conn, "INSERT INTO bench_floor (v) VALUES (?)"


def commit_rate(concurrency: int, seconds: float) -> dict[str, Any]:
    """Committed single-row INSERTs per second over ``concurrency`` connections at once."""
    conns = [_connect() for _ in range(concurrency)]
    counts = [0] * concurrency
    start = threading.Barrier(concurrency + 1)
    stop = threading.Event()

    def work(index: int) -> None:
        conn, insert = conns[index]
        start.wait()
        while not stop.is_set():
            conn.execute(insert, ("x",))
            counts[index] += 1

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    for conn, _ in conns:
        conn.close()
    return {
        "concurrency": concurrency,
        "commits": sum(counts),
        "seconds": elapsed,
        "commits_per_s": sum(counts) / elapsed,
    }


def _xid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        return cursor.fetchone()[0]


def _server_cpu_s(database: str) -> float:
    """CPU seconds of the PostgreSQL server's processes that serve this database or the whole
    server (WAL writer, checkpointer...). Other databases' backends are left out, and so are
    backends that exited during the block (the bench's and the workers' connections persist)."""
    import psutil

    total = 0.0
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
            if process.info["name"] != "postgres" and not cmdline.startswith("postgres"):
                continue
            times = process.cpu_times()
            backend = "(" in cmdline or "[local]" in cmdline
            if backend and f" {database} " not in cmdline:
                continue
            total += times.user + times.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


class Primary:
    """Write transactions and server CPU during a block (PostgreSQL only)."""

    def __init__(self) -> None:
        self.postgres = connection.vendor == "postgresql"
        self.database = connection.settings_dict["NAME"]

    def __enter__(self) -> Primary:
        if self.postgres:
            self.xid, self.cpu = _xid(), _server_cpu_s(self.database)
        return self

    def __exit__(self, *exc) -> None:
        if self.postgres:
            self.write_transactions = _xid() - self.xid
            self.cpu_s = _server_cpu_s(self.database) - self.cpu

    def per(self, units: int) -> dict[str, float] | None:
        """Write transactions and server CPU ms per unit of work (None off PostgreSQL)."""
        if not self.postgres:
            return None
        return {
            "write_transactions": self.write_transactions / units,
            "server_cpu_ms": self.cpu_s * 1000 / units,
        }
