"""kombu's ``filesystem://`` transport, with atomic messages, driven by a worker's event loop.

kombu's own transport creates a message file in the queue folder and then writes it, while
a consumer may move and read the file in between: it reads an empty message, and the
worker stops with "Unrecoverable error: JSONDecodeError". It also moves claimed files to
the system temporary folder, which may be another filesystem (a copy, not a claim).

Here a message is written under a hidden name and renamed into the queue (readers never
see it half-written), and a consumer claims a message by renaming it into the processed
folder, which must be on the same filesystem (one consumer wins the rename). An exchange's
table of bindings is read and written under its lock, never truncated by a second binder.

kombu's transport is also synchronous, so a Celery worker on it runs its blocking loop,
whose prefork pool shares one in-queue pipe and one lock among its children: an idle child
waits for work holding the lock, and a child killed then leaves the others blocked on it
for good; the worker consumes nothing more (billiard#104, celery#2011). This transport is
asynchronous: the worker runs its event loop, whose pool (``AsynPool``) gives each child
its own pipes, as on Redis or RabbitMQ. On Linux the loop is woken when a message is renamed
into the queue folder (inotify), and looks again whenever a message is settled, since a
prefetch slot is then free; without inotify it looks every ``polling_interval``. A
connection used outside a worker (producers, ``celery inspect``) drains synchronously and
looks every ``polling_interval``.

Use it for the embedded default (``options`` lays out the folders under one directory and
creates them); every process that sends or consumes must use it::

    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "durableflow.transport:FilesystemTransport"
    CELERY_BROKER_TRANSPORT_OPTIONS = durableflow.transport.options(BASE_DIR / "broker")
"""

from __future__ import annotations

import ctypes
import os
import uuid
from queue import Empty
from time import monotonic

from kombu.transport import filesystem, virtual
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

from durableflow.engine import logs

__all__ = ["FilesystemTransport", "options"]

logger = logs.logger(__name__)

# With the queue folder watched, a worker still looks this often: a message the watch does
# not report (a file written in place by another transport) waits at most this long.
WATCHED_LOOK_SECONDS = 1.0


def options(folder: str | os.PathLike, *, polling_interval: float = 0.01) -> dict:
    """Transport options for a broker kept in ``folder`` (created if missing).

    Producers and consumers share one queue folder; a consumer claims a message by renaming
    it into ``processed`` (same filesystem, so the rename is atomic) and then deletes it.
    ``polling_interval`` is how long a consumer that is not woken waits before looking
    again (a worker where inotify is missing, a client waiting for ``celery inspect``
    replies): it bounds such a wake-up's latency.
    """
    _check_interval(polling_interval)
    folders = {name: os.path.join(os.fspath(folder), name) for name in ("queue", "processed", "control")}
    for path in folders.values():
        os.makedirs(path, exist_ok=True)
    return {
        "data_folder_in": folders["queue"],
        "data_folder_out": folders["queue"],
        "processed_folder": folders["processed"],
        "control_folder": folders["control"],
        "store_processed": False,
        "polling_interval": polling_interval,
    }


def _check_interval(seconds) -> None:
    # An event loop looking every 0 seconds spins; kombu's "None: never sleep" likewise.
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"polling_interval must be a number of seconds above 0, got {seconds!r}")


class QoS(virtual.QoS):
    """Asks the transport to look for messages whenever one is settled: a slot is free."""

    def ack(self, delivery_tag):
        super().ack(delivery_tag)
        self._slot_freed()

    def reject(self, delivery_tag, requeue=False):
        super().reject(delivery_tag, requeue=requeue)
        self._slot_freed()

    def _slot_freed(self) -> None:
        transport = self.channel.connection
        if transport is not None:  # None once the channel is closed
            transport.look_soon()


class Channel(filesystem.Channel):
    QoS = QoS

    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        tag = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        self.connection.look_soon()
        return tag

    def basic_qos(self, prefetch_size=0, prefetch_count=0, apply_global=False):
        super().basic_qos(prefetch_size, prefetch_count, apply_global)
        self.connection.look_soon()

    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        # A leading dot: consumers skip it (its part after the first dot is not "<queue>.msg").
        hidden = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(hidden, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(hidden, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot add message {name!r} to {self.data_folder_out!r}") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        # kombu's creates the exchange's table file empty ("wb": truncating what another process
        # just wrote) and locks it only after opening, so a process binding at the same moment
        # reads it empty (JSONDecodeError) or loses the other's binding. Here the file is opened
        # without truncating, locked, then read (empty: no binding yet) and rewritten whole.
        file = self._table_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot open {file}") from exc
        with os.fdopen(fd, "rb+", buffering=0) as f:
            filesystem.lock(f, filesystem.LOCK_EX)
            try:
                text = bytes_to_str(f.read())
                bindings = [filesystem.exchange_queue_t(*b) for b in loads(text)] if text.strip() else []
                if binding not in bindings:
                    bindings.insert(0, binding)
                    f.seek(0)
                    f.truncate()
                    f.write(str_to_bytes(dumps(bindings)))
            finally:
                filesystem.unlock(f)

    def _table_file(self, exchange: str):
        """Where kombu keeps the exchange's table (``""``, the default exchange, included); a name
        that would leave the control folder or name a directory is refused, as kombu refuses it."""
        file = self.control_folder / f"{exchange}.exchange"
        if (
            not isinstance(exchange, str)
            or os.sep in exchange
            or file.parent != self.control_folder
            or (exchange and not exchange.strip("."))
        ):
            raise filesystem.ChannelError(f"Invalid exchange name: {exchange!r}")
        return file

    def get_table(self, exchange):
        # A table file created by a binding that has not written it yet is an empty table.
        file = self._table_file(exchange)
        try:
            with file.open("r") as f:
                filesystem.lock(f, filesystem.LOCK_SH)
                try:
                    text = bytes_to_str(f.read())
                finally:
                    filesystem.unlock(f)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot open {file}") from exc
        return [filesystem.exchange_queue_t(*b) for b in loads(text)] if text.strip() else []

    def _get(self, queue):
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(self.processed_folder, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except FileNotFoundError:
                continue  # another consumer took it
            try:
                with open(claimed, "rb") as f:
                    payload = f.read()
            finally:
                if not self.store_processed:
                    os.remove(claimed)
            return loads(bytes_to_str(payload))
        raise Empty()


class FilesystemTransport(filesystem.Transport):
    """The transport; a worker's event loop drives it (see the module's docstring).

    The loop hands out messages from its callbacks (the watch's, the wake pipe's and a
    timer), never from a tick: the prefork pool registers a job's write on each tick, so a
    message handed out after the pool's tick would wait for the next poll to end. Concurrency:
    only the loop's thread hands out messages; ``look_soon`` may also be called from another
    thread (kombu allows acknowledgements from any thread): it only writes to the wake pipe.
    """

    Channel = Channel
    implements = filesystem.Transport.implements.extend(asynchronous=True)

    def __init__(self, client, **kwargs):
        super().__init__(client, **kwargs)
        _check_interval(self.polling_interval)
        self._watch = None  # the queue folder's inotify descriptor, when there is one
        self._wake = None  # (read end, write end) of the pipe that wakes the loop for a look
        self._wake_pending = False
        self._timed_look = None
        self._loop = None

    def register_with_event_loop(self, connection, loop):
        self.unregister_from_event_loop(connection, loop)  # a reconnect registers again
        self._loop = loop
        self._wake = os.pipe()
        for end in self._wake:
            os.set_blocking(end, False)
        loop.add_reader(self._wake[0], self._on_wake)
        self._watch = _watch(self.client.transport_options.get("data_folder_in", "data_in"))
        if self._watch is not None:
            loop.add_reader(self._watch, self._on_folder_changed)
        interval = WATCHED_LOOK_SECONDS if self._watch is not None else self.polling_interval
        self._timed_look = loop.call_repeatedly(interval, self._deliver_ready)
        self.look_soon()  # messages that were there before

    def unregister_from_event_loop(self, connection, loop):
        if self._timed_look is not None:
            self._timed_look.cancel()
            self._timed_look = None
        if self._watch is not None:
            loop.remove_reader(self._watch)
            os.close(self._watch)
            self._watch = None
        if self._wake is not None:
            loop.remove_reader(self._wake[0])
            for end in self._wake:
                os.close(end)
            self._wake = None
        self._loop = None

    def close_connection(self, connection):
        if self._loop is not None:
            self.unregister_from_event_loop(connection, self._loop)
        super().close_connection(connection)

    def look_soon(self) -> None:
        """Wake the worker's loop for a look (nothing happens outside a worker's loop)."""
        wake = self._wake
        if wake is None or self._wake_pending:
            return
        self._wake_pending = True
        try:
            os.write(wake[1], b"\0")
        except (BlockingIOError, OSError):
            pass  # full: a wake is pending anyway; closed: the loop is gone

    def _on_wake(self) -> None:
        # Drain, then clear, then look: a look asked for before the flag is clear is covered
        # by this one; clearing first could drain a byte written after it and leave the flag
        # set with nothing to read, for good.
        _drain(self._wake[0])
        self._wake_pending = False
        self._deliver_ready()

    def _on_folder_changed(self) -> None:
        _drain(self._watch)  # the events say only that something was renamed in
        self._deliver_ready()

    def _deliver_ready(self) -> None:
        """Hand every message that is there and that the channels' QoS allows to its consumer.

        The QoS bounds a look to the free prefetch slots (a Celery worker sets them); a worker
        without a prefetch limit takes every message there is, as it asked.
        """
        while True:
            try:
                self.drain_events(self, timeout=0)  # one message, or TimeoutError at once
            except TimeoutError:
                return


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except BlockingIOError:
        pass


# inotify(7), through the C library: the standard library has no binding. Only renames into
# the folder are watched: every message of this transport enters the queue so.
_IN_MOVED_TO = 0x00000080


def _watch(folder: str) -> int | None:
    """A non-blocking inotify descriptor that becomes readable when a file is renamed into
    ``folder``; ``None`` where inotify is missing or refused (the loop then polls)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        init, add_watch = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None  # not Linux
    add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        logger.warning("cannot watch the queue folder: %s; looking every polling_interval", _errno_text())
        return None
    if add_watch(fd, os.fsencode(folder), _IN_MOVED_TO) < 0:
        reason = _errno_text()
        os.close(fd)
        logger.warning("cannot watch the queue folder %s: %s; looking every polling_interval", folder, reason)
        return None
    return fd


def _errno_text() -> str:
    number = ctypes.get_errno()
    return f"{os.strerror(number)} (errno {number})"
