"""Where an eviction happened: the topology domains a Workload's eviction counts in.

``gangscope_topology_evictions_total`` counts each eviction Kueue records in
``status.schedulingStats.evictions`` once per domain. Which domains is this module's judgement, a
pure function of the Workload record before and after the event (kubernetes-sigs/kueue@ff69552e):

* The placement an eviction is counted in is the last one seen **before** the event that shows
  it: Kueue keeps ``status.admission`` while it evicts (the job is stopped first,
  pkg/controller/jobframework/reconciler.go:592-600) and clears it afterwards, and a relist may
  show the Workload already admitted again elsewhere, with the count raised: the new placement is
  not where it was evicted.
* A ``NodeFailures`` eviction counts only in the domains of the failed nodes. Kueue lists them in
  ``status.unhealthyNodes`` and clears that list in the very patch that evicts
  (pkg/workload/evict/evict.go:205-209, resetUnhealthyNodes), so they are read from the previous
  record, and from the Evicted condition's message, which names them: "Workload eviction
  triggered due to multiple TAS assigned node failures, including: a, b"
  (pkg/controller/tas/node_controller.go:69, 494-496: the known unhealthy nodes and the one that
  failed now) or "Workload was evicted as there was no replacement for unhealthy node(s): a,b"
  (pkg/scheduler/scheduler.go:927-929). Only when neither names a node of a known domain is the
  eviction counted in every domain of the placement (the runbook says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .workloads import Path, Workload

NODE_FAILURES = "NodeFailures"
# (prefix, separator) of the Evicted messages that name the failed nodes (see the module doc).
_NODE_MESSAGES = (
    ("Workload eviction triggered due to multiple TAS assigned node failures, including: ", ", "),
    ("Workload was evicted as there was no replacement for unhealthy node(s): ", ","),
)


def new_evictions(prev: Workload, wl: Workload) -> dict[tuple[str, str], int]:
    """Evictions per (reason, underlyingCause) that ``wl`` records beyond ``prev``. Kueue raises
    the count in the patch that sets the Evicted condition (evict.go:178-185); a deactivation
    counts as ``Deactivated`` with its cause apart (evict.go:181-182), so the stats count it once."""
    before = prev.evictions
    return {key: n - before.get(key, 0) for key, n in wl.evictions.items() if n > before.get(key, 0)}


def message_nodes(message: str) -> tuple[str, ...]:
    """The nodes an Evicted message of a node failure names (none for any other message)."""
    for prefix, sep in _NODE_MESSAGES:
        if message.startswith(prefix):
            return tuple(n.strip() for n in message[len(prefix):].split(sep) if n.strip())
    return ()


def failed_nodes(prev: Workload, wl: Workload) -> tuple[str, ...]:
    """The nodes whose failure evicted ``wl``: ``prev``'s unhealthyNodes, then those its Evicted
    condition names, each once, in that order."""
    evicted = wl.conditions.get("Evicted")
    named = message_nodes(evicted.message) if evicted is not None and evicted.reason == NODE_FAILURES else ()
    return tuple(dict.fromkeys((*prev.unhealthy_nodes, *named)))


def eviction_domains(reason: str, prev: Workload, wl: Workload, depth: int,
                     node_domain: Callable[[str], Path | None],
                     placed: Sequence[tuple[Path, int]] = ()) -> tuple[set[Path], bool]:
    """The domains (paths cut to ``depth`` levels) an eviction of ``reason`` counts in, and
    whether they are those of the failed nodes (False: every domain of the placement).

    ``placed`` is ``prev``'s placement (full paths and pods of its last assignments' domains);
    ``node_domain(name)`` is a Node's domain where the Node is known; a node that is not (deleted
    since) is found by its hostname in the placement's paths.
    """
    placement = {path[:depth] for path, _ in placed}
    if reason != NODE_FAILURES:
        return placement, False
    found: set[Path] = set()
    for node in failed_nodes(prev, wl):
        domain = node_domain(node)
        if domain is None:
            domain = next((path[:depth] for path, _ in placed if path and path[-1][1] == node), None)
        if domain is not None:
            found.add(domain)
    if found:
        return found, True
    return placement, False
