"""Benchmark: which parts of a changed page must be compressed again, per way of cutting it.

    .venv/bin/python bench/gzip_options.py [--workloads 20000] [--interval 15] [--rates 200 1000]

A gzip body may be several gzip members one after the other (RFC 1952 2.2; Go's compress/gzip
reads them as one stream, so Prometheus does). If the page is cut into pieces that are
compressed separately and kept, a scrape recompresses only the pieces that changed since the
last one. This compares, on a realistic cluster (bench/cluster.py) under its realistic change
stream at each rate for one scrape interval, what each cut leaves to recompress per scrape:

* whole page: today's one member, recompressed on any change;
* per family: one member per metric family;
* per block of K owners: one member per family and run of K owner slots (slots in the order
  owners appeared);
* per block, changed owners moved to the tail: an owner that changes gets a new slot at the end,
  so owners that keep changing gather in the last blocks and the long-lived ones stay put.

For each: the share of the page recompressed per scrape, its compression time (zlib level 1, one
core), the page's compressed size (members compress a little worse than one stream), and how
many members the page has.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import zlib
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import orjson
from isal import isal_zlib

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster import Churn, build_cluster  # noqa: E402

from exporter.cluster.collector import build_collector  # noqa: E402
from exporter.config import DEFAULT_MAX_SERIES_PER_FAMILY, DEFAULT_MAX_SERIES_PER_OWNER  # noqa: E402
from exporter.exposition import Exposition  # noqa: E402

LEVEL = 1


def gz(data: bytes, lib: Any = zlib) -> bytes:
    c = lib.compressobj(LEVEL, lib.DEFLATED, 16 + lib.MAX_WBITS)
    return c.compress(data) + c.flush()


class Tracking(Exposition):
    """The real exposition, noting which owners change (a benchmark's view; nothing else differs)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.touched: set[Hashable] = set()

    def set_counted(self, owner, chunks):  # type: ignore[no-untyped-def]
        self.touched.add(owner)
        super().set_counted(owner, chunks)

    def delete(self, owner):  # type: ignore[no-untyped-def]
        self.touched.add(owner)
        super().delete(owner)


def families_of(expo: Exposition) -> list[tuple[str, list[tuple[int, bytes]]]]:
    return [(name, [item for block in state.blocks.values() for item in block.chunks.items()])
            for name, state in expo._families.items()]  # noqa: SLF001 (a bench)


def measure(expo: Tracking, positions: dict[Hashable, int], block: int, moved: bool, dirty_owners: set[Hashable],
            before_slots: dict[Hashable, int]) -> tuple[int, int]:
    """Bytes to recompress and members, for blocks of ``block`` owners (by slot or by moved position)."""
    slot_owner = {slot: owner for owner, (slot, _) in expo._owned.items()}  # noqa: SLF001
    dirty_blocks: set[tuple[str, int]] = set()
    total_bytes = members = 0
    fams = families_of(expo)
    for name, chunks in fams:
        blocks: dict[int, int] = {}
        for slot, text in chunks:
            owner = slot_owner.get(slot)
            pos = positions.get(owner, slot) if moved else slot
            blocks[pos // block] = blocks.get(pos // block, 0) + len(text)
        members += len(blocks) + 1
        for owner in dirty_owners:
            if owner in before_slots:
                old = before_slots[owner]
                dirty_blocks.add((name, old // block))
            now = positions.get(owner) if moved else (expo._owned[owner][0] if owner in expo._owned else None)  # noqa: SLF001
            if now is not None:
                dirty_blocks.add((name, now // block))
        total_bytes += sum(size for b, size in blocks.items() if (name, b) in dirty_blocks)
    return total_bytes, members


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=16_384)
    ap.add_argument("--interval", type=float, default=15.0, help="seconds between scrapes (Prometheus' scrape_interval)")
    ap.add_argument("--rates", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--warm", type=int, default=2, help="intervals before the measured one (default 2)")
    args = ap.parse_args()
    cluster = build_cluster(args.workloads, args.nodes)
    expo = Tracking(DEFAULT_MAX_SERIES_PER_FAMILY, DEFAULT_MAX_SERIES_PER_OWNER)
    _, handlers, _ = build_collector(expo)
    handlers["topologies"].replace([cluster.topology])
    handlers["nodes"].replace(orjson.loads(orjson.dumps(cluster.nodes)))
    handlers["workloads"].replace(orjson.loads(orjson.dumps(cluster.workloads)))
    handlers["podgroups_coscheduling"].replace(orjson.loads(orjson.dumps(cluster.podgroups)))
    gc.collect()
    page = expo.render(False)
    t = time.perf_counter()
    whole = gz(page)
    t_whole = time.perf_counter() - t
    t = time.perf_counter()
    whole_isal = gz(page, isal_zlib)
    t_isal = time.perf_counter() - t
    print(f"page {len(page) / 1e6:.1f} MB; one member: zlib level {LEVEL} {len(whole) / 1e6:.2f} MB in {t_whole * 1000:.0f} ms "
          f"({len(page) / t_whole / 1e6:.0f} MB/s), ISA-L level {LEVEL} {len(whole_isal) / 1e6:.2f} MB in {t_isal * 1000:.0f} ms "
          f"({len(page) / t_isal / 1e6:.0f} MB/s); scrape every {args.interval:.0f} s")
    churn = Churn(cluster)
    route = {"Workload": handlers["workloads"], "PodGroup": handlers["podgroups_coscheduling"]}
    verbs = {"create": "ADDED", "update": "MODIFIED", "delete": "DELETED"}
    print(f"{'rate/s':>6} {'cut':<28} {'recompressed':>12} {'share':>6} {'zlib ms':>8} {'ISA-L ms':>8} {'members':>8}")
    positions: dict[Hashable, int] = {o: s for o, (s, _) in expo._owned.items()}  # noqa: SLF001
    next_pos = max(positions.values(), default=0) + 1
    for rate in args.rates:
        for interval in range(args.warm + 1):  # the moved layout settles over a few intervals
            before = dict(positions)
            before_slots = {o: s for o, (s, _) in expo._owned.items()}  # noqa: SLF001
            expo.touched = set()
            steps = int(rate * args.interval)
            done = 0
            while done < steps:
                for c in churn.next():
                    route[c.obj["kind"]].apply(verbs[c.verb], orjson.loads(orjson.dumps(c.obj)))
                    done += 1
            dirty = expo.touched
            for owner in dirty:  # the moved layout: each changed owner goes to the tail
                positions[owner] = next_pos
                next_pos += 1
            for owner in [o for o in positions if o not in expo._owned]:  # noqa: SLF001 (deleted)
                del positions[owner]
        page = expo.render(False)
        fams = families_of(expo)
        slots_now = {expo._owned[o][0] for o in dirty if o in expo._owned}  # noqa: SLF001
        slots_before = {before_slots[o] for o in dirty if o in before_slots}
        fam_dirty = {name for name, chunks in fams if any(s in slots_now or s in slots_before for s, _ in chunks)}
        rows = [("whole page", len(page), 1)]
        rows.append(("per family", sum(sum(len(t) for _, t in chunks) for name, chunks in fams if name in fam_dirty), len(fams)))
        for block in (16, 64, 256):
            b, m = measure(expo, positions, block, False, dirty, before_slots)
            rows.append((f"per {block} owners", b, m))
            b, m = measure(expo, positions, block, True, dirty, before)
            rows.append((f"per {block} owners, moved", b, m))
        for name, nbytes, members in rows:
            took = []
            for lib in (zlib, isal_zlib):
                t = time.perf_counter()
                gz(page[:nbytes], lib)
                took.append(time.perf_counter() - t)
            print(f"{rate:>6} {name:<28} {nbytes / 1e6:>9.1f} MB {nbytes / len(page):>6.0%} {took[0] * 1000:>8.0f} "
                  f"{took[1] * 1000:>8.0f} {members:>8}")
        print(f"{'':>6} ({len(dirty)} owners changed by {steps} events in the last of {args.warm + 1} intervals)")
    blocks_total = 0
    for _, chunks in families_of(expo):
        for i in range(0, len(chunks), 64):
            blocks_total += len(gz(b"".join(t for _, t in chunks[i:i + 64])))
    one = len(gz(expo.render(False)))
    print(f"size: the page as 64-owner members {blocks_total / 1e6:.2f} MB vs one member {one / 1e6:.2f} MB "
          f"({blocks_total / one - 1:+.0%})")


if __name__ == "__main__":
    main()
