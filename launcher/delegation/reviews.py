"""The kube-apiserver's review endpoints, as a delegating server uses them:
TokenReview (``--authentication-kubeconfig``) and SubjectAccessReview
(``--authorization-kubeconfig``), reached with a kubeconfig file or, given
``in-cluster``, the pod's service account (``kubeclient``)."""

from __future__ import annotations

import time
from typing import Any

from apiserver.access.authn import ReviewUnavailable, UserInfo
from apiserver.access.authz import review_spec
from apiserver.access.requestinfo import Attributes
from kubeclient import Client, KubeClientError, Target

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class Reviews:
    """TokenReviews and SubjectAccessReviews against one kube-apiserver."""

    def __init__(self, target: Target, *, timeout: float = 10.0, token_ttl: float = 10.0):
        # one retry of a review the server did not serve (429, or 5xx with
        # Retry-After), waiting at most a second: a request waits on it
        self._client = Client(target, timeout=timeout, retries=1, max_wait=1.0)
        self._token_ttl = token_ttl
        self._tokens: dict[str, tuple[float, UserInfo | None]] = {}

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._client.json("POST", path, body=body)
        except KubeClientError as err:
            raise ReviewUnavailable(str(err)) from err

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
        await self._client.close()
