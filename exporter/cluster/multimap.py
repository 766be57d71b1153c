"""A dictionary of keys to the keys indexed under them, small in memory for the usual one or two.

The collector's indexes (a Workload's owner, a PodGroup's name, the Workloads of a queue) hold
one entry per object: as ``dict[key, set]`` they were 17 MiB of one-element sets for the
benchmark cluster (tracemalloc), a set being 216 bytes; a lone value held in a 1-tuple (48
bytes) was still 6 MiB of tuples for its 127,000 index entries, so a lone value is held bare.
"""

from __future__ import annotations

from typing import Any


class _Several(tuple):
    """Two to :attr:`MultiMap.SMALL` values under one key: a tuple of its own class, so that it
    cannot be taken for a lone value that is itself a tuple (most values are keys, which are)."""

    __slots__ = ()


class MultiMap(dict):
    """key -> the keys indexed under it, with removal that drops emptied keys.

    Most keys index one value (a PodGroup's name, its owner, its Workload): it is held as it is;
    two to :attr:`SMALL` values as a tuple; a key past :attr:`SMALL` values (a CompositePodGroup's
    children) gets a set. Read through :meth:`of`, never the dict's own ``get``, which returns
    these forms as they are."""

    SMALL = 8

    def add(self, k: Any, v: Any) -> None:
        cur = self.get(k)
        if cur is None:
            self[k] = v
        elif cur.__class__ is set:
            cur.add(v)
        elif cur.__class__ is _Several:
            if v not in cur:
                self[k] = _Several((*cur, v)) if len(cur) < self.SMALL else {*cur, v}
        elif cur != v:
            self[k] = _Several((cur, v))

    def discard(self, k: Any, v: Any) -> None:
        cur = self.get(k)
        if cur is None:
            return
        if cur.__class__ is set:
            cur.discard(v)
            if cur:
                return
        elif cur.__class__ is _Several:
            if v in cur:
                rest = tuple(x for x in cur if x != v)  # two or more before: one or more left
                self[k] = rest[0] if len(rest) == 1 else _Several(rest)
            return
        elif cur != v:
            return
        del self[k]

    def of(self, k: Any) -> tuple | set:
        """The keys under ``k`` (do not change them: copy to change)."""
        cur = self.get(k)
        if cur is None:
            return ()
        if cur.__class__ is _Several or cur.__class__ is set:
            return cur
        return (cur,)
