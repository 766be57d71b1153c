"""NVML across the node's life cycle: let go of the driver while the GPU operator replaces it or
reconfigures MIG, take it again afterwards, and restart on a library the driver no longer matches.

Why: an open NVML handle holds ``/dev/nvidia*`` open, so the NVIDIA driver manager cannot unload
the kernel modules (``unix.DeleteModule`` fails with "driver is in use", NVIDIA/k8s-driver-manager
cmd/driver-manager/main.go 919-953 @bd62ca7) and MIG reconfiguration waits for every GPU client
to be gone (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go 164-177 @bd7160f). The operator
announces both on the Node's labels; :func:`release_reason` reads them (a pure judgement), and
:class:`NvmlLifecycle` stops the sampler's workers, calls ``nvmlShutdown``, drops every GPU
series, and builds a fresh sampler (devices and MIG instances enumerated again) once the labels
clear. A library that no longer matches the kernel module (``LIB_RM_VERSION_MISMATCH``, the old
driver's userspace still mounted into this container) or a module that is not loaded
(``DRIVER_NOT_LOADED``) cannot be fixed from inside the process: :class:`FatalWatch` reports it
and the agent exits non-zero, so the kubelet restarts it with the new driver's files.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pynvml
import structlog

from ..exposition import Exposition
from ..health import SourceHealth
from . import families as F
from .nvml import NvmlSampler

log = structlog.get_logger(__name__)

DRIVER_UPGRADE = "driver_upgrade"
MIG_RECONFIGURATION = "mig_reconfiguration"

# NVIDIA/gpu-operator vendor/github.com/NVIDIA/k8s-operator-libs/pkg/upgrade/consts.go 21
# (UpgradeStateLabelKeyFmt "nvidia.com/%s-driver-upgrade-state", with %s = "gpu") @a22dbf6.
UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
# Same file, 48-82: the node's states in order. The driver pod is restarted (and its
# k8s-driver-manager init container unloads the modules) in pod-restart-required (line 73);
# the states before it only cordon, wait for jobs and drain, with the old driver loaded and
# worth watching; validation-required (76) and after run the new driver.
RELEASE_UPGRADE_STATES = frozenset({"pod-restart-required"})
# NVIDIA/k8s-driver-manager cmd/driver-manager/main.go 47 (pausedStr) and 728-740
# (maybeSetPaused: "true" -> "paused-for-driver-upgrade", a custom value v -> "v_paused-for-driver-upgrade")
# on every nvidia.com/gpu.deploy.* operand label (53-69, 660-688) before it unloads the driver
# (453), set back by rescheduleGPUOperatorComponents (508, 1037-1073) @bd62ca7.
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
PAUSED_FOR_DRIVER = "paused-for-driver-upgrade"
# NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go 581-586 (maybeSetPaused: "paused-for-mig-change")
# on the deploy labels of the GPU clients (371-386) @bd7160f.
PAUSED_FOR_MIG = "paused-for-mig-change"
# Same file, 41 and 158: nvidia.com/mig.config.state is set to "pending" before the clients are
# shut down, "rebooting" (188) when the MIG mode change needs a reboot; "success"/"failed" (49-50)
# once the new layout is applied (or not) and the clients are back.
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
RELEASE_MIG_STATES = frozenset({"pending", "rebooting"})

# nvmlInit answers that a new process fixes (nvml.h NVML_ERROR_DRIVER_NOT_LOADED = 9,
# NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18).
FATAL_INIT_ERRORS = frozenset({pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH})
EXIT_DRIVER_CHANGED = 3  # the process's exit status for a restart onto the new driver
FIRST_NODE_WAIT = 10.0  # seconds NVML waits for the Node's labels at start (then starts anyway)
SHUTDOWN_TIMEOUT = 10.0  # seconds nvmlShutdown may take before the release goes on without it


def release_reason(labels: Mapping[str, str]) -> str:
    """Why NVML must be let go on a node with these labels: ``driver_upgrade``, ``mig_reconfiguration``,
    or ``""`` when the agent may hold it. A driver upgrade wins over a MIG change (both release)."""
    paused = [v for k, v in labels.items() if k.startswith(DEPLOY_LABEL_PREFIX)]
    if labels.get(UPGRADE_STATE_LABEL, "") in RELEASE_UPGRADE_STATES or any(PAUSED_FOR_DRIVER in v for v in paused):
        return DRIVER_UPGRADE
    if labels.get(MIG_STATE_LABEL, "") in RELEASE_MIG_STATES or any(PAUSED_FOR_MIG in v for v in paused):
        return MIG_RECONFIGURATION
    return ""


class FatalWatch:
    """The NVML library with ``nvmlInit`` watched: :data:`FATAL_INIT_ERRORS` are reported to
    ``on_fatal`` (on the calling thread, then raised as before), and ``in_flight``/``held`` say
    whether an initialisation is running or holds the library, so a release can wait for the one
    and shut the other down. Every other attribute is the library's own, looked up once (no
    wrapper on the sampling path)."""

    def __init__(self, lib: Any, on_fatal: Callable[[pynvml.NVMLError], None]) -> None:
        self._lib = lib
        self._on_fatal = on_fatal
        self.in_flight = False
        self.held = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._lib, name)
        self.__dict__[name] = attr
        return attr

    def nvmlInit(self) -> None:
        self.in_flight = True
        try:
            self._lib.nvmlInit()
            self.held = True
        except pynvml.NVMLError as exc:
            if exc.value in FATAL_INIT_ERRORS:
                self._on_fatal(exc)
            raise
        finally:
            self.in_flight = False

    def nvmlShutdown(self) -> None:
        self.held = False
        self._lib.nvmlShutdown()


class NvmlLifecycle:
    """Holds the current :class:`NvmlSampler` and its task; releases and re-creates it as the Node's
    labels say (``set_labels``), and renders ``gangscope_nvml_released`` (one series)."""

    def __init__(self, make_sampler: Callable[[], NvmlSampler], exposition: Exposition, health: SourceHealth,
                 base_labels: Callable[[], Sequence[tuple[str, str]]], on_change: Callable[[], None],
                 node_settled: Callable[[], bool] = lambda: True) -> None:
        self._make = make_sampler
        self.exposition = exposition
        self.health = health
        self.base_labels = base_labels
        self.on_change = on_change  # the pod join re-renders against the new (or no) inventory
        self.node_settled = node_settled
        self.sampler = make_sampler()
        self.wanted = ""  # the release reason the labels ask for
        self.reason = ""  # the release reason in effect ("" while NVML is held or starting)
        self.releases = 0
        self._left_stuck = False  # a released sampler had a call stuck in the driver
        self.fatal: str | None = None  # set when nvmlInit answered a FATAL_INIT_ERRORS code
        self._library: FatalWatch | None = None  # the library the current sampler initialised last
        self._task: asyncio.Task | None = None
        self._changed = asyncio.Event()
        self._fatal_event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        exposition.register(*F.LIFECYCLE_FAMILIES)
        self.render()

    def watched(self, lib: Any) -> FatalWatch:
        """The sampler's library factory wraps each library it makes with this."""
        self._library = FatalWatch(lib, self.on_fatal)
        return self._library

    # ----- inputs ----------------------------------------------------------------------------

    def set_labels(self, labels: Mapping[str, str]) -> None:
        """The Node's labels (every list and event): wake the loop when the wanted state changes."""
        wanted = release_reason(labels)
        if wanted != self.wanted:
            self.wanted = wanted
            log.info("nvml_release_wanted" if wanted else "nvml_hold_wanted", reason=wanted or None)
            self._changed.set()

    def on_fatal(self, exc: pynvml.NVMLError) -> None:
        """From the init thread: NVML refuses this driver for good; the agent exits for a restart."""
        self.fatal = str(exc)
        log.error("nvml_driver_changed_restarting", error=str(exc), code=exc.value, exit_status=EXIT_DRIVER_CHANGED,
                  hint="the driver was replaced or unloaded under this process; a restart mounts the current one")
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._fatal_event.set)

    async def wait_fatal(self) -> None:
        await self._fatal_event.wait()

    # ----- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Wait (bounded) for the Node's labels, then follow them until cancelled."""
        self._loop = asyncio.get_running_loop()
        if self.fatal is not None:
            self._fatal_event.set()
        deadline = time.monotonic() + FIRST_NODE_WAIT
        while not self.node_settled() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        try:
            while True:
                self._changed.clear()
                if self.wanted and self.reason != self.wanted:
                    await self._release(self.wanted)
                elif not self.wanted and (self._task is None or self.reason):
                    self._hold()
                await self._changed.wait()
        finally:
            await self._stop_task()

    def _hold(self) -> None:
        if self.reason:  # a fresh sampler: devices, MIG instances and what they support read anew
            self.sampler = self._make()
            log.info("nvml_reinitialising", after=self.reason)
        self.reason = ""
        self._task = asyncio.create_task(self.sampler.run(), name="nvml")
        self.render()

    async def _release(self, reason: str) -> None:
        if self.reason:  # already released, for another reason
            self.reason = reason
            self.render()
            return
        self.reason = reason
        self.releases += 1
        await self._stop_task()
        sampler = self.sampler
        sampler.close()
        # A call in progress (an nvmlInit included) finishes first (its worker stops after it); one
        # still running past the NVML deadline is stuck in the driver, and nvmlShutdown is not
        # called under it.
        library = self._library
        deadline = time.monotonic() + sampler.timeout
        while ((stuck := sampler.stuck()) or (library is not None and library.in_flight)) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        stuck = stuck or (library is not None and library.in_flight)
        for idx in list(sampler.gpus):
            self.exposition.delete(("gpu", idx))
            self.exposition.delete(("gpu_counters", idx))
        sampler.gpus = {}  # the pod join sees no GPUs until the next sampler enumerates them
        self._left_stuck = self._left_stuck or stuck
        shut = await self._shutdown(library) if library is not None and library.held and not stuck else False
        self.health.down(f"NVML released: {reason}", error=False)
        log.info("nvml_released", reason=reason, nvml_shutdown=shut, call_stuck=stuck)
        self.render()
        self.on_change()

    @staticmethod
    async def _shutdown(lib: FatalWatch) -> bool:
        """``nvmlShutdown`` on a thread of its own (it may block in the driver); whether it returned."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def call() -> None:
            try:
                lib.nvmlShutdown()
                ok = True
            except pynvml.NVMLError as exc:
                log.warning("nvml_shutdown_failed", error=str(exc))
                ok = False

            def settle() -> None:
                if not done.done():
                    done.set_result(ok)

            loop.call_soon_threadsafe(settle)

        threading.Thread(target=call, name="nvml-shutdown", daemon=True).start()
        try:
            async with asyncio.timeout(SHUTDOWN_TIMEOUT):  # not wait_for, which drops a stop that lands
                return await asyncio.shield(done)  # as the call returns (3.11, exporter.node.nvml.NvmlSampler.start)
        except TimeoutError:
            log.warning("nvml_shutdown_timeout", timeout=SHUTDOWN_TIMEOUT)
            return False

    async def _stop_task(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # ----- rendering -------------------------------------------------------------------------

    def render(self) -> None:
        self.exposition.set(("nvml_lifecycle",), {F.NVML_RELEASED: [
            F.sample(F.NVML_RELEASED, [("reason", self.reason)], self.base_labels(), 1 if self.reason else 0)]})

    def stuck(self) -> bool:
        """Whether a driver call is still running in this or a released sampler."""
        return self._left_stuck or self.sampler.stuck()

    def close(self) -> None:
        self.sampler.close()
