"""A throwaway CA and a server certificate for the simulated API server (the demo's HTTPS).

Why HTTPS at all on loopback: kubectl (client-go) does not send a kubeconfig's bearer token to
an ``http://`` server, so a demo served over plain HTTP answers every ``kubectl`` call with 401
while the demo's own collector and agents (which do send it) work. Served over HTTPS with this
CA in the kubeconfig, ``kubectl --kubeconfig <the demo's kubeconfig>`` authenticates with the
same token as they do, and the server still accepts that token only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerPki:
    """The files :func:`create` wrote: the CA a kubeconfig trusts, and the server's pair."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        """The API server's TLS context (no client certificates asked: the token authenticates)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.server_cert), str(self.server_key))
        return ctx


def create(folder: Path, host: str = "127.0.0.1", days: int = 7) -> ServerPki:
    """An EC P-256 CA and a server certificate for ``host`` (an address or a name) and localhost,
    valid ``days``; the keys are written readable by their owner only."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write(path: Path, data: bytes, private: bool = False) -> Path:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("gangscope-demo-ca")).issuer_name(name("gangscope-demo-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    sans: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    try:
        address = ipaddress.ip_address(host)
        if str(address) != "127.0.0.1":
            sans.append(x509.IPAddress(address))
    except ValueError:
        if host != "localhost":
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name("gangscope-demo-apiserver")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return ServerPki(
        ca_cert=write(folder / "ca.crt", ca.public_bytes(pem)),
        server_cert=write(folder / "apiserver.crt", cert.public_bytes(pem)),
        server_key=write(folder / "apiserver.key", key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), private=True),
    )
