"""structlog set-up: JSON lines in a cluster (stdout is not a terminal), readable output on a tty.

Every log call site uses ``structlog.get_logger(__name__)`` and key-value events; this module
only decides how they are rendered. Secrets never reach a log line: events carry names and
counts, and :func:`redact` scrubs bearer tokens and URL passwords from any text that might echo
a request. Each subcommand starts with :func:`start_logging`, which logs the version and the
effective configuration (every flag's value after defaults and environment), secrets redacted,
so a log shows what ran without a look at the manifest that started it.
"""

from __future__ import annotations

import argparse
import logging
import platform
import re
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO, cast

import structlog

from . import __version__

_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/@:\s]*:)[^/@\s]+@")
# Flags whose value itself is a secret (none today holds one: credentials come from files
# whose paths are logged, never their content); kept so a future --token cannot leak.
_SECRET_NAME = re.compile(r"(?i)(token|password|passwd|secret|passphrase|credential)(?!.*(file|path)$)")
REDACTED = "<redacted>"


def redact(text: str) -> str:
    """Replace bearer tokens and URL passwords in free text (error messages that quote a request,
    a flag such as ``--prometheus https://user:pass@host``) with ``<redacted>``."""
    return _URL_PASSWORD.sub(rf"\1{REDACTED}@", _BEARER.sub(rf"\1{REDACTED}", text))


def effective_config(args: argparse.Namespace) -> dict[str, Any]:
    """Every flag's value (argparse's names), secrets redacted; the subcommand's name and internal
    entries (``_module``) left out."""
    def clean(name: str, value: Any) -> Any:
        if _SECRET_NAME.search(name) and value:
            return REDACTED
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, (list, tuple)):
            return [clean(name, v) for v in value]
        return value if value is None or isinstance(value, (bool, int, float)) else redact(str(value))

    return {k: clean(k, v) for k, v in sorted(vars(args).items()) if not k.startswith("_") and k != "command"}


def start_logging(command: str, args: argparse.Namespace, level: str) -> None:
    """Configure logging at ``level``, then log what is starting: version, Python, the flags."""
    setup_logging(level)
    structlog.get_logger(__name__).info("gangscope_starting", command=command, version=__version__,
                                        python=platform.python_version(), config=effective_config(args))


class _Stderr:
    """Resolves ``sys.stderr`` at each write, so a logger configured before stderr was swapped
    (by a test harness or a daemon manager) never writes to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def setup_logging(level: str = "info", stream: TextIO | None = None) -> None:
    stream = stream or cast(TextIO, _Stderr())  # it has the three methods a logger calls
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


class Repeats:
    """Rate-limits identical events: the first of a kind is logged, the same one again within
    ``interval`` seconds only counted, and the next one after it logged with ``repeated`` (how
    many were held back since). A source retrying against a broken API server (22 sources, each
    backing off) then says what is wrong once, and how often, instead of a line per retry."""

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self.clock = interval, clock
        self._seen: dict[tuple[Any, ...], tuple[float, int]] = {}

    def should_log(self, key: tuple[Any, ...]) -> int | None:
        """None to hold this one back; else how many identical ones were held back before it."""
        now = self.clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.interval:
            self._seen[key] = (last[0], last[1] + 1)
            return None
        self._seen[key] = (now, 0)
        return last[1] if last is not None else 0

    def log(self, logger: Any, level: str, event: str, key: tuple[Any, ...], **fields: Any) -> None:
        held = self.should_log((event, *key))
        if held is None:
            return
        if held:
            fields["repeated"] = held
        getattr(logger, level)(event, **fields)

    def forget(self, *key: Any) -> None:
        """A success: the next failure of this kind is news again."""
        for k in [k for k in self._seen if k[1:1 + len(key)] == key]:
            del self._seen[k]
