"""The error of an ordinary mistake: one line for the user, not a traceback.

A malformed flag, a port another process holds or an API server that refuses connections is the
user's or the machine's problem, not the program's: the command says what is wrong in one line
(``gangscope collector: cannot listen on 0.0.0.0:9400: Address already in use``) and exits
non-zero. A traceback is kept for the program's own bugs, where it is what a report needs.
"""

from __future__ import annotations


class CommandError(Exception):
    """Raised anywhere under a subcommand's ``run``; :func:`exporter.cli.main` prints
    ``gangscope <command>: <message>`` on stderr and exits with ``status`` (2: a usage or
    configuration error, 1: the environment refused, e.g. a port in use)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status
