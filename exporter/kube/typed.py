"""LIST pages decoded into typed documents (msgspec structs), one object at a time.

A handler that reads its objects from typed documents names a struct type in its ``doc_type``;
the informer then decodes each LIST page with :func:`page_decoder` instead of ``orjson.loads``.
Every such struct has ``metadata.name`` and ``metadata.namespace`` ("" for a cluster-scoped
object): the informer keys and scopes documents by them. The page's envelope is decoded with its
items left as raw JSON (``msgspec.Raw``, a view of the page's bytes), then each item on its own
into the struct: a struct decoder builds only the fields it names and checks their types in C,
where orjson builds every field and the parser checks each in Python. The decode costs what
orjson's does; the reading after it, without the checks, 10-20% less (bench/msgspec_decode.py).

One object whose fields have other types than the struct's fails only its own decode: it is
decoded again as plain JSON and handed over as a dict, which the handler reads with its
tolerant parser, counting the problems (``exporter.cluster.store.ResourceHandler``). Watch
events keep arriving as dicts; the handler converts them (``msgspec.convert``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec


A = TypeVar("A")
T = TypeVar("T")


class Unclean(Exception):
    """A document decoded, but a value in it is one the tolerant parser reports (or refuses): the
    typed reader raises this and the object is read by that parser instead."""


def read_typed(obj: Any, doc_type: type[msgspec.Struct], from_doc: Callable[[Any, A], T],
               from_dict: Callable[[Any, A], T], arg: A) -> T:
    """``from_doc(obj, arg)`` for a ``doc_type`` document, else (a dict, or a document it calls
    :class:`Unclean`) ``from_dict`` of the plain object: one record for both, problems counted
    by the tolerant parser alone."""
    if obj.__class__ is doc_type:
        try:
            return from_doc(obj, arg)
        except Unclean:
            obj = msgspec.to_builtins(obj)
    return from_dict(obj, arg)


class _List(msgspec.Struct):
    """A List's envelope (apimachinery ListMeta in ``metadata``); ``items`` UNSET when absent
    (the informer then rejects the page as no List), None for a nil slice."""

    metadata: Any = None
    items: list[msgspec.Raw] | None | msgspec.UnsetType = msgspec.UNSET


def page_decoder(doc_type: type[msgspec.Struct]) -> Callable[[bytes], dict[str, Any]]:
    """A decoder of LIST pages of ``doc_type`` objects into ``{"metadata", "items"}``, as the
    informer reads a page. Invalid JSON raises ``msgspec.DecodeError`` (the client's
    ``BadResponse``), as an envelope whose ``metadata`` is no object would fail the informer."""
    envelope = msgspec.json.Decoder(_List)
    item = msgspec.json.Decoder(doc_type)
    plain = msgspec.json.Decoder()

    def decode(body: bytes) -> dict[str, Any]:
        page = envelope.decode(body)
        if page.items is msgspec.UNSET:
            return {"metadata": page.metadata}
        objects: list[Any] = []
        for raw in page.items or ():
            try:
                objects.append(item.decode(raw))
            except msgspec.ValidationError:  # one object of other types: the tolerant parser reads it
                objects.append(plain.decode(raw))
        return {"metadata": page.metadata, "items": objects}

    return decode
