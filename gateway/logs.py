"""Structured JSON logs. Only ids, sizes, timings and error types are ever logged.

Each line has ``ts`` (RFC 3339, UTC, milliseconds), and inside a traced span its W3C
``trace_id`` and ``span_id``, so a log line leads to its trace and back."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson
from opentelemetry import trace

__all__ = ["configure_logging"]

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


def rfc3339(created: float) -> str:
    """``2026-12-06T19:30:05.123Z``: UTC, millisecond precision."""
    whole = int(created)
    millis = int((created - whole) * 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(whole))}.{millis:03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            out["trace_id"] = format(context.trace_id, "032x")
            out["span_id"] = format(context.span_id, "016x")
        for key, value in record.__dict__.items():
            if key not in _STANDARD:
                out[key] = value
        return orjson.dumps(out, default=str).decode()


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("uvicorn.access").disabled = True
    # two lines per scheduled run (maintenance reclaims every 2 s or less): warnings only;
    # and a run skipped because the last one still runs (a busy host) is by design, not news
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
