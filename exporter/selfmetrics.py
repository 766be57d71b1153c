"""gangscope's own figures in its exposition: its build, and the process as prometheus_client sees it.

``gangscope_build_info{version,python_version}`` is one static line. The process figures
(``process_resident_memory_bytes``, ``process_cpu_seconds_total``, ``process_open_fds``,
``process_max_fds``, ``process_start_time_seconds``, ``process_virtual_memory_bytes``, and
``python_info``) come from prometheus_client's ``ProcessCollector`` and ``PlatformCollector``,
the collectors every Python exporter exposes, so the README's RSS and CPU targets can be watched
with the names dashboards already know. They change between any two scrapes, so they are
rendered per scrape (about 0.2 ms: a read of /proc/self) and appended by the server after the
pre-rendered page (:class:`exporter.server.ServerConfig` ``live``).
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.exposition import generate_latest as render_text
from prometheus_client.openmetrics.exposition import generate_latest as render_openmetrics

from . import __version__
from .exposition import EOF, Exposition, Family

BUILD_INFO = Family(
    "gangscope_build_info", "info", "The gangscope version this process runs and the Python that runs it (value 1).",
    ("version", "python_version"),
)


class SelfMetrics:
    """Registers the build line in ``exposition``; :meth:`render` gives the process lines of a scrape."""

    def __init__(self, exposition: Exposition) -> None:
        exposition.register(BUILD_INFO)
        exposition.set(("build_info",), {BUILD_INFO: [BUILD_INFO.sample(
            (__version__, platform.python_version()), 1)]})
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def render(self, openmetrics: bool) -> bytes:
        """The process and platform families in the scrape's format (OpenMetrics without its ``# EOF``)."""
        if openmetrics:
            return render_openmetrics(self.registry).removesuffix(EOF)
        return render_text(self.registry)
