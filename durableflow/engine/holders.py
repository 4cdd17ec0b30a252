"""Who holds a lease, and whether that holder is gone: a crashed delivery is taken over at once.

A claim records its holder with the lease: the machine (its host name, its boot and its process
namespace), the process id, and the process's start time, which tells a process from a later
one that was given the same id. A delivery that finds the lease held (or the sweep, looking at
its own machine's leases) asks ``Holders.gone``:

- a holder on another machine, another boot or in another process namespace cannot be seen
  from here: its lease is waited out, as before (it may be alive and working);
- a holder on this machine whose process no longer exists (a SIGKILLed pool child, an OOM kill),
  or whose process id now belongs to another process, is gone: the lease is taken over at once;
- a holder that is this very process is gone once none of its deliveries holds that lease any
  more (one that gave up after a database failure, or whose claim committed unseen); a delivery
  of it still running (another thread) keeps it.

Only Linux tells these things apart (``/proc``); elsewhere no holder is recorded and every
lease is waited out.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from typing import Callable

__all__ = ["Holder", "Holders", "this_process", "probe", "hold", "release", "running", "local"]

_HOST_CHARS = 120  # of the host name kept in a holder (the column holds 255)


@dataclass(frozen=True)
class Holder:
    """One process on one machine: ``host`` (name/boot/pid namespace), ``pid``, its ``started`` time."""

    host: str
    pid: int
    started: str

    @property
    def text(self) -> str:
        """As the lease records it: ``"<host> <pid> <started>"``."""
        return f"{self.host} {self.pid} {self.started}"

    @classmethod
    def parse(cls, text: str | None) -> Holder | None:
        try:
            host, pid, started = (text or "").rsplit(" ", 2)
            return cls(host, int(pid), started)
        except ValueError:
            return None


def _start_time(pid: int | str) -> str | None:
    """The start time (clock ticks since boot) of live process ``pid``; None if there is none
    (or it is a zombie: killed, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (command) ": state, ppid, ...
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]  # starttime, field 22 of proc(5)


def probe(pid: int) -> str | None:
    """The start time of the live process ``pid`` on this machine, or None."""
    return _start_time(pid)


_this: dict[int, Holder | None] = {}


def this_process() -> Holder | None:
    """This process as a lease holder (None where that cannot be told: not Linux)."""
    pid = os.getpid()
    if pid not in _this:
        try:
            with open("/proc/sys/kernel/random/boot_id") as boot:
                boot_id = boot.read().strip()
            namespace = os.stat("/proc/self/ns/pid").st_ino
        except OSError:
            _this[pid] = None
        else:
            started = _start_time("self")
            host = f"{socket.gethostname()[:_HOST_CHARS]}/{boot_id}/{namespace}"
            _this[pid] = None if started is None else Holder(host, pid, started)
    return _this[pid]


# The leases this process's deliveries hold now, by token.
_running: set[str] = set()
_lock = threading.Lock()


def hold(token: str) -> None:
    """A delivery of this process holds the lease ``token`` (from its claim)."""
    with _lock:
        _running.add(token)


def release(token: str) -> None:
    """The delivery holding ``token`` is over, whatever happened."""
    with _lock:
        _running.discard(token)


def running(token: str) -> bool:
    """Whether a delivery of this process still holds ``token``."""
    with _lock:
        return token in _running


def _forget_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a child forked while another thread held it would inherit it held
    _running.clear()  # the parent's deliveries are not the child's


os.register_at_fork(after_in_child=_forget_in_child)


class Holders:
    """Judges lease holders from this process: ``me`` (None: record none, wait out every lease)
    and ``probe(pid)``, the start time of a live process on this machine (a seam for tests)."""

    def __init__(self, me: Holder | None, probe: Callable[[int], str | None] = probe) -> None:
        self.me = me
        self.probe = probe

    @property
    def host(self) -> str | None:
        return None if self.me is None else self.me.host

    @property
    def text(self) -> str | None:
        """What a claim records as its holder."""
        return None if self.me is None else self.me.text

    def gone(self, holder: str | None, token: str) -> bool:
        """Whether the holder of lease ``token`` is known to be gone (see the module docstring)."""
        found = Holder.parse(holder)
        if self.me is None or found is None or found.host != self.me.host:
            return False  # another machine (or nothing recorded): wait out its lease
        if (found.pid, found.started) == (self.me.pid, self.me.started):
            return not running(token)
        return self.probe(found.pid) != found.started


def local() -> Holders:
    """Holders judged from this process, as it is now (after a fork: the child)."""
    return Holders(this_process())
