"""The chaos suite's own Redis and PostgreSQL servers: child processes on free local ports.

The scenarios kill and restart these servers, so they are never the machine's shared ones:
each is started here, in a temporary folder, and stopped here (by its own process id), whatever
happened. PostgreSQL refuses to run as root: as root, the cluster is owned by and run as the
``postgres`` user (``runuser``).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class PrivateRedis:
    """``redis-server`` without persistence: a restart starts it empty."""

    def __init__(self, port: int, log_dir: Path):
        self.port = port
        self.log_path = log_dir / "redis.log"
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        if port_in_use(self.port):
            raise RuntimeError(f"port {self.port} is taken: the chaos suite starts its own Redis there")
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        _wait(lambda: port_in_use(self.port), 20, f"redis on port {self.port}")

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=20)
        self.popen = None

    stop = kill


class PrivatePostgres:
    """A throw-away PostgreSQL cluster (``initdb``), commit timestamps on."""

    def __init__(self, port: int, log_dir: Path):
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="durableflow-chaos-pg-"))
        self.data = self.root / "data"
        self.log_path = self.root / "postgres.log"  # the server's user must be able to write it
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))[-1]).parent
        self.started = False

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stdout}{done.stderr}")
        return done

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c track_commit_timestamp=on "
            "-c max_connections=200 -c fsync=on"
        )

    def start(self) -> None:
        if port_in_use(self.port):
            raise RuntimeError(f"port {self.port} is taken: the chaos suite starts its own PostgreSQL there")
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self._ctl("start")
        self.started = True

    def _ctl(self, action: str, *extra: str) -> None:
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", self._options(), "-l", str(self.log_path), "-w",
            "-t", "60", *extra, action,
        )  # fmt: skip

    def restart_immediate(self) -> None:
        """What a crash does: no checkpoint, every backend gone; recovery replays the WAL."""
        self._ctl("restart", "-m", "immediate")

    def stop(self, keep_log: Path | None = None) -> None:
        if self.started:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
            self.started = False
        if keep_log is not None and self.log_path.exists():
            shutil.copy(self.log_path, keep_log / "postgres.log")
        shutil.rmtree(self.root, ignore_errors=True)
