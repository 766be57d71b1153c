"""Volcano Queues: what a Volcano PodGroup waiting for its queue is waiting for.

Why: Volcano creates a job's pods only after its PodGroup goes ``Pending -> Inqueue``
(volcano-sh/volcano ed72c7c8 pkg/controllers/job/job_controller_actions.go:410-412), and the
enqueue action moves a group to ``Inqueue`` only when it has no ``spec.minResources`` or every
enqueue plugin lets it in (pkg/scheduler/actions/enqueue/enqueue.go:95-98). The proportion
plugin's vote (pkg/scheduler/plugins/proportion/proportion.go:404-438; the capacity plugin's
is the same sum, pkg/scheduler/plugins/capacity/capacity.go:742, :1697-1710) rejects a group
when its queue is not ``Open`` (:409-413), and otherwise permits it when the group sets no
minResources (:421-424) or ``minResources + allocated + inqueue - elastic <= realCapability`` on
every resource the group names (:429-433), where realCapability is the cluster's total less the
other queues' guarantees, capped by the queue's ``spec.capability`` where it sets one
(:132-138; an unset cpu or memory capability is unlimited, :120-127). A group whose queue does not exist
is never scheduled (staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/types.go:190-191,
the ``spec.queue`` doc; enqueue.go:58-61 skips it).

What gangscope sees of that: the Queue object, cluster-scoped ``scheduling.volcano.sh/v1beta1``
``queues`` (types.go:350-371): ``spec.capability`` (:469), ``spec.deserved`` (:496),
``spec.guarantee.resource`` (:373-377), ``spec.parent`` (:492), ``status.state`` (Open, Closed,
Closing, Unknown; :24-35, :394) and ``status.allocated`` (:420-422). The scheduler's own inqueue
and elastic sums, and the cluster total that caps realCapability, are not in any object, so
:func:`queue_verdict` checks ``minResources + allocated <= capability`` and says which side of it
the group is on, and that the rest is the scheduler's: it never claims the queue admits a group.
This source is explain-only: it adds no series (besides its source health).

Use::

    queues = VolcanoQueues()
    queues.handlers()                    # {"queues_volcano": handler}
    queues.get(name) -> VolcanoQueue | None
    queues.listed -> bool                # a LIST completed: a queue not found does not exist
    queue_verdict(rec, queues) -> (text, evidence)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..fields import Problems, as_dict, as_str, named_metadata, parse_quantity
from .podgroups import PodGroupRecord
from .record_handler import Key, RecordHandler

SOURCE = "queues_volcano"
KIND = "Queue"
OPEN = "Open"  # QueueStateOpen (types.go:29): the only state the enqueue vote lets a group out of
Quantities = tuple[tuple[str, str], ...]  # resource name -> quantity as written, by name


@dataclass(slots=True)
class VolcanoQueue:
    """The fields of a Volcano Queue that decide whether its groups can be enqueued."""

    name: str
    state: str = ""  # status.state; "" before the queue controller wrote it
    parent: str = ""
    capability: Quantities = ()
    deserved: Quantities = ()
    guarantee: Quantities = ()
    allocated: Quantities = ()
    errors: list[str] = field(default_factory=list)

    @property
    def key(self) -> Key:
        return ("", KIND, self.name)


def _quantities(raw: Any, where: str, problems: Problems) -> Quantities:
    """A ResourceList as written (a bad quantity is a problem and left out)."""
    out = []
    for name, q in as_dict(raw, where, problems).items():
        try:
            parse_quantity(q)
        except ValueError:
            problems.append(f"{where}: bad quantity for {name}: {q!r}")
            continue
        out.append((str(name), str(q)))
    return tuple(sorted(out))


def parse_volcano_queue(obj: Any) -> VolcanoQueue:
    """The record of a Queue object; raises :class:`ParseError` without a name."""
    meta = named_metadata(obj)
    problems: Problems = []
    spec, status = as_dict(obj.get("spec"), "spec", problems), as_dict(obj.get("status"), "status", problems)
    return VolcanoQueue(
        name=meta["name"], state=as_str(status.get("state"), "status.state", problems),
        parent=as_str(spec.get("parent"), "spec.parent", problems),
        capability=_quantities(spec.get("capability"), "spec.capability", problems),
        deserved=_quantities(spec.get("deserved"), "spec.deserved", problems),
        guarantee=_quantities(as_dict(spec.get("guarantee"), "spec.guarantee", problems).get("resource"),
                              "spec.guarantee.resource", problems),
        allocated=_quantities(status.get("allocated"), "status.allocated", problems),
        errors=problems,
    )


class VolcanoQueues:
    """Every Volcano Queue by name (cluster-scoped)."""

    def __init__(self) -> None:
        self.records: dict[Key, VolcanoQueue] = {}
        self.listed = False  # a LIST completed: from now on a queue not here does not exist
        self._handler = RecordHandler(SOURCE, KIND, parse_volcano_queue, self.records, self.put, self.delete,
                                      on_replaced=self._listed)

    def handlers(self) -> dict[str, RecordHandler[VolcanoQueue]]:
        return {SOURCE: self._handler}

    def get(self, name: str) -> VolcanoQueue | None:
        return self.records.get(("", KIND, name))

    def names(self) -> list[str]:
        return sorted(k[2] for k in self.records)

    def put(self, q: VolcanoQueue) -> None:
        self.records[q.key] = q

    def delete(self, key: Key) -> None:
        self.records.pop(key, None)

    def _listed(self) -> None:
        self.listed = True


def _listing(quantities: Quantities) -> str:
    return ", ".join(f"{k}={v}" for k, v in quantities) or "none"


def queue_verdict(rec: PodGroupRecord, queues: VolcanoQueues | None) -> tuple[str, dict[str, Any]]:
    """What a Volcano group waiting for its queue waits for, as far as the Queue object shows
    (module docstring): a sentence for explain and its evidence. Pure in its arguments."""
    name = rec.queue or "default"  # the API server defaults spec.queue to "default" (types.go:193)
    evidence: dict[str, Any] = {"queue": name, "min_resources": dict(rec.min_resources), "found": None}
    if rec.phase == "Inqueue":
        return (f"enqueued in queue {name}: Volcano's job controller creates the pods of an Inqueue group "
                "(check its events if none appear)", evidence)
    q = queues.get(name) if queues is not None else None
    if q is None:
        if queues is not None and queues.listed:
            evidence["found"] = False
            return (f"queue {name} does not exist: Volcano does not schedule a group whose queue is missing", evidence)
        return (f"waiting for its queue {name} (its capacity is not watched: the queues_volcano source is off, "
                "forbidden or not served)", evidence)
    evidence.update(found=True, state=q.state, parent=q.parent, capability=dict(q.capability),
                    deserved=dict(q.deserved), guarantee=dict(q.guarantee), allocated=dict(q.allocated))
    shown = (f"queue {name}: capability {_listing(q.capability)}, deserved {_listing(q.deserved)}, "
             f"allocated {_listing(q.allocated)}")
    if q.state != OPEN:
        evidence["verdict"] = "not_open"
        return (f"waiting for its queue {name}, which is {q.state or 'not yet Open'}: Volcano enqueues nothing from "
                f"a queue that is not Open ({shown})", evidence)
    if not rec.min_resources:
        evidence["verdict"] = "no_min_resources"
        return (f"waiting for its queue {name}: the group sets no minResources, so the queue does not hold it back; "
                f"Volcano's enqueue action runs each session ({shown})", evidence)
    over = _over_capability(rec.min_resources, q.allocated, q.capability)
    wants = f"minResources {_listing(rec.min_resources)}"
    if over:
        evidence["verdict"] = "over_capability"
        evidence["over"] = over
        return (f"waiting for its queue {name}: {wants} do not fit its capability (" + "; ".join(
            f"{r}: {a:g} allocated + {m:g} > {c:g}" for r, a, m, c in over) + f"; {shown})", evidence)
    evidence["verdict"] = "fits_capability"
    return (f"waiting for its queue {name}: {wants} fit its capability over what it has allocated, so what holds it is "
            f"the scheduler's own count (groups already Inqueue, the cluster's free resources, the other queues' "
            f"guarantees) ({shown})", evidence)


def _over_capability(minimum: Quantities, allocated: Quantities, capability: Quantities,
                     ) -> list[tuple[str, float, float, float]]:
    """The resources of ``minimum`` for which allocated + minimum exceeds a capability the queue
    sets (proportion.go:429-433 without the scheduler's inqueue and elastic sums); a resource the
    capability does not name is not limited by it."""
    cap = _values(capability)
    alloc = _values(allocated)
    out = []
    for name, value in _values(minimum).items():
        limit = cap.get(name)
        if limit is not None and alloc.get(name, 0.0) + value > limit:
            out.append((name, alloc.get(name, 0.0), value, limit))
    return out


def _values(quantities: Quantities) -> Mapping[str, float]:
    out = {}
    for name, q in quantities:
        try:
            out[name] = float(parse_quantity(q))
        except ValueError:
            continue  # reported when the object was parsed
    return out
