"""Delegated authentication and authorization, as the aggregator's path runs
them: a front-proxy client certificate with X-Remote-User/-Group, or a bearer
token checked with a TokenReview; every request checked with a
SubjectAccessReview at a small HTTPS stand-in for the kube-apiserver's review
endpoints (the only parts of it involved)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from apiserver.access.authn import RequestHeaders
from apiserver.access.tls import ensure_certificate
from apiserver.http.app import Access
from kubeclient import target
from launcher.delegation.reviews import ACCESS_REVIEWS, TOKEN_REVIEWS, Reviews
from launcher.system import System, https_config
from pipeline.model.resources import RESOURCES
from tests.certs import issue, write
from tests.helpers import collection_path, report

pytestmark = pytest.mark.integration
POLR, CPOLR = RESOURCES[0], RESOURCES[1]
SERVICE_TOKEN = "frontend-service-account"


class KubeApiserver:
    """TokenReview: one user's token. SubjectAccessReview: group team-a may do
    anything with policyreports in namespace team-a, nothing else."""

    def __init__(self) -> None:
        self.access_reviews: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        async def token_review(request: Request) -> JSONResponse:
            assert request.headers["authorization"] == f"Bearer {SERVICE_TOKEN}"
            token = (await request.json())["spec"]["token"]
            if token == "alice-token":
                return JSONResponse({"status": {"authenticated": True, "user": {
                    "username": "alice", "groups": ["team-a", "system:authenticated"]}}})
            return JSONResponse({"status": {"authenticated": False}})

        async def access_review(request: Request) -> JSONResponse:
            spec = (await request.json())["spec"]
            self.access_reviews.append(spec)
            attrs = spec.get("resourceAttributes") or {}
            allowed = ("team-a" in spec["groups"] and attrs.get("namespace") == "team-a"
                       and attrs.get("resource") == "policyreports"
                       and attrs.get("group") == "wgpolicyk8s.io")
            status: dict[str, Any] = {"allowed": allowed}
            if not allowed:
                status["reason"] = "no RBAC policy matched"
            return JSONResponse({"status": status})

        return Starlette(routes=[Route(TOKEN_REVIEWS, token_review, methods=["POST"]),
                                 Route(ACCESS_REVIEWS, access_review, methods=["POST"])])


@contextlib.asynccontextmanager
async def serving(app: Any, sock: socket.socket, **tls: Any) -> AsyncIterator[uvicorn.Server]:
    config = tls.pop("config", None) or uvicorn.Config(app, log_level="warning",
                                                       lifespan="off", **tls)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task
        await asyncio.sleep(0.01)
    try:
        yield server
    finally:
        server.should_exit = True
        await task


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


async def test_delegated_authentication_and_authorization(
        kafka: str, data_dir: Path, make_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the stand-in kube-apiserver, and a kubeconfig for it
    api_cert, api_key = ensure_certificate(tmp_path / "kube-apiserver")
    kube = KubeApiserver()
    kube_sock = listening()
    kubeconfig = tmp_path / "review.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {
            "server": f"https://127.0.0.1:{kube_sock.getsockname()[1]}",
            "certificate-authority-data": base64.b64encode(api_cert.read_bytes()).decode()}}],
        "users": [{"name": "u", "user": {"token": SERVICE_TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    reviews = Reviews(await target(kubeconfig, {}))
    # the aggregator's front-proxy CA and its client certificate
    front_proxy = issue("front-proxy-ca")
    ca_file, _ = write(front_proxy, tmp_path, "front-proxy-ca")
    write(issue("front-proxy-client", ca=front_proxy), tmp_path, "aggregator")

    access = Access(request_headers=RequestHeaders(allowed_names=("front-proxy-client",),
                                                   uid_headers=("X-Remote-Uid",)),
                    review_token=reviews.token, review_access=reviews.access,
                    cache_seconds=30)
    system = System(make_settings(), data_dir, token=False, access=access)
    await system.start()
    cert, key = ensure_certificate(tmp_path / "serving")
    frontend_sock = listening()
    frontend = f"https://127.0.0.1:{frontend_sock.getsockname()[1]}"
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(frontend_sock.close)
        stack.callback(kube_sock.close)
        stack.push_async_callback(system.stop)
        stack.push_async_callback(reviews.close)
        kube_server = await stack.enter_async_context(contextlib.AsyncExitStack())
        await kube_server.enter_async_context(serving(
            kube.app(), kube_sock, ssl_certfile=str(api_cert), ssl_keyfile=str(api_key)))
        await stack.enter_async_context(serving(None, frontend_sock, config=https_config(
            system.app, cert=cert, key=key, client_ca=ca_file)))  # type: ignore[arg-type]
        context = ssl.create_default_context(cafile=str(cert))
        context.load_cert_chain(tmp_path / "aggregator.crt", tmp_path / "aggregator.key")
        alice = httpx.AsyncClient(base_url=frontend, verify=context, timeout=15, headers={
            "X-Remote-User": "alice", "X-Remote-Group": "team-a", "X-Remote-Uid": "a-1"})
        async with alice:
            team_a, team_b = collection_path(POLR, "team-a"), collection_path(POLR, "team-b")
            assert (await alice.get(team_a)).status_code == 200
            created = await alice.post(team_a, json=report(POLR, "r", "team-a"))
            assert created.status_code == 201, created.text

            denied = await alice.post(team_b, json=report(POLR, "r", "team-b"))
            assert denied.status_code == 403
            assert denied.json()["message"] == (
                'policyreports.wgpolicyk8s.io is forbidden: User "alice" cannot create'
                ' resource "policyreports" in API group "wgpolicyk8s.io" in the namespace'
                ' "team-b": no RBAC policy matched')
            assert (await alice.get(team_b)).status_code == 403
            watched = await alice.get(team_b, params={"watch": "true"})
            assert watched.status_code == 403
            assert "cannot watch resource" in watched.json()["message"]
            cluster = await alice.get(collection_path(CPOLR, ""))
            assert cluster.status_code == 403
            assert "at the cluster scope" in cluster.json()["message"]
            deleting = await alice.delete(f"{team_a}/r")
            assert deleting.status_code == 200

            # what the authorizer was asked, and that its answers are reused
            asked = kube.access_reviews[0]
            # k8s.io/apiserver adds system:authenticated; the uid comes along
            assert asked["user"] == "alice" and asked["uid"] == "a-1"
            assert asked["groups"] == ["team-a", "system:authenticated"]
            assert asked["resourceAttributes"] == {
                "verb": "list", "group": "wgpolicyk8s.io", "version": "v1alpha2",
                "resource": "policyreports", "namespace": "team-a", "name": ""}
            before = len(kube.access_reviews)
            for _ in range(3):
                assert (await alice.get(team_a)).status_code == 200
            assert len(kube.access_reviews) == before

        # a bearer token, checked with a TokenReview, without a client certificate
        plain = ssl.create_default_context(cafile=str(cert))
        async with httpx.AsyncClient(base_url=frontend, verify=plain, timeout=15) as anon:
            token = {"Authorization": "Bearer alice-token"}
            assert (await anon.get(team_a, headers=token)).status_code == 200
            assert (await anon.get(team_b, headers=token)).status_code == 403
            assert (await anon.get(team_a, headers={
                "Authorization": "Bearer wrong"})).status_code == 401
            # headers without the front-proxy certificate are not trusted
            assert (await anon.get(team_a, headers={
                "X-Remote-User": "alice", "X-Remote-Group": "team-a"})).status_code == 401
            assert (await anon.get("/healthz")).status_code == 200

        # the authorizer down: 503, never an allow
        await kube_server.aclose()
        async with httpx.AsyncClient(base_url=frontend, verify=context, timeout=15,
                                     headers={"X-Remote-User": "bob",
                                              "X-Remote-Group": "team-a"}) as bob:
            down = await bob.get(team_a)
            assert down.status_code == 503 and down.headers["retry-after"] == "1"
            assert down.json()["reason"] == "ServiceUnavailable"
