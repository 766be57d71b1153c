"""Whether a watched object changed anything gangscope reads: a digest of its raw form.

Every write to an object gives it a new ``metadata.resourceVersion`` (and server-side apply
rewrites ``metadata.managedFields``), so controllers that write status often (Kueue's condition
heartbeats, a scheduler's PodGroup updates) send MODIFIED events that change nothing else. No
parser of gangscope reads either field: parsing such an event again, and rendering its lines,
cost 625-686 us and invalidated the object's gzip blocks, so the next scrape compressed them anew.

The handlers keep each object's digest, computed here from the raw object without those two
fields, and drop an event whose digest equals the stored one before parsing it. The digest is
Python's hash of the object's JSON encoding (orjson, 10 us for a 1.5 KB Workload): a collision
(one in 2^64) would keep an object's old lines until its next change; a re-encoding in another
key order only costs the parse the digest would have saved.

An object read as a typed document (exporter.kube.typed) is digested as that document: its
MessagePack encoding holds exactly the fields gangscope reads (neither of the two above is
among them), so a change to any other field is dropped too. Its handler converts watch events
to documents as well, so a LIST's digests and its watch's compare alike.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

# Written by the API server on every update (apimachinery pkg/apis/meta/v1/types.go: ObjectMeta
# ResourceVersion, "Populated by the system ... changes on every update"; ManagedFields, "This
# field is for internal use": server-side apply's field ownership).
WRITE_FIELDS = frozenset(("resourceVersion", "managedFields"))
_encode = msgspec.msgpack.Encoder().encode


def digest(obj: Any) -> int | None:
    """The digest of everything in ``obj`` but :data:`WRITE_FIELDS` (of a typed document: of its
    fields); None when it has no metadata mapping or does not encode (such an object is parsed,
    and its problem counted, every time)."""
    if obj.__class__ is not dict:
        if not isinstance(obj, msgspec.Struct):
            return None
        try:
            return hash(_encode(obj))
        except OverflowError:  # an integer MessagePack cannot hold, in a field kept as Any
            return None
    meta = obj.get("metadata")
    if meta.__class__ is not dict:
        return None
    try:
        return hash(orjson.dumps({**obj, "metadata": {k: v for k, v in meta.items() if k not in WRITE_FIELDS}}))
    except TypeError:
        return None
