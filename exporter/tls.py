"""Optional TLS for /metrics, with the certificate reloaded when its files change.

cert-manager and kubelet-style rotation replace the files in place; the server keeps one
``SSLContext`` and loads the new chain into it, which OpenSSL applies to every later handshake,
so rotation needs no restart and drops no connection.
"""

from __future__ import annotations

import asyncio
import os
import ssl

import structlog

log = structlog.get_logger(__name__)


class ReloadingTLS:
    """An ``SSLContext`` for ``cert``/``key`` that :meth:`watch` keeps current."""

    def __init__(self, cert: str, key: str) -> None:
        self.cert = cert
        self.key = key
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp = self._mtimes()
        self.context.load_cert_chain(cert, key)
        self.reloads = 0

    def _mtimes(self) -> tuple[float, float]:
        return os.stat(self.cert).st_mtime_ns, os.stat(self.key).st_mtime_ns

    def reload_if_changed(self) -> bool:
        """Load the files again when their modification times changed; a broken pair keeps the old one."""
        try:
            stamp = self._mtimes()
            if stamp == self._stamp:
                return False
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            log.warning("tls_reload_failed", cert=self.cert, error=str(exc))
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("tls_reloaded", cert=self.cert)
        return True

    async def watch(self, interval: float = 10.0) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()
