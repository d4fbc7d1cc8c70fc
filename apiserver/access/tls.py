"""A self-signed serving certificate and a kubeconfig that trusts it."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def ensure_token(directory: Path) -> str:
    """A bearer token for the generated kubeconfig, made once and then reused."""
    token_file = directory / "token"
    if not token_file.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(token_file, secrets.token_urlsafe(32).encode())
    return token_file.read_text().strip()


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (atomically) readable by its owner only,
    from the first byte on."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)


#: names every self-signed serving certificate carries, as k8s.io/apiserver's
#: ``--cert-dir`` certificate does
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def serving_names(host: str, *, interfaces: Sequence[str] = (), hostname: str = "") -> list[str]:
    """The DNS names and addresses a server listening on ``host`` is reached
    by: loopback, the host itself, and (listening on every interface) each
    interface's address and the machine's name. Pure."""
    names = list(LOCAL_NAMES)
    wildcard = host in ("", "0.0.0.0", "::")
    for name in ([*interfaces, hostname] if wildcard else [host]):
        if name and name not in names:
            names.append(name)
    return names


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def subject_alternative_name(name: str) -> x509.GeneralName:
    """An address or a DNS name, as a certificate names it."""
    return x509.IPAddress(ipaddress.ip_address(name)) if _is_address(name) \
        else x509.DNSName(name)


def certificate_names(cert_file: Path) -> set[str]:
    """The DNS names and addresses a certificate is valid for."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {*san.get_values_for_type(x509.DNSName),
            *(str(a) for a in san.get_values_for_type(x509.IPAddress))}


def ensure_certificate(directory: Path, names: Sequence[str] = LOCAL_NAMES
                       ) -> tuple[Path, Path]:
    """(cert, key) files under ``directory``, self-signed for ``names``: made
    once and reused while they cover every name, made again when a name is
    missing (a server given another ``--host``)."""
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    if cert_file.exists() and key_file.exists() and set(names) <= certificate_names(cert_file):
        return cert_file, key_file
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "reports-pipeline")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(
            [subject_alternative_name(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    write_private(key_file, key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_file, key_file


def write_kubeconfig(path: Path, *, server: str, cert_file: Path, token: str) -> None:
    """A kubeconfig for ``server`` that trusts ``cert_file``; when the
    certificate does not name the server's address (one given for the
    cluster's Service names), it checks one of the names it does carry."""
    ca = base64.b64encode(cert_file.read_bytes()).decode()
    cluster = {"server": server, "certificate-authority-data": ca}
    host = urlsplit(server).hostname or ""
    names = certificate_names(cert_file)
    if host not in names:
        dns = sorted(n for n in names if not _is_address(n))
        if dns:
            cluster["tls-server-name"] = dns[0]
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "reports-pipeline",
        "clusters": [{"name": "reports-pipeline", "cluster": cluster}],
        "users": [{"name": "reports-pipeline", "user": {"token": token}}],
        "contexts": [{"name": "reports-pipeline",
                      "context": {"cluster": "reports-pipeline", "user": "reports-pipeline",
                                  "namespace": "default"}}],
    }
    # it holds the bearer token
    write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
