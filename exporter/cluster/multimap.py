"""A dictionary of keys to the keys indexed under them, small in memory for the usual one or two.

The collector's indexes (a Workload's owner, a PodGroup's name, the Workloads of a queue) hold
one entry per object: as ``dict[key, set]`` they were 17 MiB of one-element sets for the
benchmark cluster (tracemalloc), a set being 216 bytes against a 1-tuple's 48.
"""

from __future__ import annotations

from typing import Any


class MultiMap(dict):
    """key -> the keys indexed under it, with removal that drops emptied keys.

    Most keys index one or two values (a PodGroup's name, its owner, its Workload): those are
    kept as a tuple, 48 bytes for one against a set's 216 (17 MiB of sets for the benchmark cluster's
    40,000 objects); a key past :attr:`SMALL` values (a CompositePodGroup's children) gets a set."""

    SMALL = 8

    def add(self, k: Any, v: Any) -> None:
        cur = self.get(k)
        if cur is None:
            self[k] = (v,)
        elif cur.__class__ is set:
            cur.add(v)
        elif v not in cur:
            self[k] = cur + (v,) if len(cur) < self.SMALL else {*cur, v}

    def discard(self, k: Any, v: Any) -> None:
        cur = self.get(k)
        if cur is None or v not in cur:
            return
        if cur.__class__ is set:
            cur.discard(v)
            if cur:
                return
        else:
            rest = tuple(x for x in cur if x != v)
            if rest:
                self[k] = rest
                return
        del self[k]

    def of(self, k: Any) -> tuple | set:
        """The keys under ``k`` (do not change them: copy to change)."""
        return self.get(k, ())
