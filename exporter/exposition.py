"""Metric families and their pre-rendered exposition, in OpenMetrics 1.0 and Prometheus text 0.0.4.

gangscope follows kube-state-metrics rather than prometheus_client's collect-on-scrape model:
each owner (a Workload, a GPU, a source's health) renders its sample lines when *it* changes,
and a scrape only hands out the stored bytes (:meth:`Exposition.render_parts`), which the server
streams in batches. Nothing joined is kept between scrapes: a permanent copy of the whole page
would double the exposition's memory (100 MB for 20,000 Workloads) to save a join that costs
less than the socket writes.

Sample lines are identical in both formats (counter samples keep ``_total``, info samples keep
``_info``); only the ``# HELP``/``# TYPE`` headers and the OpenMetrics ``# EOF`` differ, so each
owner's lines are rendered once and served in either format.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

log = structlog.get_logger(__name__)

Kind = Literal["gauge", "counter", "info"]

OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
EOF = b"# EOF\n"

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


def escape_label_value(value: str) -> str:
    """Escape a label value for both formats (backslash, double quote, line feed).

    Most values need nothing: checking first is several times faster than translating, and this
    runs for every label of every watch event (modules import it as ``esc``)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.translate(_ESCAPES)
    return value


def format_value(value: float) -> str:
    """Render a sample value: integers without a fraction, NaN/Inf spelled the way both formats accept."""
    cls = value.__class__
    if cls is int:
        return str(value)
    if cls is float and value.is_integer() and abs(value) < 1e15:  # timestamps, most gauges
        return str(int(value))
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


class LabelPairs:
    """Label pairs rendered once (``namespace="a",workload="b"``) and the names they hold, for
    the fast paths of :class:`Family`: the leading labels several families share (one Workload's
    ``namespace``/``workload`` in a dozen families) or a topology path, escaped once per owner
    or per path instead of once per line."""

    __slots__ = ("names", "text")

    def __init__(self, names: tuple[str, ...], text: str) -> None:
        self.names = names
        self.text = text

    def __repr__(self) -> str:
        return f"LabelPairs({self.text})"

    def plus(self, names: Sequence[str], values: Sequence[str]) -> LabelPairs:
        """These pairs followed by ``names`` with ``values`` (a Workload's lead and one check)."""
        more = label_pairs(names, values)
        return LabelPairs(self.names + more.names, f"{self.text},{more.text}" if self.text else more.text)


NO_LABELS = LabelPairs((), "")


def label_pairs(names: Sequence[str], values: Sequence[str]) -> LabelPairs:
    """``names`` with ``values`` rendered (and escaped) once; see :class:`LabelPairs`."""
    if names.__class__ is not tuple:
        names = tuple(names)
    if len(names) != len(values):
        raise ValueError(f"labels {names} given {len(values)} values")
    return LabelPairs(names, _formatter(names)(*values))


def topology_pairs(path: Iterable[tuple[str, str]]) -> LabelPairs:
    """The topology labels of a path (``((alias, value), ...)`` over the configured levels, top
    first), rendered once for every family declared with ``topology=True``."""
    path = tuple(path)
    return label_pairs([alias for alias, _ in path], [value for _, value in path])


def _pairs(names: Sequence[str], values: Sequence[str]) -> str:
    return ",".join([f'{k}="{escape_label_value(v)}"' for k, v in zip(names, values)])


# One formatter per tuple of label names, generated as the f-string a hand-written renderer would
# hold (as dataclasses and namedtuple generate their methods): a generic join over names and
# values costs three times as much, and this runs for every line of every watch event. Names
# are checked to be label names before they go into code; others (and past the bound, which
# only run-time topology aliases could reach) take the generic join.
_FORMATTERS: dict[tuple[str, ...], Callable[..., str]] = {}
_FORMATTERS_LIMIT = 4096


def _formatter(names: tuple[str, ...]) -> Callable[..., str]:
    """``f(*values)``: the escaped pairs of ``names`` with ``values``, for values of the right count."""
    fmt = _FORMATTERS.get(names)
    if fmt is not None:
        return fmt
    if len(_FORMATTERS) >= _FORMATTERS_LIMIT or not all(_LABEL_NAME.fullmatch(n) for n in names):
        return lambda *values: _pairs(names, values)
    args = ", ".join(f"v{i}" for i in range(len(names)))
    body = ",".join(f'{n}="{{esc(v{i})}}"' for i, n in enumerate(names))
    scope: dict[str, Any] = {"esc": escape_label_value}
    exec(f"def pairs({args}):\n    return f'{body}'\n", scope)  # noqa: S102 - names checked above
    fmt = _FORMATTERS[names] = scope["pairs"]
    return fmt


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family, declared as data next to the code that fills it.

    ``name`` is the sample name as users query it (counters end in ``_total``, info series in
    ``_info``). ``labels`` are the family's label names in their order: every sample is rendered
    from them (:meth:`sample`, and the fast paths :meth:`head`/:meth:`tail`/:meth:`line`), so a
    sample cannot carry other labels than the declaration and the README catalogue lists. Families
    with ``topology=True`` append the configured topology labels after them (``<topology>`` in
    the catalogue); ``--cluster-name`` goes first on every line (:class:`Exposition`).
    """

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    topology: bool = False
    # Labels named at run time after the declared ones, each starting with this prefix (an
    # object's Kubernetes labels as ``label_<key>``, --metric-labels-allowlist); "" for none.
    label_prefix: str = ""
    # every leading run of ``labels``, for checking a LabelPairs handed to head()/line()
    _leads: frozenset[tuple[str, ...]] = field(default=frozenset(), init=False, repr=False, compare=False)
    # labels[start:] for every start, so the hot paths do not slice
    _after: tuple[tuple[str, ...], ...] = field(default=(), init=False, repr=False, compare=False)
    _formats: tuple[Callable[..., str], ...] = field(default=(), init=False, repr=False, compare=False)  # of _after

    def __post_init__(self) -> None:
        if self.kind == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name} must end in _total")
        if self.kind == "info" and not self.name.endswith("_info"):
            raise ValueError(f"info family {self.name} must end in _info")
        if "\\" in self.help or "\n" in self.help or '"' in self.help:
            raise ValueError(f"help of {self.name} must not contain backslashes, quotes or newlines")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"{self.name} declares a label twice: {self.labels}")
        object.__setattr__(self, "_leads", frozenset(self.labels[:i] for i in range(len(self.labels) + 1)))
        object.__setattr__(self, "_after", tuple(self.labels[i:] for i in range(len(self.labels) + 1)))
        object.__setattr__(self, "_formats", tuple(_formatter(after) for after in self._after))

    def __hash__(self) -> int:
        # Families key every owner's lines on each event; the generated hash would hash all five
        # fields each time. Equal families have equal names, so the name alone is a valid hash.
        return hash(self.name)

    def header(self, openmetrics: bool) -> bytes:
        """``# HELP`` and ``# TYPE`` lines; OpenMetrics names counter and info families without the suffix."""
        if openmetrics:
            base = self.name
            if self.kind == "counter":
                base = self.name[: -len("_total")]
            elif self.kind == "info":
                base = self.name[: -len("_info")]
            return f"# HELP {base} {self.help}\n# TYPE {base} {self.kind}\n".encode()
        kind = "gauge" if self.kind == "info" else self.kind
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} {kind}\n".encode()

    # ----- rendering: the only place label pairs are formatted --------------------------------

    def _values(self, values: Sequence[str] | Mapping[str, str], start: int = 0) -> Sequence[str]:
        """The values of ``labels[start:]``, given in that order or by name; checked against the declaration."""
        names = self._after[start]
        cls = values.__class__
        if cls is tuple or cls is list:  # the common case, without the (slow) ABC check below
            if len(values) != len(names):
                raise ValueError(f"{self.name} declares labels {names}, given {len(values)} values")
            return values  # type: ignore[return-value]
        if isinstance(values, Mapping):
            if len(values) != len(names) or not all(k in values for k in names):
                raise ValueError(f"{self.name} declares labels {names}, given {sorted(values)}")
            return [values[k] for k in names]
        if len(values) != len(names):
            raise ValueError(f"{self.name} declares labels {names}, given {len(values)} values")
        return values

    def _topology(self, topology: LabelPairs | Iterable[tuple[str, str]] | None) -> str:
        if topology is None:
            return ""
        if topology.__class__ is not LabelPairs:
            topology = topology_pairs(topology)  # type: ignore[arg-type]
        if topology.text and not self.topology:
            raise ValueError(f"{self.name} is not declared with topology labels")
        return topology.text

    def _extra(self, extra: Sequence[tuple[str, str]]) -> str:
        if not extra:
            return ""
        names = [k for k, _ in extra]
        if not self.label_prefix or not all(k.startswith(self.label_prefix) and _LABEL_NAME.fullmatch(k) for k in names) \
                or len(set(names)) != len(names) or set(names) & set(self.labels):
            raise ValueError(f"{self.name} takes no run-time labels {names} (prefix {self.label_prefix!r})")
        return _pairs(names, [v for _, v in extra])

    def prefix(self, values: Sequence[str] | Mapping[str, str],
               topology: LabelPairs | Iterable[tuple[str, str]] | None = None,
               extra: Sequence[tuple[str, str]] = ()) -> str:
        """``name{labels} ``, ready for a value: for an owner that renders thousands of samples a
        second with unchanged labels (the agent's counters) and keeps its prefixes."""
        inner = self._formats[0](*self._values(values))
        if extra:
            more = self._extra(extra)
            inner = f"{inner},{more}" if inner else more
        if topology is not None:
            more = self._topology(topology)
            if more:
                inner = f"{inner},{more}" if inner else more
        return f"{self.name}{{{inner}}} " if inner else f"{self.name} "

    def sample(self, values: Sequence[str] | Mapping[str, str], value: float,
               topology: LabelPairs | Iterable[tuple[str, str]] | None = None,
               extra: Sequence[tuple[str, str]] = ()) -> str:
        """One exposition line (with its trailing newline): the declared labels' values in their
        order or by name, then the run-time labels of a family with a ``label_prefix``
        (``extra``: names and values), then the topology labels of a ``topology=True`` family."""
        return f"{self.prefix(values, topology, extra)}{format_value(value)}\n"

    def head(self, lead: LabelPairs) -> bytes:
        """``name{`` and the leading labels ``lead`` (the first ``len(lead.names)`` declared labels),
        the line left open for :meth:`tail`; :meth:`lines` joins one head with many tails."""
        if lead.names not in self._leads:
            raise ValueError(f"{self.name} declares labels {self.labels}, not led by {lead.names}")
        return f"{self.name}{{{lead.text}".encode()

    def tail(self, start: int, values: Sequence[str] | Mapping[str, str], value: float | str,
             topology: LabelPairs | None = None) -> bytes:
        """The rest of a line after a :meth:`head` of ``start`` labels: the labels from
        ``labels[start]`` on, the topology labels, the value. Pure in its arguments, so callers
        cache the tails that repeat across owners (stages, conditions, hosts)."""
        inner = self._formats[start](*self._values(values, start))
        if topology is not None:
            more = self._topology(topology)
            if more:
                inner = f"{inner},{more}" if inner else more
        value = value if value.__class__ is str else format_value(value)  # type: ignore[arg-type]
        if inner:
            return f'{"," if start else ""}{inner}}} {value}\n'.encode()
        return f"}} {value}\n".encode()

    def line(self, lead: LabelPairs, value: float, values: Sequence[str] = (),
             topology: LabelPairs | None = None) -> bytes:
        """One complete line: :meth:`head` of ``lead``, then :meth:`tail` of the remaining ``values``."""
        names = lead.names
        if names == self.labels and topology is None and not values:  # the common one: lead is every label
            return f"{self.name}{{{lead.text}}} {format_value(value)}\n".encode()
        if topology is not None:
            return self.head(lead) + self.tail(len(names), values, value, topology)
        if names not in self._leads:
            raise ValueError(f"{self.name} declares labels {self.labels}, not led by {names}")
        rest = self._after[len(names)]
        if len(values) != len(rest):
            raise ValueError(f"{self.name} declares labels {self.labels}, given {names} and {len(values)} more values")
        if not rest:  # the common one: lead is every label
            return f"{self.name}{{{lead.text}}} {format_value(value)}\n".encode()
        inner = self._formats[len(names)](*values)
        return f'{self.name}{{{lead.text}{"," if lead.text else ""}{inner}}} {format_value(value)}\n'.encode()

    def lines(self, lead: LabelPairs, tails: Iterable[bytes]) -> bytes:
        """One line per tail, all with the leading labels ``lead``: a single C-level join."""
        return self.head(lead).join((b"", *tails))


def with_labels(text: bytes, labels: bytes) -> bytes:
    """Every sample line of ``text`` with ``labels`` (rendered pairs, e.g. ``cluster="a"``) first;
    comment lines unchanged. A metric name holds neither ``{`` nor a space, so whichever comes
    first on a line says whether it has labels already."""
    out = []
    for line in text.split(b"\n"):
        if line and line[0] != 35:  # "#"
            brace, space = line.find(b"{"), line.find(b" ")
            if brace != -1 and (space == -1 or brace < space):
                sep = b"" if line[brace + 1:brace + 2] == b"}" else b","
                line = line[:brace + 1] + labels + sep + line[brace + 1:]
            elif space != -1:
                line = line[:space] + b"{" + labels + b"}" + line[space:]
        out.append(line)
    return b"\n".join(out)


# Owners' chunks are kept in blocks of 2**BLOCK_BITS consecutive slots per family, each with a
# version that every change bumps: a gzip segment compressed from a block stays valid until its
# version moves (exporter.server.GzipPages), so a scrape recompresses only the blocks that
# changed. 64 slots: a block of Workload lines is ~20 kB, compressed in ~15 us with ISA-L, and the
# page in such pieces compresses 9% worse than in one stream (bench/gzip_options.py).
BLOCK_BITS = 6
SHAPES_KEPT = 4096  # distinct per-owner series counts shared (Exposition._shapes)


class Block:
    """One family's chunks of one run of slots, and their version."""

    __slots__ = ("chunks", "version", "__weakref__")

    def __init__(self) -> None:
        self.chunks: dict[int, bytes] = {}  # owner slot -> that owner's lines
        self.version = 0


@dataclass(slots=True)
class _FamilyState:
    family: Family
    blocks: dict[int, Block] = field(default_factory=dict)  # slot >> BLOCK_BITS -> its block
    total_series: int = 0
    exported: bool = True  # False: left out by --metric-allowlist/--metric-denylist

    def put(self, slot: int, text: bytes) -> None:
        block = self.blocks.get(slot >> BLOCK_BITS)
        if block is None:
            block = self.blocks[slot >> BLOCK_BITS] = Block()
        elif block.chunks.get(slot) == text:
            return  # the same lines (an event that changed nothing exported): the block's gzip stays valid
        block.chunks[slot] = text
        block.version += 1

    def pop(self, slot: int) -> bool:
        block = self.blocks.get(slot >> BLOCK_BITS)
        if block is None or block.chunks.pop(slot, None) is None:
            return False
        block.version += 1
        if not block.chunks:
            del self.blocks[slot >> BLOCK_BITS]
        return True


class Exposition:
    """All metric families of one process and every owner's rendered lines.

    ``set(owner, lines)`` replaces everything an owner exported; ``delete(owner)`` removes it;
    ``render(openmetrics)`` returns a complete exposition. Owners are any hashable key, usually
    ``(kind, namespace, name)``. Two limits keep a runaway cluster from flooding Prometheus, and
    both drop whole owners from a family, never some of an owner's lines (a Workload with half
    its hosts would look like a different placement), counted in
    ``gangscope_exposition_dropped_series_total``:

    * ``max_series_per_owner``: an owner with more lines than this in one family (a Workload
      assigned to tens of thousands of hosts) is left out of that family, whatever else fits;
    * ``max_series_per_family``: an owner whose lines would take the family past it is left out
      of that family. Owners already exported keep their lines, so what is dropped first is the
      newest owner or the one that grew; a dropped owner returns at its next change if there is
      room by then.

    Each owner gets a slot number, and the families key its chunks by slot (in blocks of
    consecutive slots, see :data:`BLOCK_BITS`): a Workload sets ten
    families per event, and hashing its ``(kind, namespace, name)`` tuple once rather than for
    every family and index is a tenth of the collector's first sync (bench/collector.py).
    """

    DROPPED = Family(
        "gangscope_exposition_dropped_series_total",
        "counter",
        "Series not exported because their family reached --max-series-per-family.",
        ("family",),
    )

    def __init__(self, max_series_per_family: int = 0, max_series_per_owner: int = 0, *,
                 exported: Callable[[str], bool] | None = None, const_labels: Sequence[tuple[str, str]] = ()) -> None:
        """``exported(name)`` says whether a family is served at all (--metric-allowlist and
        --metric-denylist; its lines are then never stored); ``const_labels`` go first on every
        sample line (--cluster-name)."""
        self._exported = exported
        self.const_labels = _pairs([k for k, _ in const_labels], [v for _, v in const_labels]).encode()
        self._families: dict[str, _FamilyState] = {}
        # owner -> (slot, {family name: series of that owner in it})
        self._owned: dict[Hashable, tuple[int, dict[str, int]]] = {}  # the dicts are shared: read-only
        self._shapes: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}  # series counts -> their one dict
        self._slots = itertools.count()
        self._max_series = max_series_per_family
        self._max_owner = max_series_per_owner
        self._dropped: dict[str, int] = {}
        self._dropped_slot = next(self._slots)
        self.generation = 0  # bumped by every change, so a server can tell a cached page is current
        self.register(self.DROPPED)

    def register(self, *families: Family) -> None:
        """Declare families (idempotent); they are rendered in registration order."""
        self.generation += 1
        for fam in families:
            known = self._families.get(fam.name)
            if known is None:
                known = self._families[fam.name] = _FamilyState(
                    fam, exported=self._exported is None or fam is self.DROPPED or self._exported(fam.name))
            elif known.family != fam:
                raise ValueError(f"metric family {fam.name} registered twice with different definitions")

    def filtered(self, families: Iterable[Family]) -> frozenset[Family]:
        """Those of ``families`` that --metric-allowlist/--metric-denylist leave out: their
        renderers skip them, so their lines are never formatted, not formatted and dropped."""
        return frozenset(f for f in families if (state := self._families.get(f.name)) is not None and not state.exported)

    @property
    def families(self) -> list[Family]:
        return [state.family for state in self._families.values()]

    def set(self, owner: Hashable, lines: Mapping[Family, Sequence[str] | Sequence[bytes]]) -> None:
        """Replace all lines of ``owner``; families absent from ``lines`` lose the owner's lines.

        Each item of a family's sequence is one line or several joined (each ending in ``\\n``),
        all ``str`` (:meth:`Family.sample`) or all UTF-8 ``bytes`` (:meth:`Family.line`,
        :meth:`Family.lines`); the series count is the number of lines either way.
        """
        chunks = []
        for fam, fam_lines in lines.items():
            if fam_lines and fam_lines[0].__class__ is bytes:
                text = b"".join(fam_lines)  # type: ignore[arg-type]
            else:
                text = "".join(fam_lines).encode()  # type: ignore[arg-type]
            chunks.append((fam, text, text.count(b"\n")))  # escaped label values hold no raw newline
        self.set_counted(owner, chunks)

    def set_counted(self, owner: Hashable, chunks: Iterable[tuple[Family, bytes, int]]) -> None:
        """:meth:`set` for a renderer that knows its line counts (Workloads, by the ten thousand
        per list): ``(family, its lines as one UTF-8 string, the number of lines)`` for each
        family, each family at most once."""
        families, limit, owner_limit = self._families, self._max_series, self._max_owner
        self.generation += 1
        entry = self._owned.get(owner)
        if entry is None:
            slot, previous = next(self._slots), None
        else:
            slot, previous = entry
        counts: dict[str, int] = {}
        for fam, text, count in chunks:
            name = fam.name
            state = families.get(name)
            if state is None:
                raise KeyError(f"metric family {name} is not registered")
            if not text or not state.exported:
                continue
            if self.const_labels:
                text = with_labels(text, self.const_labels)
            old = previous.get(name, 0) if previous else 0
            if ((limit and state.total_series - old + count > limit)
                    or (owner_limit and count > owner_limit)) and fam is not self.DROPPED:
                self._remove(state, slot, old)
                self._count_dropped(name, count, limit if limit and state.total_series + count > limit else owner_limit)
                counts[name] = 0
                continue
            state.put(slot, text)
            state.total_series += count - old
            counts[name] = count
        if previous:
            for name, old in previous.items():
                if name not in counts:
                    self._remove(families[name], slot, old)
        if counts:
            # Owners of one kind mostly export the same series counts (every finished Workload,
            # every host): they share one read-only dict, a dict per owner was 11 MiB of the
            # benchmark cluster's 52,000 owners. Cleared when full, so a churn of shapes cannot grow it.
            shape = tuple(counts.items())
            shared = self._shapes.get(shape)
            if shared is None:
                if len(self._shapes) >= SHAPES_KEPT:
                    self._shapes.clear()
                shared = self._shapes[shape] = counts
            self._owned[owner] = (slot, shared)
        elif entry is not None:
            del self._owned[owner]

    def delete(self, owner: Hashable) -> None:
        entry = self._owned.pop(owner, None)
        if entry is not None:
            self.generation += 1
            slot, counts = entry
            for name, old in counts.items():
                self._remove(self._families[name], slot, old)

    def owners(self) -> frozenset[Hashable]:
        """Every owner with lines (in this class, ``set`` names the method above)."""
        return frozenset(self._owned)

    def series_count(self, name: str) -> int:
        return self._families[name].total_series

    @staticmethod
    def _remove(state: _FamilyState, slot: int, count: int) -> None:
        if state.pop(slot):
            state.total_series -= count

    def _count_dropped(self, name: str, count: int, limit: int) -> None:
        first = name not in self._dropped
        self._dropped[name] = self._dropped.get(name, 0) + count
        if first:
            log.warning("series_limit_reached", family=name, limit=limit,
                        which="per family" if limit == self._max_series else "per owner")
        state = self._families[self.DROPPED.name]
        text = "".join(self.DROPPED.sample([n], v) for n, v in sorted(self._dropped.items())).encode()
        state.put(self._dropped_slot, with_labels(text, self.const_labels) if self.const_labels else text)
        state.total_series = len(self._dropped)

    def render_parts(self, openmetrics: bool, eof: bool = True) -> list[bytes]:
        """The whole exposition as its pieces (headers and every owner's chunk), in order.

        A snapshot: the list holds the (immutable) chunks as they are now, so a server may
        write it out across awaits while events keep changing the exposition. ``eof=False``
        leaves out OpenMetrics' closing ``# EOF`` for a caller that appends more families."""
        parts: list[bytes] = []
        for state in self._families.values():
            if state.exported:
                parts.append(state.family.header(openmetrics))
                for block in state.blocks.values():
                    parts.extend(block.chunks.values())
        if openmetrics and eof:
            parts.append(EOF)
        return parts

    def render_blocks(self, openmetrics: bool) -> list[bytes | Block]:
        """The exposition as family headers and blocks (a snapshot of which blocks, not of their
        contents: read a block's chunks on the event loop), without ``# EOF``: what the gzip
        page is built from, one segment per block (exporter.server.GzipPages)."""
        out: list[bytes | Block] = []
        for state in self._families.values():
            if state.exported:
                out.append(state.family.header(openmetrics))
                out.extend(state.blocks.values())
        return out

    def render(self, openmetrics: bool) -> bytes:
        """The whole exposition in one piece; families without samples still carry their metadata."""
        return b"".join(self.render_parts(openmetrics))
