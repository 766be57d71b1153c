"""structlog set-up: JSON lines in a cluster (stdout is not a terminal), readable output on a tty.

Every log call site uses ``structlog.get_logger(__name__)`` and key-value events; this module
only decides how they are rendered. Secrets never reach a log line: events carry names and
counts, and :func:`redact` scrubs bearer tokens from any text that might echo a request.
"""

from __future__ import annotations

import logging
import re
import sys

import structlog

_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")


def redact(text: str) -> str:
    """Replace bearer tokens in free text (error messages that quote a request) with ``<redacted>``."""
    return _BEARER.sub(r"\1<redacted>", text)


class _Stderr:
    """Resolves ``sys.stderr`` at each write, so a logger configured before stderr was swapped
    (by a test harness or a daemon manager) never writes to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def setup_logging(level: str = "info", stream=None) -> None:
    stream = stream or _Stderr()
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    processors: list = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    if stream.isatty():
        processors.append(structlog.dev.ConsoleRenderer())
    else:
        processors.append(structlog.processors.JSONRenderer())
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
