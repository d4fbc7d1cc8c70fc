"""The aggregation-layer path: the frontend as the kube-apiserver reaches it,
over TLS with the aggregator's front-proxy client certificate and the
authenticated user in ``X-Remote-User``."""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import ssl
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiserver.access.tls import ensure_certificate
from launcher.system import System, https_config
from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR = RESOURCES[0]


def _issue(name: str, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None, ca: bool
           ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = issuer or (subject, key)
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .sign(issuer_key, hashes.SHA256()))
    return cert, key


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None
           ) -> None:
    data = cert.public_bytes(serialization.Encoding.PEM)
    if key is not None:
        data += key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    path.write_bytes(data)


async def test_front_proxy_client_certificate_and_remote_user(data_dir: Path, make_settings,
                                                              tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ca_cert, ca_key = _issue("front-proxy-ca", None, True)
    client_cert, client_key = _issue("front-proxy-client", (ca_cert.subject, ca_key), False)
    _write(tmp_path / "ca.crt", ca_cert)
    _write(tmp_path / "client.pem", client_cert, client_key)
    serving_cert, serving_key = ensure_certificate(tmp_path / "serving")

    system = System(make_settings(), data_dir, token=False)
    await system.start()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    assert system.app is not None
    server = uvicorn.Server(https_config(system.app, cert=serving_cert, key=serving_key,
                                         client_ca=tmp_path / "ca.crt"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        base = f"https://127.0.0.1:{port}"
        trust = ssl.create_default_context(cafile=str(serving_cert))
        aggregator = ssl.create_default_context(cafile=str(serving_cert))
        aggregator.load_cert_chain(str(tmp_path / "client.pem"))
        path = collection_path(POLR, "ns")
        async with httpx.AsyncClient(base_url=base, verify=aggregator) as client:
            headers = {"X-Remote-User": "system:serviceaccount:kyverno:reports-controller",
                       "X-Remote-Group": "system:serviceaccounts"}
            r = await client.post(path, json=report(POLR, "via-aggregator", "ns"),
                                  headers=headers)
            assert r.status_code == 201, r.text
            assert (await client.get(f"{path}/via-aggregator", headers=headers)).status_code \
                == 200
            anonymous = await client.get(path)
            assert anonymous.status_code == 401 and anonymous.json()["reason"] == "Unauthorized"
        async with httpx.AsyncClient(base_url=base, verify=trust) as stranger:
            # without the front-proxy's certificate the headers are not trusted
            refused = await stranger.get(path, headers={"X-Remote-User": "mallory"})
            assert refused.status_code == 401 and refused.json()["kind"] == "Status"
    finally:
        server.should_exit = True
        await task
        sock.close()
        await system.stop()
