"""Polling for tests that wait on a real server or process: one helper, sync or async checks."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def eventually(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02) -> None:
    """Wait until ``check()`` (a function or a coroutine function) is truthy; fail after ``timeout`` s
    (generous by default: it returns as soon as the check holds, and a loaded CI machine only takes longer)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)
