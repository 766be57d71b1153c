"""Monotonic counters built from device counters that wrap or reset.

Device counters (NVML, sysfs) are finite-width and restart at zero when a GPU or HCA is reset.
Prometheus treats any decrease as a counter reset, which would turn a wrap into a spike of
2**32 bytes or, worse, a false reset at every wrap. The agent therefore exports its own total:
the sum of the deltas it observed, which never goes backwards.
"""

from __future__ import annotations


class MonotonicCounter:
    """Accumulates deltas of a raw device counter into a total that never decreases.

    The first observation becomes the starting total, so the exported value equals the device's
    own counter (e.g. what ``nvidia-smi`` shows) until the first wrap or reset. A decrease is a
    wrap when ``modulus`` (the counter's width, e.g. ``2**32``) explains it as a forward move of
    at most half the range; otherwise the device was reset and counted up from zero.
    """

    __slots__ = ("last", "total")

    def __init__(self) -> None:
        self.last: int | None = None
        self.total = 0

    def update(self, raw: int, modulus: int = 0) -> int:
        last = self.last
        if last is None:
            self.total = raw
        elif raw >= last:
            self.total += raw - last
        elif modulus and raw + modulus - last <= modulus // 2:
            self.total += raw + modulus - last
        else:
            self.total += raw
        self.last = raw
        return self.total
