"""``reports-pipeline serve`` as the chart runs it in a pod: it reads the
aggregator's front-proxy CA from ``kube-system/extension-apiserver-authentication``
(here a stand-in kube-apiserver on loopback, with a service account's token and
CA), accepts only clients with a certificate that CA signed, and answers the
kubelet's probes on a plain-HTTP port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import ssl
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from apiserver.access.tls import ensure_certificate
from launcher.delegation.frontproxy import (
    CONFIGMAP,
    cluster_from_env,
    front_proxy_ca,
    keep_trusting,
)
from tests.certs import issue, pem, write
from tests.e2e.conftest import BIN
from tests.kafka import running_broker

TOKEN = "service-account-token"


class StandIn:
    """The kube-apiserver's ConfigMap endpoint, serving whatever CA is set."""

    def __init__(self, ca_pem: str):
        self.ca_pem = ca_pem
        self.reads = 0

    def app(self) -> Starlette:
        async def configmap(request: Request) -> Response:
            if request.headers.get("authorization") != f"Bearer {TOKEN}":
                return JSONResponse({"kind": "Status", "code": 401}, status_code=401)
            self.reads += 1
            return JSONResponse({"kind": "ConfigMap", "apiVersion": "v1",
                                 "metadata": {"name": "extension-apiserver-authentication",
                                              "namespace": "kube-system"},
                                 "data": {"requestheader-client-ca-file": self.ca_pem,
                                          "requestheader-username-headers": '["X-Remote-User"]'}})
        return Starlette(routes=[Route(CONFIGMAP, configmap)])


@contextlib.asynccontextmanager
async def kube_apiserver(stand_in: StandIn, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """The stand-in on loopback, and the environment a pod would have."""
    cert, key = ensure_certificate(tmp_path / "apiserver-tls")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    (account / "ca.crt").write_bytes(cert.read_bytes())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(stand_in.app(), ssl_certfile=str(cert),
                                           ssl_keyfile=str(key), log_level="warning",
                                           lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield {"KUBERNETES_SERVICE_HOST": "127.0.0.1",
               "KUBERNETES_SERVICE_PORT": str(sock.getsockname()[1]),
               "REPORTS_SERVICE_ACCOUNT_DIR": str(account)}
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_broker(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


async def test_serve_trusts_the_clusters_front_proxy_ca(kafka: str, tmp_path: Path) -> None:
    front_proxy = issue("front-proxy-ca")
    aggregator = issue("front-proxy-client", ca=front_proxy)
    stranger = issue("someone", ca=issue("another-ca"))
    serving_cert, serving_key = ensure_certificate(tmp_path / "tls")
    for name, issued in (("aggregator", aggregator), ("stranger", stranger)):
        write(issued, tmp_path, name)
    stand_in = StandIn(pem(front_proxy[0]))
    async with kube_apiserver(stand_in, tmp_path) as pod_env:
        env = {**os.environ, **pod_env, "KAFKA_BOOTSTRAP": kafka,
               "CLICKHOUSE_URL": f"chdb://{tmp_path / 'clickhouse'}",
               "REPORTS_TOPIC_PREFIX": f"pod-{uuid.uuid4().hex[:8]}"}
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "reports-pipeline"), "serve", "--host", "127.0.0.1", "--port", "0",
            "--health-port", "0", "--data-dir", str(tmp_path / "data"),
            "--tls-cert", str(serving_cert), "--tls-key", str(serving_key),
            "--front-proxy-ca-from-cluster", env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        try:
            output = ""
            async with asyncio.timeout(90):
                while "serving on" not in output:
                    line = (await proc.stdout.readline()).decode()
                    assert line, f"serve exited:\n{output}"
                    output += line
            found = re.search(r"serving on (https://\S+) \(probes: (http://\S+)/readyz\)",
                              output)
            assert found, output
            frontend, probes = found.groups()
            assert stand_in.reads == 1
            assert (tmp_path / "data" / "front-proxy-ca.crt").read_text() == stand_in.ca_pem

            async with httpx.AsyncClient() as plain:
                assert (await plain.get(f"{probes}/readyz")).status_code == 200
                assert (await plain.get(f"{probes}/livez")).text == "ok"

            def client(name: str | None) -> httpx.AsyncClient:
                context = ssl.create_default_context(cafile=str(serving_cert))
                if name:
                    context.load_cert_chain(tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
                return httpx.AsyncClient(base_url=frontend, verify=context, timeout=10,
                                         headers={"X-Remote-User": "kyverno"})

            async with client("aggregator") as api:
                response = await api.get("/apis/wgpolicyk8s.io/v1alpha2")
                assert response.status_code == 200, response.text
                assert json.loads(response.text)["kind"] == "APIResourceList"
            async with client("stranger") as api:
                with pytest.raises((httpx.ConnectError, httpx.ReadError,
                                    httpx.RemoteProtocolError)):
                    await api.get("/apis/wgpolicyk8s.io/v1alpha2")
            # without a certificate, the headers are not trusted
            async with client(None) as api:
                refused = await api.get("/apis/wgpolicyk8s.io/v1alpha2")
                assert refused.status_code == 401 and refused.json()["kind"] == "Status"
        finally:
            proc.terminate()
            await proc.wait()


async def test_a_rotated_front_proxy_ca_is_trusted_without_restart(tmp_path: Path) -> None:
    old, new = issue("front-proxy-ca"), issue("front-proxy-ca-2")
    stand_in = StandIn(pem(old[0]))
    async with kube_apiserver(stand_in, tmp_path) as pod_env:
        cluster = cluster_from_env(pod_env)
        first = await front_proxy_ca(cluster)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_verify_locations(cadata=first)
        keeping = asyncio.create_task(keep_trusting(cluster, context, first, every=0.05))
        try:
            stand_in.ca_pem = pem(new[0])
            async with asyncio.timeout(10):
                while len(context.get_ca_certs()) < 2:
                    await asyncio.sleep(0.05)
        finally:
            keeping.cancel()
        subjects = {c["subject"][0][0][1] for c in context.get_ca_certs()}
        assert subjects == {"front-proxy-ca", "front-proxy-ca-2"}


def test_outside_a_pod_the_mistake_is_named() -> None:
    from launcher.delegation.frontproxy import ClusterError
    with pytest.raises(ClusterError, match="give --client-ca instead"):
        cluster_from_env({})
