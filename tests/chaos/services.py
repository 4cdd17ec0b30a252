"""The chaos suite's own PostgreSQL, Redis and RabbitMQ servers: child processes on free local ports.

The scenarios kill and restart these servers, so they are never the machine's shared ones:
each is started here, in a temporary folder, and stopped here (by its own process id), whatever
happened. PostgreSQL refuses to run as root: as root, the cluster is owned by and run as the
``postgres`` user (``runuser``). RabbitMQ runs as a node of its own (its own name, ports,
``epmd``, configuration, data and Erlang cookie), never as a second user of the machine's node.
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

    def start(self, empty: bool = True) -> None:
        if not empty:
            raise ValueError("this Redis keeps nothing (no persistence): it can only start empty")
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


class PrivateRabbitMQ:
    """A RabbitMQ node of its own: ``rabbitmq-server`` in the foreground, with its own ``epmd``.

    Nothing of the machine's node is read or shared: not its configuration
    (``/etc/rabbitmq``: its listener is the shared port), its plugins, its ``epmd`` (port
    4369), its data or its cookie. The node boots in about 4 s here. ``kill`` is what a crash
    does (SIGKILL, no shutdown); ``start(empty=True)`` starts it again on a fresh data folder,
    every queue and message gone, as a node replaced after losing its disk.
    """

    def __init__(self, port: int, log_dir: Path):
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="durableflow-chaos-rabbitmq-"))
        self.log_path = log_dir / "rabbitmq.log"
        self.dist_port, self.epmd_port = free_port(), free_port()
        self.node = f"durableflow-chaos-{port}@localhost"
        self.popen: subprocess.Popen | None = None
        self.epmd: subprocess.Popen | None = None
        (self.root / "rabbitmq.conf").write_text(f"listeners.tcp.1 = 127.0.0.1:{port}\n")
        (self.root / "rabbitmq-env.conf").write_text("")
        (self.root / "enabled_plugins").write_text("[].\n")

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        return {
            **env,
            "HOME": str(self.root),  # the Erlang cookie
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.root / "log"),
            "RABBITMQ_CONF_ENV_FILE": str(self.root / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(self.root / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "enabled_plugins"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    @staticmethod
    def _server() -> str:
        # Debian's /usr/sbin/rabbitmq-server switches to the rabbitmq user and resets the environment.
        direct = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
        found = str(direct) if direct.exists() else shutil.which("rabbitmq-server")
        if not found:
            raise RuntimeError("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
        return found

    def start(self, empty: bool = False) -> None:
        for port in (self.port, self.dist_port) if self.epmd else (self.port, self.dist_port, self.epmd_port):
            if port_in_use(port):
                raise RuntimeError(f"port {port} is taken: the chaos suite starts its own RabbitMQ there")
        if self.epmd is None:
            self.epmd = subprocess.Popen(
                ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            _wait(lambda: port_in_use(self.epmd_port), 20, f"epmd on port {self.epmd_port}")
        if empty:
            shutil.rmtree(self.root / "mnesia", ignore_errors=True)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [self._server()], env=self._env(), cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        _wait(lambda: port_in_use(self.port) or self.popen.poll() is not None, 60, f"rabbitmq on port {self.port}")
        if self.popen.poll() is not None:
            raise RuntimeError(f"rabbitmq-server exited ({self.popen.returncode}): see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL the node's process group (the script, the Erlang VM and its helpers)."""
        if self.popen is not None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout=20)
            _wait(lambda: not port_in_use(self.port), 20, f"rabbitmq's port {self.port} to close")
        self.popen = None

    def stop(self) -> None:
        self.kill()
        if self.epmd is not None:
            self.epmd.kill()
            self.epmd.wait(timeout=20)
            self.epmd = None
        shutil.rmtree(self.root, ignore_errors=True)
