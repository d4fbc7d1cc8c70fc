"""Certificates for tests: CAs and the client certificates they sign."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Issued = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def issue(name: str, *, ca: Issued | None = None) -> Issued:
    """A CA (no ``ca``) or a client certificate it signs."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_cert, issuer_key = ca if ca else (None, key)
    now = datetime.now(UTC)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - timedelta(minutes=5))
               .not_valid_after(now + timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None),
                              critical=True))
    return builder.sign(issuer_key, hashes.SHA256()), key


def write(issued: Issued, directory: Path, name: str) -> tuple[Path, Path]:
    """(cert, key) files."""
    cert, key = issued
    cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    cert_file.write_text(pem(cert))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file
