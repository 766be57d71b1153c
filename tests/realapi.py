"""A real Kubernetes API server for the tests: upstream kube-apiserver v1.20.2 and etcd 3.4 on loopback.

``scripts/real-apiserver`` builds the server from Debian's source of Kubernetes (once per machine,
cached); :class:`RealCluster` runs it the way a cluster does, minus the controllers: TLS with a
throwaway CA, client certificates (the admin is in ``system:masters``), ServiceAccount tokens
minted by TokenRequest, ``--authorization-mode=RBAC``, and a two-second etcd compaction interval
so continue tokens and uncached watches expire within seconds. Nothing but the tests writes
objects: Kueue's and the schedulers' status is written through ``/status`` as their controllers
write it (:meth:`AdminClient.apply_status`).

The simulated API server (``exporter/sim/apiserver.py``) stays for what a real one cannot be made
to do on demand (429 with ``Retry-After``, 500s, slow or cut streams) and for the demo; where both
can run a case, this one is the reference.

What 1.20 cannot do, and how the tests get the same situations:

- Its watch cache is sized dynamically (100 to 102,400 events, keeping at least 75 s of history:
  ``staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`` lines 49-60 and 344-356) and
  ignores ``--watch-cache-sizes`` for custom resources (``apiextensions-apiserver/pkg/apiserver/
  customresource_handler.go`` lines 1082-1094), so no flag makes a cached watch expire quickly.
  :meth:`RealCluster.uncached` starts a second kube-apiserver on the same etcd with
  ``--watch-cache=false``: its watches read etcd directly and get ``410 Gone`` once etcd compacts
  past their resourceVersion, which is what a watch cache falling behind looks like to a client.
- Bookmarks come from the watch cache, one per watcher two seconds before its ``timeoutSeconds``
  and then every minute (``cacher.go`` lines 54-58 and 1257-1277). With
  ``EfficientWatchResumption`` (alpha in 1.20, on by default from 1.21) and etcd's progress
  notifications they carry the newest revision of the whole store, as on current clusters.
- CEL rules (``x-kubernetes-validations``) and ``selectableFields`` of Kueue's CRDs are unknown
  fields to 1.20: it accepts the CRDs and drops them (:func:`dropped_by_1_20`).
- The native ``scheduling.k8s.io`` PodGroup, Workload and CompositePodGroup are built-in types of
  1.35+, not CRDs: the server serves stand-in CRDs of the same group, names and versions, with the
  built-in group (PriorityClass) off. What needs a PriorityClass, the dry run of ``deploy/``,
  goes to :meth:`RealCluster.plain`, a second server with its own store and the group on.
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import ctypes.util
import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from exporter.kube.resources import Resource

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "realapi"
SKIP_ENV = "GANGSCOPE_SKIP_REAL_APISERVER"
COMPACTION_INTERVAL = 2.0  # seconds, --etcd-compaction-interval
PR_SET_PDEATHSIG = 1  # linux/prctl.h
ISSUER = "https://kubernetes.default.svc.cluster.local"
# Kueue writes Workload status with a server-side apply patch to the status subresource, as this
# field manager, forcing ownership: kueue pkg/workload/patching/patching.go:261
# (c.Status().Patch(ctx, wlCopy, client.Apply, owner, client.ForceOwnership)) with
# owner = constants.AdmissionName = "kueue-admission" (pkg/constants/constants.go:29), at ff69552e.
KUEUE_ADMISSION = "kueue-admission"
CRD_FILES = (
    "kueue.x-k8s.io_workloads.yaml", "kueue.x-k8s.io_localqueues.yaml", "kueue.x-k8s.io_topologies.yaml",
    "kueue.x-k8s.io_resourceflavors.yaml", "kueue.x-k8s.io_clusterqueues.yaml", "kueue.x-k8s.io_cohorts.yaml",
    "scheduler-plugins_scheduling.x-k8s.io_podgroups.yaml",
    "scheduler-plugins_scheduling.sigs.k8s.io_podgroups.yaml", "volcano_scheduling.volcano.sh_podgroups.yaml",
    "volcano_scheduling.volcano.sh_queues.yaml",
    "native_scheduling.k8s.io_podgroups_workloads.yaml", "scheduling.run.ai_podgroups.yaml",
    "jobset.x-k8s.io_jobsets.yaml", "trainer.kubeflow.org_trainjobs.yaml", "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "ray.io_rayjobs.yaml", "ray.io_rayclusters.yaml",
)
# The Prometheus Operator's kinds that deploy/ ships (ServiceMonitor, PrometheusRule): installed
# only by the tests that dry-run the deploy output (tests/test_realapi_deploy.py).
MONITORING_CRD_FILES = ("monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")


class RealApiUnavailable(Exception):
    """The binaries are not built (run scripts/real-apiserver)."""


def binaries() -> Path | RealApiUnavailable:
    """The folder holding ``kube-apiserver`` and ``etcd``, as ``scripts/real-apiserver --check``
    says, or why there is none."""
    out = subprocess.run([str(ROOT / "scripts" / "real-apiserver"), "--check"], capture_output=True, text=True)
    if out.returncode != 0:
        return RealApiUnavailable(
            f"{out.stderr.strip()}\nThe real-API-server tests need kube-apiserver and etcd: run scripts/real-apiserver "
            f"(scripts/test does), or set {SKIP_ENV}=1 to skip them on a machine that cannot build it.")
    return Path(out.stdout.strip())


# --- certificates ------------------------------------------------------------------------------


def _write_pem(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


@dataclass
class Pki:
    """A throwaway CA, the server's certificate for 127.0.0.1, an admin client certificate and the
    service-account signing key, written to ``folder``."""

    folder: Path
    ca_cert: str = ""
    server_cert: str = ""
    server_key: str = ""
    admin_cert: str = ""
    admin_key: str = ""
    sa_key: str = ""
    sa_pub: str = ""
    _sa_private: Any = field(default=None, repr=False)

    def create(self) -> Pki:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = datetime.datetime.now(datetime.UTC)

        def name(cn: str, org: str | None = None) -> x509.Name:
            attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
            if org:
                attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
            return x509.Name(attrs)

        def key_pem(key: Any) -> bytes:
            return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = (x509.CertificateBuilder().subject_name(name("gangscope-test-ca")).issuer_name(name("gangscope-test-ca"))
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                           key_encipherment=False, data_encipherment=False, key_agreement=False,
                                           encipher_only=False, decipher_only=False), critical=True)
              .sign(ca_key, hashes.SHA256()))

        def leaf(subject: x509.Name, usage: Any, sans: list[x509.GeneralName] | None = None) -> tuple[bytes, bytes]:
            key = ec.generate_private_key(ec.SECP256R1())
            builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
                       .public_key(key.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
                       .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                       .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
            if sans:
                builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            cert = builder.sign(ca_key, hashes.SHA256())
            return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)

        f = self.folder
        self.ca_cert = _write_pem(f / "ca.crt", ca.public_bytes(serialization.Encoding.PEM))
        cert, key = leaf(name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH,
                         [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
                          x509.DNSName("kubernetes.default.svc")])
        self.server_cert, self.server_key = _write_pem(f / "server.crt", cert), _write_pem(f / "server.key", key)
        cert, key = leaf(name("gangscope-test-admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH)
        self.admin_cert, self.admin_key = _write_pem(f / "admin.crt", cert), _write_pem(f / "admin.key", key)
        self._sa_private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = _write_pem(f / "sa.key", key_pem(self._sa_private))
        self.sa_pub = _write_pem(f / "sa.pub", self._sa_private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        return self

    def resign(self, token: str, **claims: Any) -> str:
        """``token`` (a JWT this server's TokenRequest issued) with ``claims`` changed, signed again
        with the service-account key: e.g. the same token as issued twenty minutes ago, expired."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        header, payload, _ = token.split(".")
        body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        body.update(claims)
        encoded = base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).rstrip(b"=").decode()
        signing_input = f"{header}.{encoded}".encode()
        signature = self._sa_private.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{encoded}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def token_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


# --- processes ------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child: be sent SIGTERM when the test process dies, however it dies (a CI timeout's
    SIGKILL included), so no etcd or kube-apiserver outlives the session."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Process:
    """A child process whose output goes to a log file (shown when it fails to start)."""

    name: str
    argv: list[str]
    log: Path
    port: int = 0  # the port it serves on
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


# --- the admin's REST client ------------------------------------------------------------------------


class ApiStatusError(Exception):
    """A request the real server refused: ``status`` and its ``metav1.Status`` body."""

    def __init__(self, method: str, path: str, status: int, body: Any):
        self.status, self.body = status, body
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: {status} {message}")


class AdminClient:
    """Synchronous REST calls as an identity of the test server (the admin by default). Test setup
    only; the code under test uses its own client."""

    def __init__(self, url: str, ca_file: str, *, cert: tuple[str, str] | None = None, token: str | None = None):
        import urllib3

        self.url = url
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = urllib3.PoolManager(ca_certs=ca_file or None, cert_file=cert[0] if cert else None,
                                         key_file=cert[1] if cert else None, retries=False,
                                         timeout=urllib3.Timeout(connect=5, read=60))
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}
        self._with_status: set[tuple[str, str]] = set()

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None,
                content_type: str = "application/json", accept: str = "application/json") -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self._auth, "Accept": accept, **({"Content-Type": content_type} if data is not None else {})}
        resp = self._http.request(method, url, body=data, headers=headers)
        try:
            doc = json.loads(resp.data) if resp.data else None
        except ValueError:
            doc = resp.data.decode(errors="replace")
        if resp.status >= 300:
            raise ApiStatusError(method, path, resp.status, doc)
        return doc

    def raw(self, method: str, path: str, params: dict[str, str] | None = None, accept: str = "application/json",
            preload: bool = True, body: Any = None) -> Any:
        """The urllib3 response itself (status, headers, body or stream); ``body`` is sent as JSON."""
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        sent = {"body": json.dumps(body).encode(), "headers": {**self._auth, "Accept": accept, "Content-Type": "application/json"}} \
            if body is not None else {"headers": {**self._auth, "Accept": accept}}
        return self._http.request(method, url, preload_content=preload, **sent)

    # resource paths from discovery, cached
    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from the server's discovery."""
        key = (api_version, kind)
        if key not in self._resources:
            doc = self.request("GET", f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}")
            plurals = {r["name"] for r in doc["resources"]}
            for r in doc["resources"]:
                if "/" not in r["name"]:
                    self._resources[(api_version, r["kind"])] = (r["name"], r["namespaced"])
                    if f"{r['name']}/status" in plurals:
                        self._with_status.add((api_version, r["kind"]))
            if key not in self._resources:
                raise KeyError(f"{api_version} {kind} is not served")
        return self._resources[key]

    def has_status(self, api_version: str, kind: str) -> bool:
        """Whether the kind has a status subresource (then status is written only through it)."""
        self.resource(api_version, kind)
        return (api_version, kind) in self._with_status

    def collection(self, api_version: str, kind: str, namespace: str | None = None) -> str:
        plural, namespaced = self.resource(api_version, kind)
        root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        return f"{root}/namespaces/{namespace}/{plural}" if namespaced and namespace else f"{root}/{plural}"

    def path(self, obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        return f"{self.collection(obj['apiVersion'], obj['kind'], meta.get('namespace'))}/{meta['name']}"

    # verbs
    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """POST the object. With a status subresource the server drops ``status``: see :meth:`apply_status`."""
        meta = obj["metadata"]
        body = dict(obj, metadata={k: v for k, v in meta.items() if k not in ("uid", "resourceVersion", "creationTimestamp")})
        return self.request("POST", self.collection(obj["apiVersion"], obj["kind"], meta.get("namespace")), body)

    def get(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.request("GET", self.path(obj))

    def list(self, api_version: str, kind: str, namespace: str | None = None, **params: str) -> dict[str, Any]:
        return self.request("GET", self.collection(api_version, kind, namespace), params=params or None)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the whole object (the main resource: status is ignored when it has a subresource)."""
        current = self.get(obj)
        body = dict(obj, metadata={**{k: v for k, v in obj["metadata"].items() if k not in ("uid", "creationTimestamp")},
                                   "resourceVersion": current["metadata"]["resourceVersion"]})
        return self.request("PUT", self.path(obj), body)

    def apply_status(self, obj: dict[str, Any], manager: str = KUEUE_ADMISSION) -> dict[str, Any]:
        """Write ``obj['status']`` the way Kueue does: a server-side apply patch to ``/status``,
        forcing ownership, as field manager ``manager``."""
        meta = obj["metadata"]
        patch = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                 "metadata": {"name": meta["name"], **({"namespace": meta["namespace"]} if meta.get("namespace") else {})},
                 "status": obj.get("status") or {}}
        return self.request("PATCH", self.path(obj) + "/status", patch, params={"fieldManager": manager, "force": "true"},
                            content_type="application/apply-patch+yaml")

    def delete(self, obj: dict[str, Any], grace_period: int | None = None) -> None:
        """DELETE; ``grace_period=0`` removes a pod bound to a node at once (as kubelet finally
        does), otherwise such a pod only gets a deletionTimestamp and waits for a kubelet."""
        params = {"gracePeriodSeconds": str(grace_period)} if grace_period is not None else None
        try:
            self.request("DELETE", self.path(obj), params=params)
        except ApiStatusError as e:
            if e.status != 404:
                raise

    def ensure(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create, or update if it exists (RBAC objects, namespaces)."""
        try:
            return self.create(obj)
        except ApiStatusError as e:
            if e.status != 409:
                raise
            return self.update(obj)


# --- CRDs ---------------------------------------------------------------------------------------------


def dropped_by_1_20(crd: dict[str, Any]) -> list[str]:
    """What kube-apiserver 1.20 drops from ``crd`` as unknown fields, silently (it accepts the CRD
    as it is): every ``x-kubernetes-validations`` (CEL rules, Kubernetes 1.25+) and
    ``selectableFields`` (1.30+). So Kueue's CEL rules are never enforced here."""
    found: list[str] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "x-kubernetes-validations":
                    found.append(f"{where} x-kubernetes-validations ({len(v)} rule{'s' if len(v) != 1 else ''})")
                elif k == "selectableFields":
                    found.append(f"{where} selectableFields")
                else:
                    walk(v, f"{where}.{k}" if k not in ("properties", "openAPIV3Schema", "schema", "items") else where)
        elif isinstance(node, list):
            for v in node:
                walk(v, f"{where}.{v['name']}" if isinstance(v, dict) and "name" in v and "served" in v else where)

    walk(crd["spec"], crd["metadata"]["name"])
    return found


def load_yaml(path: Path) -> list[dict[str, Any]]:
    """The documents of a YAML file, parsed by libyaml where PyYAML has it: the CRDs here are 4 MB,
    which the pure-Python parser takes over ten seconds to read."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(path.read_text(), Loader=loader) if d]


# --- the cluster ---------------------------------------------------------------------------------------


@dataclass
class ApiServer:
    """Another kube-apiserver process of the cluster (same etcd, same certificates and keys)."""

    process: Process
    port: int
    admin: AdminClient


class RealCluster:
    """etcd and kube-apiserver processes on loopback, with the admin client and helpers."""

    def __init__(self, bin_dir: Path, folder: Path):
        self.bin_dir = bin_dir
        self.folder = folder
        self.pki = Pki(folder).create()
        self.etcd_port = 0
        self.etcd: Process | None = None
        self.apiserver: Process | None = None
        self._uncached: ApiServer | None = None
        self._plain: ApiServer | None = None
        self._openapi_kinds: set[str] = set()  # the definitions the CRDs of install_crds add to /openapi/v2
        self.crds_dropped: list[str] = []
        self.admin: AdminClient

    @property
    def port(self) -> int:
        return self.apiserver.port if self.apiserver is not None else 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # lifecycle
    def start(self) -> RealCluster:
        for attempt in range(3):  # a free port can be taken by someone else between picking and binding
            self.etcd_port = free_port()
            peer = free_port()
            data = self.folder / f"etcd-{attempt}"
            self.etcd = Process("etcd", [
                str(self.bin_dir / "etcd"), "--name", "gangscope-test", "--data-dir", str(data),
                "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"gangscope-test=http://127.0.0.1:{peer}", "--unsafe-no-fsync",
                "--experimental-watch-progress-notify-interval", "1s", "--log-level", "warn", "--logger", "zap",
            ], self.folder / "etcd.log")
            self.etcd.start()
            if self._wait_etcd():
                break
            self.etcd.stop()
        else:
            raise RuntimeError(f"etcd did not start:\n{self.etcd.tail() if self.etcd else ''}")
        self.apiserver = self._start_apiserver("kube-apiserver", [])
        self.admin = self._admin(self.port)
        return self

    def _admin(self, port: int) -> AdminClient:
        return AdminClient(f"https://127.0.0.1:{port}", self.pki.ca_cert, cert=(self.pki.admin_cert, self.pki.admin_key))

    def _wait_etcd(self, timeout: float = 20) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.etcd is None or not self.etcd.alive():
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=1) as r:
                    if json.loads(r.read()).get("health") == "true":
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def _start_apiserver(self, name: str, extra: list[str]) -> Process:
        for _ in range(3):
            port = free_port()
            pki = self.pki
            proc = Process(name, [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}", f"--etcd-compaction-interval={COMPACTION_INTERVAL:g}s",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}", "--insecure-port=0",
                f"--tls-cert-file={pki.server_cert}", f"--tls-private-key-file={pki.server_key}",
                f"--client-ca-file={pki.ca_cert}", f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki.sa_pub}", f"--service-account-signing-key-file={pki.sa_key}",
                "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none",
                # No controller creates the default ServiceAccounts (see below for Priority).
                "--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount,Priority",
                # The native PodGroup and Workload (scheduling.k8s.io, Kubernetes 1.35+) are CRDs
                # here. A CRD cannot add versions to a group the server itself serves (its
                # PriorityClass handler answers every path of the group, with 404), so the
                # built-in group is off, and with it PriorityClasses and the Priority admission.
                "--runtime-config=scheduling.k8s.io/v1=false,scheduling.k8s.io/v1beta1=false",
                "--feature-gates=EfficientWatchResumption=true", "--profiling=false",
                f"--cert-dir={self.folder / 'cert-dir'}", "--logtostderr=true", "--v=1", *extra,
            ], self.folder / f"{name}.log", port)
            proc.start()
            if self._wait_ready(proc, port):
                return proc
            proc.stop()
            if "address already in use" not in proc.tail(200):
                break
        raise RuntimeError(f"{name} did not become ready:\n{proc.tail()}")

    def _wait_ready(self, proc: Process, port: int, timeout: float = 60) -> bool:
        ctx = ssl.create_default_context(cafile=self.pki.ca_cert)
        ctx.load_cert_chain(self.pki.admin_cert, self.pki.admin_key)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                return False
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=2, context=ctx) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        for proc in (self._uncached.process if self._uncached else None,
                     self._plain.process if self._plain else None, self.apiserver, self.etcd):
            if proc is not None:
                proc.stop()

    def uncached(self) -> ApiServer:
        """A second kube-apiserver on the same etcd, with ``--watch-cache=false`` (started once):
        its watches read etcd and expire when etcd compacts (see the module docstring)."""
        if self._uncached is None:
            proc = self._start_apiserver("kube-apiserver-uncached", ["--watch-cache=false"])
            self._uncached = ApiServer(proc, proc.port, self._admin(proc.port))
            self._wait_openapi(self._uncached.admin, self._openapi_kinds)
        return self._uncached

    def plain(self) -> ApiServer:
        """A second kube-apiserver with its own store (``--etcd-prefix``, same etcd) and the
        built-in ``scheduling.k8s.io`` group on, as every real cluster has it (started once): the
        objects of ``deploy/`` include a PriorityClass, which the main server cannot serve beside
        the native stand-in CRDs of that group. Nothing of the main server is visible to it."""
        if self._plain is None:
            proc = self._start_apiserver("kube-apiserver-plain", [
                "--etcd-prefix=/gangscope-plain", "--runtime-config=scheduling.k8s.io/v1=true,scheduling.k8s.io/v1beta1=true"])
            self._plain = ApiServer(proc, proc.port, self._admin(proc.port))
        return self._plain

    # setup
    def install_crds(self, files: Iterable[str] = CRD_FILES, admin: AdminClient | None = None,
                     versions: tuple[str, ...] | None = None) -> None:
        """CRDs of tests/fixtures/realapi/ (by default every one the collector reads), Established
        and in discovery before returning; into another server of the cluster with ``admin``; with
        ``versions``, each CRD serves only those of its versions (as a later release that dropped
        the others does: Kueue 0.20 serves only v1beta2), the first one kept storing if the
        storage version went."""
        admin = admin or self.admin
        names = []
        for file in files:
            for doc in load_yaml(FIXTURES / file):
                if versions is not None:
                    kept = [v for v in doc["spec"]["versions"] if v["name"] in versions]
                    if not any(v["storage"] for v in kept):
                        kept[0]["storage"] = True
                    doc["spec"]["versions"] = kept
                self.crds_dropped += dropped_by_1_20(doc)
                admin.ensure(doc)
                names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + 30
        for name in names:
            while True:
                crd = admin.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not established: {crd.get('status')}")
                time.sleep(0.1)
        # Discovery of the new groups lags behind Established by a moment.
        for crd_name in names:
            plural, group = crd_name.split(".", 1)
            version = next(v["name"] for v in admin.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}")["spec"]["versions"] if v["served"])
            until(lambda: self._served(admin, group, version, plural), 30, f"{crd_name} in discovery")
        # Then the server merges each CRD's schema into its OpenAPI document, in the background
        # (apiextensions-apiserver pkg/controller/openapi): for these CRDs about ten seconds of CPU
        # after the last is served, which on a 2-core machine starved the first tests' requests past
        # their timeouts. Wait until the document has every kind (its definitions are named
        # <reversed group>.<version>.<kind>).
        wanted = set()
        for crd_name in names:
            crd = admin.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}")
            prefix = ".".join(reversed(crd["spec"]["group"].split(".")))
            wanted |= {f"{prefix}.{v['name']}.{crd['spec']['names']['kind']}" for v in crd["spec"]["versions"] if v["served"]}
        if admin is self.admin:
            self._openapi_kinds |= wanted
        self._wait_openapi(admin, wanted)

    @staticmethod
    def _wait_openapi(admin: AdminClient, kinds: set[str]) -> None:
        """Until the server's OpenAPI document has the schemas of ``kinds`` (a server starting on
        a store that holds CRDs merges them likewise, in the background, once it is ready)."""
        def merged() -> bool:  # a substring test: the document is megabytes of JSON
            data = admin.raw("GET", "/openapi/v2").data
            return all(f'"{name}":'.encode() in data for name in kinds)

        until(merged, 120, "the CRDs' schemas in the OpenAPI document", poll=2.0)

    @staticmethod
    def _served(admin: AdminClient, group: str, version: str, plural: str) -> bool:
        try:
            doc = admin.request("GET", f"/apis/{group}/{version}")
        except ApiStatusError:
            return False
        return any(r["name"] == plural for r in doc["resources"])

    def apply_manifests(self, path: Path) -> None:
        """Create (or update) every object of a YAML file, e.g. the project's RBAC in deploy/."""
        for obj in load_yaml(path):
            self.admin.ensure(obj)

    def namespace(self, name: str) -> str:
        try:
            self.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        except ApiStatusError as e:
            if e.status != 409:
                raise
        return name

    def service_account(self, namespace: str, name: str, *, cluster_roles: Iterable[str] = (),
                        rules: list[dict[str, Any]] | None = None, namespace_rules: list[dict[str, Any]] | None = None) -> None:
        """A ServiceAccount bound to existing ClusterRoles, to a new ClusterRole of ``rules``, and to a
        new Role of ``namespace_rules`` in its own namespace."""
        self.namespace(namespace)
        self.admin.ensure({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        roles = list(cluster_roles)
        if rules is not None:
            role = f"test-{namespace}-{name}"
            self.admin.ensure({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                               "metadata": {"name": role}, "rules": rules})
            roles.append(role)
        for role in roles:
            self.admin.ensure({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                               "metadata": {"name": f"test-{namespace}-{name}-{role}"}, "subjects": subject,
                               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}})
        if namespace_rules is not None:
            self.admin.ensure({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                               "metadata": {"name": f"test-{name}", "namespace": namespace}, "rules": namespace_rules})
            self.admin.ensure({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                               "metadata": {"name": f"test-{name}", "namespace": namespace}, "subjects": subject,
                               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"test-{name}"}})

    def token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A token of the ServiceAccount from the TokenRequest API (``kubectl create token``)."""
        review = self.admin.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                                    {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                     "spec": {"expirationSeconds": seconds}})
        return str(review["status"]["token"])

    def expired_token(self, namespace: str, name: str) -> str:
        """A token of the ServiceAccount as TokenRequest issued it twenty minutes ago, now expired
        (TokenRequest cannot issue one shorter than ten minutes)."""
        token = self.token(namespace, name, 600)
        now = int(time.time())
        return self.pki.resign(token, iat=now - 1200, nbf=now - 1200, exp=now - 600)

    def kubeconfig(self, path: Path, token: str | None = None, *, port: int | None = None) -> str:
        """A kubeconfig for this server (or a relay on ``port``): a token user, or the admin's certificate."""
        user: dict[str, Any] = {"token": token} if token else {
            "client-certificate": self.pki.admin_cert, "client-key": self.pki.admin_key}
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "real",
               "clusters": [{"name": "real", "cluster": {"server": f"https://127.0.0.1:{port or self.port}",
                                                         "certificate-authority": self.pki.ca_cert}}],
               "users": [{"name": "real", "user": user}],
               "contexts": [{"name": "real", "context": {"cluster": "real", "user": "real"}}]}
        path.write_text(yaml.safe_dump(doc))
        return str(path)

    def wait_compacted(self, api_version: str, kind: str, resource_version: str, timeout: float = 30) -> None:
        """Until etcd has compacted ``resource_version`` away: an uncached watch from it gets 410."""
        other = self.uncached()
        path = other.admin.collection(api_version, kind)

        def gone() -> bool:
            resp = other.admin.raw("GET", path, {"watch": "true", "resourceVersion": resource_version, "timeoutSeconds": "1"})
            first = resp.data.split(b"\n", 1)[0]
            return resp.status == 410 or b'"code":410' in first

        until(gone, timeout, f"etcd compaction past {resource_version}")



class Writer:
    """What one test writes, as the controllers would (status through /status where the kind has
    the subresource), deleted again when the test ends (:meth:`cleanup`). Namespaces stay: without
    a namespace controller a deleted namespace never finishes terminating."""

    def __init__(self, cluster: RealCluster, manager: str = KUEUE_ADMISSION):
        self.admin = cluster.admin
        self.manager = manager
        self._written: dict[str, dict[str, Any]] = {}

    def track(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._written[self.admin.path(obj)] = obj
        return obj

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        created = self.track(self.admin.create(obj))
        if _has_status(obj) and self.admin.has_status(obj["apiVersion"], obj["kind"]):
            created = self.admin.apply_status(obj, self.manager)
        return created

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        updated = self.admin.update(obj)
        if _has_status(obj) and self.admin.has_status(obj["apiVersion"], obj["kind"]):
            updated = self.admin.apply_status(obj, self.manager)
        return updated

    def apply_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.admin.apply_status(obj, self.manager)

    def delete(self, obj: dict[str, Any], grace_period: int | None = None) -> None:
        self.admin.delete(obj, grace_period)
        if grace_period == 0 or obj["kind"] != "Pod":
            self._written.pop(self.admin.path(obj), None)

    def cleanup(self) -> None:
        for obj in reversed(list(self._written.values())):
            self.admin.delete(obj, 0)
        self._written.clear()


def _has_status(obj: dict[str, Any]) -> bool:
    """Whether ``obj`` carries a status worth writing (controllers write none before they act)."""
    status = obj.get("status")
    return isinstance(status, dict) and any(v not in (None, [], {}, "") for v in status.values())


def until(predicate: Any, timeout: float, what: str, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(poll)


# --- a network between the code under test and the server ----------------------------------------------


class Relay:
    """A TCP relay on loopback in front of the API server, which a test can hold (bytes from
    clients wait, new connections wait) and cut (every connection reset): a network partition, for
    the watch-resume and 410 cases. TLS passes through untouched (the certificate is for 127.0.0.1)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = 0
        self.connections = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> Relay:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def hold(self) -> None:
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def cut(self) -> int:
        n = len(self._open)
        for w in list(self._open):
            w.transport.abort()
        self._open.clear()
        return n

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self.connections += 1
        self._open.add(writer)
        try:
            await self._flowing.wait()
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            self._open.discard(writer)
            return
        self._open.add(up_writer)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, gated: bool) -> None:
            try:
                while data := await src.read(65536):
                    if gated:
                        await self._flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        try:
            await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))
        finally:
            self._open.discard(writer)
            self._open.discard(up_writer)


def served_version(cluster: RealCluster, r: Resource) -> str | None:
    """The version the collector's discovery picks for ``r``: the first that serves its kind."""
    if not r.group:
        return "v1"
    for v in r.versions:
        try:
            cluster.admin.resource(f"{r.group}/{v}", r.kind)
        except (KeyError, ApiStatusError):  # the kind, or the whole version, not served
            continue
        return v
    return None


def started_cluster(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[RealCluster, Path]:
    """A real API server in a fresh folder ``name``, started, and that folder: skipped where
    :data:`SKIP_ENV` is set, failed (never skipped: CI must not pass without it) where the
    binaries are missing."""
    if os.environ.get(SKIP_ENV):
        pytest.skip(f"{SKIP_ENV} is set: no real API server on this machine")
    bin_dir = binaries()
    if isinstance(bin_dir, RealApiUnavailable):
        pytest.fail(str(bin_dir), pytrace=False)
    folder = tmp_path_factory.mktemp(name)
    return RealCluster(bin_dir, folder).start(), folder
