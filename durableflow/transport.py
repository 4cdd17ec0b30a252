"""kombu's ``filesystem://`` transport, with messages that appear and are claimed atomically.

kombu's own transport creates a message file in the queue folder and then writes it, while
a consumer may move and read the file in between: it reads an empty message, and the
worker stops with "Unrecoverable error: JSONDecodeError". It also moves claimed files to
the system temporary folder, which may be another filesystem (a copy, not a claim).

Here a message is written under a hidden name and renamed into the queue (readers never
see it half-written), and a consumer claims a message by renaming it into the processed
folder, which must be on the same filesystem (one consumer wins the rename). Use it for the
embedded default (``options`` lays out the folders under one directory and creates them)::

    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "durableflow.transport:FilesystemTransport"
    CELERY_BROKER_TRANSPORT_OPTIONS = durableflow.transport.options(BASE_DIR / "broker")
"""

from __future__ import annotations

import os
import uuid
from queue import Empty
from time import monotonic

from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

__all__ = ["FilesystemTransport", "options"]


def options(folder: str | os.PathLike, *, polling_interval: float = 0.01) -> dict:
    """Transport options for a broker kept in ``folder`` (created if missing).

    Producers and consumers share one queue folder; a consumer claims a message by renaming
    it into ``processed`` (same filesystem, so the rename is atomic) and then deletes it.
    ``polling_interval`` is how long an idle consumer waits before looking again: it bounds
    a wake-up's latency.
    """
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


class Channel(filesystem.Channel):
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
    Channel = Channel
