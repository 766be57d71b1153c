"""Waiting in tests: polling a real server or process (sync or async checks), a call that returns
when the test says, and cancelling a task at each loop iteration after the thread it waits on returned."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
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


def gate(obj: Any, method: str) -> threading.Event:
    """Make ``obj.<method>`` wait on its calling thread until the returned event is set (at most
    10 s): a driver call that returns when the test says."""
    opened = threading.Event()
    call = getattr(obj, method)

    def gated(*args: Any, **kwargs: Any) -> Any:
        opened.wait(10)
        return call(*args, **kwargs)

    setattr(obj, method, gated)
    return opened


async def cancels_are_kept(start: Callable[[], tuple[Awaitable[Any], Callable[[], None], Callable[[], None]]],
                           iterations: int = 6) -> None:
    """A cancellation the task accepted ends it, whichever loop iteration after its thread's return it
    lands in. ``start()`` gives the awaitable that waits on a thread, the function that lets that
    thread's call return, and a clean-up. For each offset the loop is held while the call returns
    (its answer is queued), then the task is cancelled that many iterations later. Python 3.11's
    ``asyncio.wait_for`` drops a cancellation that lands in the iteration its answer arrives in
    (python/cpython#86296)."""
    loop = asyncio.get_running_loop()
    for offset in range(iterations):
        run, release, clean_up = start()
        task = asyncio.ensure_future(run)
        accepted: asyncio.Future[bool] = loop.create_future()  # what task.cancel() answered

        def hop(left: int) -> None:
            if left:
                loop.call_soon(hop, left - 1)
            else:
                accepted.set_result(task.cancel())

        try:
            await asyncio.sleep(0.05)  # the task waits on its thread's call
            release()
            time.sleep(0.3)  # the loop held: the call returns and hands its answer to the loop
            loop.call_soon(hop, offset)
            await asyncio.wait({task, accepted}, timeout=5)
            assert accepted.done() and task.done(), f"offset {offset}: the task did not end"
            assert task.cancelled() or not accepted.result(), f"offset {offset}: an accepted cancellation was dropped"
        finally:
            if not task.done():
                task.cancel()
            clean_up()
