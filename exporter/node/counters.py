"""Monotonic counters built from device counters that wrap or reset.

Device counters (NVML, sysfs) are finite-width and restart at zero when a GPU or HCA is reset.
Prometheus treats any decrease as a counter reset, which would turn a wrap into a spike of
2**32 bytes or, worse, a false reset at every wrap. The agent therefore exports its own total:
the sum of the deltas it observed, which never goes backwards.
"""

from __future__ import annotations


# A forward step beyond this share of a wrapping counter's range counts as a gap even when it is
# within the link's bound: the reader was late enough that one more delay would have hidden a wrap
# (the agent reads 32-bit counters so that at most 3/4 of the range passes between reads at the
# link's maximum rate; 5% more is the jitter of the reads' timing).
GAP_SHARE = 0.75 * 1.05


class MonotonicCounter:
    """Accumulates deltas of a raw device counter into a total that never decreases.

    The first observation becomes the starting total, so the exported value equals the device's
    own counter (e.g. what ``nvidia-smi`` shows) until the first wrap or reset.

    How a decrease is read depends on what the caller knows:

    - ``bound`` given (the most bytes the link could have moved since the last read, from its
      maximum rate and the monotonic time around the two reads): while ``bound`` is below the
      counter's range ``modulus``, the forward distance ``(raw - last) mod modulus`` is the only
      possible delta, so wraps are exact at any rate; a forward distance beyond ``bound`` to a
      value below the last one and within ``bound`` is a reset (counted up from zero); any other
      step beyond ``bound`` is the driver refreshing in steps (its value jumped between two reads
      closer together than the jump's bytes take at the link's rate) and is taken forward: adding
      the raw value there would invent up to a whole range of bytes. A forward step beyond
      :data:`GAP_SHARE` of the range is still taken, and counted in ``gaps``. When reads are
      further apart than one wrap at the maximum rate (the reader was stalled), the number of
      wraps cannot be known: the one that ``expected`` bytes (the caller's estimate of what moved)
      comes nearest to is added, and the read is counted in ``gaps`` so that users know the total
      holds an estimate.
    - no ``bound``: a decrease is a wrap when ``modulus`` explains it as a forward move of at most
      half the range, otherwise a reset (64-bit counters never wrap in practice, so for them every
      decrease is a reset).

    After the device was lost, :meth:`resume`: it may come back reset (counting from zero) or
    not (counting on); the first read then adds its value only if it is below the last one.
    """

    __slots__ = ("gaps", "last", "resumed", "total")

    def __init__(self) -> None:
        self.last: int | None = None
        self.total = 0
        self.gaps = 0
        self.resumed = False

    def update(self, raw: int, modulus: int = 0, bound: float | None = None, expected: float = 0.0) -> int:
        last = self.last
        self.last = raw
        if last is None:
            self.total += raw
        elif self.resumed:
            self.resumed = False
            # Reset: it counts from zero, so its value is what moved since. Not reset: it went on
            # from where it was. A wrapping counter may have wrapped meanwhile: unknowable, a gap.
            self.total += raw if raw < last else raw - last
            if 0 < modulus < 2**64:
                self.gaps += 1
        elif modulus and bound is not None:
            forward = (raw - last) % modulus
            if bound >= modulus:
                self.gaps += 1
                wraps = min(max(0, round((expected - forward) / modulus)), int(bound // modulus))
                self.total += forward + wraps * modulus
            elif forward <= bound or raw >= last or raw > bound:
                # Within the bound, or beyond it but no reset can explain it (a counter reset to zero
                # cannot have counted past its old value, nor past the bound, since): a driver that
                # refreshes its counters in steps larger than the link moves between two close reads.
                self.total += forward
                if forward > GAP_SHARE * modulus:
                    self.gaps += 1
            else:
                self.total += raw  # reset: counted up from zero, at most the bound since
        elif raw >= last:
            self.total += raw - last
        elif modulus and raw + modulus - last <= modulus // 2:
            self.total += raw + modulus - last
        else:
            self.total += raw
        return self.total

    def resume(self) -> None:
        """The device answered again after it was lost: the next read decides whether it was reset."""
        if self.last is not None:
            self.resumed = True
