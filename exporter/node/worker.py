"""One thread per GPU: every NVML call for that GPU runs there, and nowhere else.

A driver call can block for seconds, or forever on a GPU that fell off the bus. With a shared
pool, a wedged GPU holds a worker that its neighbours queue behind, and a deadline per round
reports them down with it. Here each GPU owns its thread, so a hung GPU costs exactly one thread
and one ``gangscope_gpu_up 0``. The thread records when its current NVML call started
(:attr:`GpuWorker.busy_since`, stamped by :class:`TimedLibrary`), so the event loop bounds each
call from its own start, not from when a round or a job began.

The same class runs the node's one periodic thread, the fast PCIe counter reads (see
:class:`exporter.node.nvml.NvmlSampler`): a thread per GPU woken 20 times a second cost more
than the reads themselves (bench/agent.py), so one thread reads every GPU at each tick.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


_WORKERS: dict[int, GpuWorker] = {}  # thread ident -> its worker


def stamp_busy() -> None:
    """A driver call starts on this thread: the deadline of the worker running it counts from now."""
    worker = _WORKERS.get(threading.get_ident())
    if worker is not None:
        worker.busy_since = time.monotonic()


class TimedLibrary:
    """The NVML library seen through the GPU workers: each call stamps :attr:`GpuWorker.busy_since`
    of the worker it runs on, so a deadline counts from the start of the call in progress."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._lib, name)
        if not (callable(attr) and name.startswith("nvml")):
            return attr

        def call(*args: Any) -> Any:
            stamp_busy()
            return attr(*args)

        self.__dict__[name] = call  # later lookups skip __getattr__
        return call


class GpuWorker:
    """A daemon thread that runs submitted jobs and, if given a ``tick``, runs it every ``period()``
    seconds while idle. It waits on a :class:`queue.SimpleQueue` (implemented in C), or, while it
    ticks, sleeps to the next tick (jobs, :meth:`wake` and :meth:`close` then wait for it)."""

    def __init__(self, name: str, tick: Callable[[], None] | None = None,
                 period: Callable[[], float | None] = lambda: None) -> None:
        self._tick = tick or (lambda: None)
        self._idle = 1.0 if tick else None  # without a period yet, look again after this long
        self._period = period
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self.busy_since: float | None = None  # time.monotonic() when the call in progress started
        self.ticks = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Run ``fn(*args)`` on this GPU's thread; the caller submits again only once it is done."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((fn, args, fut))
        return fut

    def wake(self) -> None:
        """Look at ``period()`` again now (it changed: a GPU was probed)."""
        self._jobs.put(None)

    def close(self) -> None:
        """Stop after the call in progress; a thread stuck in the driver is left behind (daemon)."""
        self._closed = True
        self._jobs.put(None)

    @property
    def stuck(self) -> bool:
        return self.busy_since is not None

    def _run(self) -> None:
        _WORKERS[threading.get_ident()] = self
        try:
            self._loop()
        finally:
            _WORKERS.pop(threading.get_ident(), None)

    def _loop(self) -> None:
        monotonic, get, jobs = time.monotonic, self._jobs.get, self._jobs
        next_tick = monotonic()
        while not self._closed:
            period = self._period()
            if period is not None and jobs.empty():
                # Ticking: sleep to the tick. A timed wait on the queue cost twice the CPU of a sleep
                # (0.2% against 0.1% of a core at 20 wake-ups a second); a job or wake() waits for the tick.
                time.sleep(max(0.0, next_tick - monotonic()))
            try:  # ticking, look without raising queue.Empty at every tick (an exception costs more than the look)
                job = get(timeout=self._idle) if period is None else (None if jobs.empty() else jobs.get_nowait())
            except queue.Empty:
                job = None
            if self._closed:
                return
            if job is not None:
                fn, args, fut = job
                if fut.set_running_or_notify_cancel():
                    self.busy_since = monotonic()
                    try:
                        fut.set_result(fn(*args))
                    except BaseException as exc:  # handed to the loop, which logs it
                        fut.set_exception(exc)
                    finally:
                        self.busy_since = None
                period = self._period()
            now = monotonic()
            if period is None:
                next_tick = now
            elif now >= next_tick:
                self.busy_since = now
                try:
                    self._tick()
                except Exception as exc:  # a bug, not an NVML error (the tick handles those): keep the thread
                    log.error("gpu_tick_crashed", worker=self._thread.name, error=repr(exc))
                finally:
                    self.busy_since = None
                self.ticks += 1
                # Keep the cadence; after a stall, restart it rather than burst to catch up.
                next_tick = next_tick + period if next_tick + period > now else now + period
