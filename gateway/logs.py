"""Structured JSON logs. Only ids, sizes, timings and error types are ever logged.

Each line has ``ts`` (RFC 3339, UTC, milliseconds), and inside a traced span its W3C
``trace_id`` and ``span_id``, so a log line leads to its trace and back.

The HTTP client libraries log each request's whole URL (``httpx``/``httpx2`` at INFO) and
its headers (``httpcore``/``httpcore2`` at DEBUG); the SDKs on top of them (``openai``,
``a2a``) their URLs, headers and bodies. They are held at WARNING whatever the level, and
any http(s) URL in any line is cut to its scheme and host: no line carries an outbound URL's path
or query, or a header's value.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any

import orjson
from opentelemetry import trace

__all__ = ["QUIETED", "configure_logging", "redact_urls"]

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}
# The loggers of the outbound HTTP stack: WARNING and above only.
QUIETED = ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "a2a", "hpack", "h2")
# an HTTP(S) or WebSocket URL's scheme://host[:port], then whatever follows up to a space
# or a quote (other URLs, Redis's, are the operator's and shown with their secret masked)
_URL = re.compile(r"(\b(?:https?|wss?)://[^/\s?#\"'<>\\]+)[^\s\"'<>\\]*", re.IGNORECASE)


def redact_urls(text: str) -> str:
    """``text`` with every http(s) URL cut to its scheme and host (user info dropped)."""
    return _URL.sub(lambda m: re.sub(r"//[^/@]*@", "//", m.group(1)), text)


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
        # the whole line: the event, and any value however deep (a URL ends at a quote)
        return redact_urls(orjson.dumps(out, default=str).decode())


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("uvicorn.access").disabled = True
    for name in QUIETED:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    # two lines per scheduled run (maintenance reclaims every 2 s or less): warnings only;
    # and a run skipped because the last one still runs (a busy host) is by design, not news
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
