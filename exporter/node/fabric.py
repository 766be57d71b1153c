"""The node's fabric: InfiniBand/RoCE port counters and physical NIC byte counters from sysfs.

NVLink covers traffic inside the node; a collective that spans nodes leaves through PCIe to an
HCA or NIC. These counters, with the same topology labels, complete the cross-node picture.

- ``<root>/class/infiniband/<dev>/ports/<n>/``: ``counters/port_xmit_data`` and
  ``port_rcv_data`` count 4-byte words (the kernel shows the 64-bit PortCountersExtended value
  when the HCA has it; old OFED stacks put those in ``counters_ext/port_*_data_64``, preferred
  when present), ``rate`` ("400 Gb/sec (4X NDR)") and ``state`` ("4: ACTIVE").
- ``<root>/class/net/<if>/statistics/{tx,rx}_bytes`` for interfaces with a ``device`` link,
  i.e. physical NICs: the veth/bridge/tunnel interfaces a Kubernetes node grows by the
  hundred have none, so they never become series. These are the same kernel counters psutil
  reads from ``/proc/net/dev``; reading sysfs keeps one ``--sysfs`` root for tests.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from ..exposition import Exposition, format_value
from ..health import SourceHealth
from . import families as F
from .counters import MonotonicCounter

log = structlog.get_logger(__name__)

_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")
WORD = 4  # port_xmit_data / port_rcv_data unit, bytes


@dataclass
class FabricSnapshot:
    """Raw readings: IB ports keyed by (device, port), NICs by name; ``errors`` unreadable files."""

    ports: dict[tuple[str, str], tuple[int | None, int | None, float | None, bool]] = field(default_factory=dict)
    nics: dict[str, tuple[int, int]] = field(default_factory=dict)
    errors: int = 0


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _read_int(path: str) -> int | None:
    try:
        return int(_read(path))
    except FileNotFoundError:
        return None


def parse_rate(text: str) -> float | None:
    """``"400 Gb/sec (4X NDR)"`` -> bytes per second."""
    m = _RATE.match(text)
    return float(m.group(1)) * 1e9 / 8 if m else None


def read_fabric(root: str) -> FabricSnapshot:
    """Read every IB port and physical NIC under ``root`` (``/sys`` on a node). Blocking I/O."""
    snap = FabricSnapshot()
    ib = os.path.join(root, "class", "infiniband")
    for dev in sorted(os.listdir(ib)) if os.path.isdir(ib) else ():
        ports_dir = os.path.join(ib, dev, "ports")
        for port in sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else ():
            base = os.path.join(ports_dir, port)
            try:
                tx = _read_int(os.path.join(base, "counters_ext", "port_xmit_data_64"))
                if tx is None:
                    tx = _read_int(os.path.join(base, "counters", "port_xmit_data"))
                rx = _read_int(os.path.join(base, "counters_ext", "port_rcv_data_64"))
                if rx is None:
                    rx = _read_int(os.path.join(base, "counters", "port_rcv_data"))
                rate = parse_rate(_read(os.path.join(base, "rate"))) if os.path.exists(os.path.join(base, "rate")) else None
                state = _read(os.path.join(base, "state")) if os.path.exists(os.path.join(base, "state")) else ""
            except (OSError, ValueError) as exc:
                log.debug("fabric_port_unreadable", device=dev, port=port, error=str(exc))
                snap.errors += 1
                continue
            snap.ports[(dev, port)] = (tx, rx, rate, state.upper().endswith("ACTIVE"))
    net = os.path.join(root, "class", "net")
    for iface in sorted(os.listdir(net)) if os.path.isdir(net) else ():
        base = os.path.join(net, iface)
        if not os.path.exists(os.path.join(base, "device")):
            continue
        try:
            snap.nics[iface] = (int(_read(os.path.join(base, "statistics", "tx_bytes"))),
                                int(_read(os.path.join(base, "statistics", "rx_bytes"))))
        except (OSError, ValueError) as exc:
            log.debug("nic_unreadable", interface=iface, error=str(exc))
            snap.errors += 1
    return snap


class FabricSampler:
    """Reads sysfs every ``interval`` in a thread and renders monotonic byte counters."""

    OWNER = ("fabric",)

    def __init__(self, root: str, exposition: Exposition, health: SourceHealth,
                 base_labels: Callable[[], Sequence[tuple[str, str]]], interval: float = 1.0) -> None:
        self.root = root
        self.exposition = exposition
        self.health = health
        self.base_labels = base_labels
        self.interval = interval
        self.counters: dict[tuple, MonotonicCounter] = {}
        self.last: FabricSnapshot | None = None
        self._base: tuple[tuple[str, str], ...] = ()
        self._prefixes: dict[tuple, str] = {}  # (family name, labels) -> prefix, for self._base
        exposition.register(*F.FABRIC_FAMILIES)

    async def run(self) -> None:
        while True:
            await self.health.guarded(self.sample_once())
            await asyncio.sleep(self.interval)

    async def sample_once(self) -> None:
        try:
            snap = await asyncio.to_thread(read_fabric, self.root)
        except OSError as exc:
            self.health.down(f"sysfs unreadable: {exc}")
            return
        for (dev, port), (tx, rx, _, _) in snap.ports.items():
            for direction, raw in (("tx", tx), ("rx", rx)):
                if raw is not None:
                    self.counters.setdefault(("ib", dev, port, direction), MonotonicCounter()).update(raw, 2**64)
        for iface, (tx, rx) in snap.nics.items():
            self.counters.setdefault(("nic", iface, "tx"), MonotonicCounter()).update(tx, 2**64)
            self.counters.setdefault(("nic", iface, "rx"), MonotonicCounter()).update(rx, 2**64)
        self.last = snap
        if snap.errors:
            self.health.error(f"{snap.errors} sysfs counter file(s) unreadable")
        self.health.sync_ok(objects=len(snap.ports) + len(snap.nics))
        self.render()

    def render(self) -> None:
        snap = self.last
        if snap is None:
            return
        base = tuple(self.base_labels())
        if base != self._base:  # the node's topology labels changed: every prefix with them
            self._base, self._prefixes = base, {}
        line = self._line
        out: dict[F.Family, list[str]] = {fam: [] for fam in F.FABRIC_FAMILIES}
        for (dev, port), (tx, rx, rate, up) in snap.ports.items():
            labels: tuple[tuple[str, str], ...] = (("device", dev), ("port", port))
            if tx is not None:
                out[F.FABRIC_TX].append(line(F.FABRIC_TX, labels, self.counters[("ib", dev, port, "tx")].total * WORD))
            if rx is not None:
                out[F.FABRIC_RX].append(line(F.FABRIC_RX, labels, self.counters[("ib", dev, port, "rx")].total * WORD))
            if rate is not None:
                out[F.FABRIC_RATE].append(line(F.FABRIC_RATE, labels, rate))
            out[F.FABRIC_UP].append(line(F.FABRIC_UP, labels, 1 if up else 0))
        for iface in snap.nics:
            labels = (("interface", iface),)
            out[F.NIC_TX].append(line(F.NIC_TX, labels, self.counters[("nic", iface, "tx")].total))
            out[F.NIC_RX].append(line(F.NIC_RX, labels, self.counters[("nic", iface, "rx")].total))
        self.exposition.set(self.OWNER, out)

    def _line(self, fam: F.Family, labels: tuple[tuple[str, str], ...], value: float) -> str:
        """One sample line; its prefix is built once per port and family (read every second)."""
        prefix = self._prefixes.get((fam.name, labels))
        if prefix is None:
            prefix = self._prefixes[(fam.name, labels)] = F.series_prefix(fam, labels, self._base)
        return f"{prefix}{format_value(value)}\n"
