"""Informers for tests: started on a client, each with its own cache and health, cancelled at the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.kube.cache import ObjectCache
from exporter.kube.client import KubeClient
from exporter.kube.informer import Informer
from exporter.kube.resources import WORKLOADS, Resource


class Running:
    """An informer task with its cache and health."""

    def __init__(self, informer: Informer, cache: ObjectCache, health: SourceHealth):
        self.informer, self.cache, self.health = informer, cache, health
        self.task = asyncio.create_task(informer.run())

    async def synced(self, timeout: float = 10) -> None:
        await asyncio.wait_for(self.informer.synced.wait(), timeout)


StartInformer = Callable[..., Awaitable[Running]]


@asynccontextmanager
async def informers(client: KubeClient, **defaults: Any) -> AsyncIterator[StartInformer]:
    """``start(resource, version, via=other_client, **Informer options)``; ``defaults`` fill in
    options not given. Every informer started is cancelled on exit."""
    running: list[Running] = []

    async def start(resource: Resource = WORKLOADS, version: str = "v1beta2", *, via: KubeClient | None = None,
                    **options: Any) -> Running:
        cache, health = ObjectCache(), SourceHealth(resource.source, Exposition())
        r = Running(Informer(via or client, resource, version, cache, health, **{**defaults, **options}), cache, health)
        running.append(r)
        return r

    try:
        yield start
    finally:
        for r in running:
            r.task.cancel()
        await asyncio.gather(*(r.task for r in running), return_exceptions=True)
