"""May this user do this? Every request after authentication is checked, as
the kube-apiserver's delegated authorizer checks it: its attributes (verb, API
group, version, resource, namespace, name; or a non-resource path) go to a
SubjectAccessReview (``--authorization-kubeconfig``), whose decisions are kept
for a short while (``REPORTS_AUTHZ_CACHE_SECONDS``). A denial is 403 worded
like the kube-apiserver's; an authorizer that cannot be asked is 503, never an
allow. Members of ``system:masters`` (the embedded kubeconfig's user) are
allowed without asking, as by the kube-apiserver."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from apiserver.authn import PUBLIC, ReviewUnavailable, UserInfo
from apiserver.errors import ApiError, Unavailable
from apiserver.instrumentation import describe
from apiserver.responses import error_response
from pipeline import metrics


class Forbidden(ApiError):
    code, reason = 403, "Forbidden"


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (``resource`` empty: a non-resource path)."""

    verb: str
    group: str = ""
    version: str = ""
    resource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    def review_spec(self, user: UserInfo) -> dict[str, Any]:
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups),
                                "extra": user.extra_dict()}
        if user.uid:
            spec["uid"] = user.uid
        if self.resource:
            spec["resourceAttributes"] = {
                "verb": self.verb, "group": self.group, "version": self.version,
                "resource": self.resource, "namespace": self.namespace, "name": self.name}
        else:
            spec["nonResourceAttributes"] = {"verb": self.verb, "path": self.path}
        return spec

    def denial(self, user: UserInfo, reason: str) -> Forbidden:
        """The kube-apiserver's words for a denied request."""
        if not self.resource:
            message = f'forbidden: User "{user.name}" cannot {self.verb} path "{self.path}"'
        else:
            qualified = f"{self.resource}.{self.group}" if self.group else self.resource
            subject = f'{qualified} "{self.name}"' if self.name else qualified
            where = (f' in the namespace "{self.namespace}"' if self.namespace
                     else " at the cluster scope")
            message = (f'{subject} is forbidden: User "{user.name}" cannot {self.verb}'
                       f' resource "{self.resource}" in API group "{self.group}"{where}')
        if reason:
            message += f": {reason}"
        details = {"group": self.group, "kind": self.resource} if self.resource else {}
        if self.name:
            details["name"] = self.name
        return Forbidden(message, details=details)


def attributes(method: str, path: str, query: bytes) -> Attributes:
    verb, group, resource = describe(method, path, query)
    if not resource:
        return Attributes(verb=_http_verb(method), path=path)
    parts = [p for p in path.split("/") if p]
    version, rest = parts[2], parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    name = rest[1] if len(rest) > 1 else ""
    return Attributes(verb, group, version, resource, namespace, name, path)


def _http_verb(method: str) -> str:
    """Non-resource requests use the HTTP method's verb, as the kube-apiserver does."""
    return {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update",
            "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


#: (allowed, reason) for a user and attributes; raises ReviewUnavailable
AccessReviewer = Callable[[UserInfo, Attributes], Awaitable[tuple[bool, str]]]


@dataclass
class Authorization:
    """ASGI middleware: every authenticated request checked before it runs."""

    app: ASGIApp
    review: AccessReviewer | None = None  # None: every authenticated user may
    cache_seconds: float = 10.0

    def __post_init__(self) -> None:
        self._decisions: dict[tuple[UserInfo, Attributes], tuple[float, bool, str]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user: UserInfo | None = scope.get("user")
        if scope["type"] != "http" or user is None or scope["path"] in PUBLIC:
            await self.app(scope, receive, send)
            return
        asked = attributes(scope["method"], scope["path"], scope.get("query_string", b""))
        try:
            allowed, reason = await self._decide(user, asked)
        except ReviewUnavailable as err:
            metrics.AUTHORIZATIONS.labels("error", "authorizer").inc()
            await error_response(Unavailable(f"the authorizer is unavailable: {err}",
                                             retry_after=1))(scope, receive, send)
            return
        if not allowed:
            await error_response(asked.denial(user, reason))(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _decide(self, user: UserInfo, asked: Attributes) -> tuple[bool, str]:
        if "system:masters" in user.groups or self.review is None:
            metrics.AUTHORIZATIONS.labels("allowed", "local").inc()
            return True, ""
        now = time.monotonic()
        key = (user, asked)
        cached = self._decisions.get(key)
        if cached is not None and cached[0] > now:
            metrics.AUTHORIZATIONS.labels("allowed" if cached[1] else "denied", "cache").inc()
            return cached[1], cached[2]
        allowed, reason = await self.review(user, asked)
        metrics.AUTHORIZATIONS.labels("allowed" if allowed else "denied", "authorizer").inc()
        if len(self._decisions) > 10_000:
            self._decisions = {k: v for k, v in self._decisions.items() if v[0] > now}
        self._decisions[key] = (now + self.cache_seconds, allowed, reason)
        return allowed, reason
