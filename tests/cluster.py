"""Real Celery worker and beat processes for integration tests.

Each process runs in its own process group, so that a test can SIGKILL a whole worker
(master and pool children) and the suite can stop everything it started, even on failure.
"""

from __future__ import annotations

import atexit
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil

ROOT = Path(__file__).resolve().parent.parent
_counter = itertools.count(1)


def wait_for(predicate: Callable[[], object], *, timeout: float = 60, interval: float = 0.1, what: str = ""):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


class Process:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, *, cwd: Path = ROOT):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def count_in_log(self, text: str) -> int:
        return self.log().count(text)

    def children(self) -> list[int]:
        try:
            return [child.pid for child in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the worker and its pool children)."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            self.popen.wait(timeout=30)
            self._reap_group()

    def stop(self) -> None:
        if self.alive():
            self.kill(signal.SIGCONT)
            self.kill(signal.SIGKILL)
        self._reap_group()
        self._log.close()

    def _reap_group(self) -> None:
        # Pool children can outlive a killed master for a moment; make sure none is left.
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.pid) == self.pid:
                    proc.kill()
            except (ProcessLookupError, psutil.Error):
                continue


class Cluster:
    """Starts workers and beat against the test database and broker; stops them all."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.processes: list[Process] = []
        atexit.register(self.stop_all)

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Process:
        argv = [sys.executable, "-m", "celery", "-A", "project", *args]
        process = Process(f"{name}-{next(_counter)}", argv, {**self.env, **(env or {})}, self.log_dir)
        self.processes.append(process)
        return process

    def worker(
        self,
        queues: str = "durableflow",
        *,
        concurrency: int = 1,
        loglevel: str = "info",
        ready: str = " ready.",
        env: dict[str, str] | None = None,
    ) -> Process:
        """A worker on ``queues``; ``env``: variables set for it on top of the cluster's."""
        name = f"w{next(_counter)}"
        process = self._spawn(
            name,
            [
                "worker",
                "-Q",
                queues,
                "-c",
                str(concurrency),
                "--pool",
                "prefork",
                "-n",
                # The test process's pid too: a nested session's workers (tests/live/test_routing.py)
                # must not share a node name, whose control queue RabbitMQ holds exclusively.
                f"{name}-{os.getpid()}@%h",
                "-l",
                loglevel,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            env,
        )
        # ``ready``: a line the worker prints once it consumes (Celery's own is logged at INFO).
        try:
            wait_for(
                lambda: ready in process.log() or not process.alive(),
                timeout=60,
                what=f"worker {process.name} to start",
            )
            if not process.alive():
                raise RuntimeError(f"worker {process.name} died at start:\n{process.log()}")
        except BaseException:
            self.stop(process)  # the caller never gets it, so it could not stop it
            raise
        return process

    def beat(self, loglevel: str = "info") -> Process:
        return self._spawn(
            "beat",
            [
                "beat",
                "-S",
                "django_celery_beat.schedulers:DatabaseScheduler",
                "--max-interval",
                "1",
                "--pidfile=",
                "-l",
                loglevel,
            ],
        )

    def stop(self, process: Process) -> None:
        process.stop()
        if process in self.processes:
            self.processes.remove(process)

    def stop_all(self) -> None:
        while self.processes:
            self.stop(self.processes[-1])
