"""The kube-apiserver's review endpoints, as a delegating server uses them:
TokenReview (``--authentication-kubeconfig``) and SubjectAccessReview
(``--authorization-kubeconfig``), reached with a kubeconfig file or, given
``in-cluster``, the pod's service account. aiohttp; two POSTs do not call for
a Kubernetes client library."""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from apiserver.authn import ReviewUnavailable, UserInfo
from apiserver.authz import review_spec
from apiserver.requestinfo import Attributes
from launcher.incluster import Cluster, ClusterError

IN_CLUSTER = "in-cluster"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass
class Endpoint:
    server: str
    context: ssl.SSLContext
    token: str = ""
    token_file: Path | None = None
    #: the name the server's certificate carries, when not the address's
    tls_server_name: str | None = None

    def bearer(self) -> str:
        if self.token_file is not None:
            return self.token_file.read_text().strip()  # read each time: tokens rotate
        return self.token


def _pem_file(data: str) -> str:
    fd, name = tempfile.mkstemp(suffix=".pem")
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data))
    return name


def endpoint(source: str, env: Mapping[str, str]) -> Endpoint:
    """The kube-apiserver named by a kubeconfig file, or ``in-cluster``."""
    if source == IN_CLUSTER:
        cluster = Cluster.from_env(env)
        return Endpoint(cluster.server, ssl.create_default_context(cafile=str(cluster.ca_file)),
                        token_file=cluster.token_file)
    try:
        config = yaml.safe_load(Path(source).read_text())
        current = config.get("current-context") or config["contexts"][0]["name"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == current)
        cluster = next(c["cluster"] for c in config["clusters"]
                       if c["name"] == context["cluster"])
        user: dict[str, Any] = next((u["user"] for u in config.get("users", [])
                                     if u["name"] == context.get("user")), {})
    except (OSError, KeyError, StopIteration, TypeError, yaml.YAMLError) as err:
        raise ClusterError(f"cannot use the kubeconfig {source}: {err!r}") from err
    base = Path(source).parent
    tls = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        tls.load_verify_locations(cadata=base64.b64decode(
            cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        tls.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
    cert, key = user.get("client-certificate"), user.get("client-key")
    made: list[str] = []
    try:
        if user.get("client-certificate-data"):
            cert = _pem_file(user["client-certificate-data"])
            made.append(cert)
        if user.get("client-key-data"):
            key = _pem_file(user["client-key-data"])
            made.append(key)
        if cert and key:
            tls.load_cert_chain(str(base / cert), str(base / key))
    finally:
        for name in made:
            with contextlib.suppress(OSError):
                os.unlink(name)
    token_file = base / user["tokenFile"] if user.get("tokenFile") else None
    return Endpoint(cluster["server"].rstrip("/"), tls, user.get("token", ""), token_file,
                    cluster.get("tls-server-name"))


class Reviews:
    """TokenReviews and SubjectAccessReviews against one kube-apiserver."""

    def __init__(self, target: Endpoint, *, timeout: float = 10.0, token_ttl: float = 10.0):
        self._target = target
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._token_ttl = token_ttl
        self._tokens: dict[str, tuple[float, UserInfo | None]] = {}

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        headers = {"Authorization": f"Bearer {self._target.bearer()}"} if (
            self._target.token or self._target.token_file) else {}
        try:
            async with self._session.post(self._target.server + path, json=body,
                                          ssl=self._target.context,
                                          headers=headers) as response:
                if response.status // 100 != 2:
                    raise ReviewUnavailable(f"{path}: HTTP {response.status}")
                answer: dict[str, Any] = await response.json()
                return answer
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise ReviewUnavailable(f"{self._target.server}: {err or type(err).__name__}"
                                    ) from err

    async def token(self, token: str) -> UserInfo | None:
        now = time.monotonic()
        cached = self._tokens.get(token)
        if cached is not None and cached[0] > now:
            return cached[1]
        answer = await self._post(TOKEN_REVIEWS, {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token}})
        status = answer.get("status") or {}
        user = None
        if status.get("authenticated"):
            found = status.get("user") or {}
            user = UserInfo(found.get("username", ""), tuple(found.get("groups") or ()),
                            tuple((k, tuple(v)) for k, v in
                                  sorted((found.get("extra") or {}).items())),
                            found.get("uid", ""))
        if len(self._tokens) > 10_000:
            self._tokens.clear()
        self._tokens[token] = (now + self._token_ttl, user)
        return user

    async def access(self, user: UserInfo, asked: Attributes) -> tuple[bool, str]:
        answer = await self._post(ACCESS_REVIEWS, {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": review_spec(user, asked)})
        status = answer.get("status") or {}
        return bool(status.get("allowed")) and not status.get("denied"), str(
            status.get("reason") or "")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
