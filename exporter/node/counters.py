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
    own counter (e.g. what ``nvidia-smi`` shows) until the first wrap or reset.

    How a decrease is read depends on what the caller knows:

    - ``bound`` given (the most bytes the link could have moved since the last read, from its
      maximum rate and the two reads' timestamps): while ``bound`` is below the counter's range
      ``modulus``, the forward distance ``(raw - last) mod modulus`` is the only possible delta,
      so wraps are exact at any rate; a forward distance beyond ``bound`` cannot be a wrap, so the
      device was reset and counted up from zero. When reads are further apart than one wrap at the
      maximum rate (the reader was stalled), the number of wraps cannot be known: the one that
      ``expected`` bytes (the recent rate times the interval) comes nearest to is added, and the
      read is counted in ``gaps`` so that users know the total holds an estimate.
    - no ``bound``: a decrease is a wrap when ``modulus`` explains it as a forward move of at most
      half the range, otherwise a reset (64-bit counters never wrap in practice, so for them every
      decrease is a reset).
    """

    __slots__ = ("gaps", "last", "total")

    def __init__(self) -> None:
        self.last: int | None = None
        self.total = 0
        self.gaps = 0

    def update(self, raw: int, modulus: int = 0, bound: float | None = None, expected: float = 0.0) -> int:
        last = self.last
        self.last = raw
        if last is None:
            self.total += raw
        elif modulus and bound is not None:
            forward = (raw - last) % modulus
            if bound >= modulus:
                self.gaps += 1
                wraps = min(max(0, round((expected - forward) / modulus)), int(bound // modulus))
                self.total += forward + wraps * modulus
            elif forward <= bound:
                self.total += forward
            else:
                self.total += raw
        elif raw >= last:
            self.total += raw - last
        elif modulus and raw + modulus - last <= modulus // 2:
            self.total += raw + modulus - last
        else:
            self.total += raw
        return self.total

    def restart(self) -> None:
        """The device was reset (seen lost and re-opened): its next value counts from zero."""
        self.last = None
