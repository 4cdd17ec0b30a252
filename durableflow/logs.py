"""JSON lines for durableflow's logs: ``JsonFormatter``, for the ``LOGGING`` setting.

Every record of a ``durableflow.*`` logger carries ``execution_id``, ``workflow`` and
``step_key`` as attributes (None where they do not apply: see ``durableflow.engine.logs``);
this formatter writes them, with the time, level, logger and message, as one JSON object per
line. Records of other loggers get the same keys (None), so one handler can serve both::

    LOGGING = {
        "version": 1,
        "formatters": {"json": {"()": "durableflow.logs.JsonFormatter"}},
        "handlers": {"json": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {"durableflow": {"handlers": ["json"], "level": "INFO", "propagate": False}},
    }
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

from durableflow.engine.logs import FIELDS

__all__ = ["JsonFormatter"]


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``,
    ``execution_id``, ``workflow``, ``step_key``, and ``exception`` (the traceback) if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            line[name] = getattr(record, name, None)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)
