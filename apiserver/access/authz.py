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

from apiserver.access.authn import PUBLIC, ReviewUnavailable, UserInfo
from apiserver.access.requestinfo import Attributes, request_info
from apiserver.contract.errors import ApiError, Unavailable
from apiserver.responses import error_response
from pipeline.observe import metrics


class Forbidden(ApiError):
    code, reason = 403, "Forbidden"


def review_spec(user: UserInfo, asked: Attributes) -> dict[str, Any]:
    """A SubjectAccessReview's spec for the user asking."""
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups),
                            "extra": user.extra_dict()}
    if user.uid:
        spec["uid"] = user.uid
    if asked.resource:
        spec["resourceAttributes"] = {
            "verb": asked.verb, "group": asked.group, "version": asked.version,
            "resource": asked.resource, "namespace": asked.namespace, "name": asked.name}
    else:
        spec["nonResourceAttributes"] = {"verb": asked.verb, "path": asked.path}
    return spec


def denial(user: UserInfo, asked: Attributes, reason: str) -> Forbidden:
    """The kube-apiserver's words for a denied request."""
    if not asked.resource:
        message = f'forbidden: User "{user.name}" cannot {asked.verb} path "{asked.path}"'
    else:
        qualified = f"{asked.resource}.{asked.group}" if asked.group else asked.resource
        subject = f'{qualified} "{asked.name}"' if asked.name else qualified
        where = (f' in the namespace "{asked.namespace}"' if asked.namespace
                 else " at the cluster scope")
        message = (f'{subject} is forbidden: User "{user.name}" cannot {asked.verb}'
                   f' resource "{asked.resource}" in API group "{asked.group}"{where}')
    if reason:
        message += f": {reason}"
    details = {"group": asked.group, "kind": asked.resource} if asked.resource else {}
    if asked.name:
        details["name"] = asked.name
    return Forbidden(message, details=details)


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
        asked = request_info(scope)
        try:
            allowed, reason = await self._decide(user, asked)
        except ReviewUnavailable as err:
            metrics.AUTHORIZATIONS.labels("error", "authorizer").inc()
            await error_response(Unavailable(f"the authorizer is unavailable: {err}",
                                             retry_after=1))(scope, receive, send)
            return
        if not allowed:
            await error_response(denial(user, asked, reason))(scope, receive, send)
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
