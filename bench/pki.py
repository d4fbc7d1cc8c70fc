"""Certificates and kubeconfigs of a control plane the benchmark or the tests
start: a CA that issues serving and client certificates, and a kubeconfig
that names one of them."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apiserver.access.tls import subject_alternative_name

Key = ec.EllipticCurvePrivateKey


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: Key | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Authority:
    """A CA that issues serving and client certificates into ``directory``."""

    def __init__(self, directory: Path, name: str):
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.now(UTC)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(now - timedelta(minutes=5))
                     .not_valid_after(now + timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                     .add_extension(x509.KeyUsage(False, False, False, False, False, True, True,
                                                  False, False), True)
                     .sign(self.key, hashes.SHA256()))
        self.file = directory / f"{name}.crt"
        self.file.write_bytes(_pem(self.cert))

    @property
    def pem(self) -> bytes:
        return _pem(self.cert)

    def issue(self, name: str, *, organizations: Sequence[str] = (),
              hosts: Sequence[str] = ()) -> tuple[Path, Path]:
        """(cert, key) files: a client certificate, or a serving one for ``hosts``."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        subject = x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.now(UTC)
        builder = (x509.CertificateBuilder().subject_name(subject)
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - timedelta(minutes=5))
                   .not_valid_after(now + timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
                   .add_extension(x509.ExtendedKeyUsage(
                       [ExtendedKeyUsageOID.SERVER_AUTH if hosts
                        else ExtendedKeyUsageOID.CLIENT_AUTH]), False))
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [subject_alternative_name(h) for h in hosts]), False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_file = self.directory / f"{name.replace(':', '-')}.crt"
        key_file = cert_file.with_suffix(".key")
        cert_file.write_bytes(_pem(cert))
        key_file.write_bytes(key_pem(key))
        return cert_file, key_file


def kubeconfig(path: Path, *, server: str, ca: bytes, cert: Path | None = None,
               key: Path | None = None, token: str | None = None,
               tls_server_name: str | None = None) -> Path:
    user: dict[str, str] = {"token": token} if token else {
        "client-certificate": str(cert), "client-key": str(key)}
    cluster = {"server": server, "certificate-authority-data": base64.b64encode(ca).decode()}
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path
