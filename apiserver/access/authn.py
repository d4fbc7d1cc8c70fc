"""Who is calling, as an aggregated API server built on k8s.io/apiserver
decides it, in this order:

1. a client certificate signed by the aggregator's front-proxy CA (verified
   by the TLS listener; its common name in ``--requestheader-allowed-names``
   when that is set): the user, groups and extra the aggregator names in the
   request headers (``X-Remote-User``, ``X-Remote-Group``,
   ``X-Remote-Extra-*`` by default);
2. a bearer token: the embedded kubeconfig's (its user is in
   ``system:masters``), or any other checked with a TokenReview
   (``--authentication-kubeconfig``);
3. otherwise 401.

Every authenticated user is then in ``system:authenticated``, as
k8s.io/apiserver's AuthenticatedGroupAdder puts them (RBAC's
``system:discovery`` and ``system:basic-user`` bindings name that group: the
aggregator fetches ``/openapi/*`` as ``system:aggregator`` with no groups).

The user is put in the ASGI scope (``scope["user"]``) for the authorizer."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from apiserver.contract.errors import ApiError, Unauthorized, Unavailable
from apiserver.responses import error_response

#: paths anyone may ask, as the kube-apiserver's default
#: ``--authorization-always-allow-paths`` and public-info-viewer role
PUBLIC = ("/healthz", "/livez", "/readyz", "/version")
EMBEDDED_USER = "reports-pipeline-admin"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    uid: str = ""

    def extra_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.extra}

    def authenticated(self) -> UserInfo:
        """The user with ``system:authenticated`` added, unless anonymous or
        already in it (or in ``system:unauthenticated``), as
        k8s.io/apiserver's AuthenticatedGroupAdder does."""
        if self.name == ANONYMOUS or AUTHENTICATED in self.groups \
                or UNAUTHENTICATED in self.groups:
            return self
        return replace(self, groups=(*self.groups, AUTHENTICATED))


@dataclass(frozen=True)
class RequestHeaders:
    """The ``--requestheader-*`` flags."""

    username_headers: Sequence[str] = ("X-Remote-User",)
    group_headers: Sequence[str] = ("X-Remote-Group",)
    extra_prefixes: Sequence[str] = ("X-Remote-Extra-",)
    allowed_names: Sequence[str] = ()
    #: ``--requestheader-uid-headers``: none by default, as in k8s.io/apiserver
    #: (the aggregator sends ``X-Remote-Uid``)
    uid_headers: Sequence[str] = ()

    def user(self, headers: list[tuple[bytes, bytes]]) -> UserInfo | None:
        lowered = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in headers]
        names = [h.lower() for h in self.username_headers]
        name = next((v for k, v in lowered if k in names and v), "")
        if not name:
            return None
        groups = [h.lower() for h in self.group_headers]
        prefixes = [p.lower() for p in self.extra_prefixes]
        extra: dict[str, list[str]] = {}
        for k, v in lowered:
            for prefix in prefixes:
                if k.startswith(prefix):
                    extra.setdefault(unquote(k[len(prefix):]), []).append(v)
        uids = [h.lower() for h in self.uid_headers]
        uid = next((v for k, v in lowered if k in uids and v), "")
        return UserInfo(name, tuple(v for k, v in lowered if k in groups),
                        tuple((k, tuple(v)) for k, v in sorted(extra.items())), uid)


TokenReviewer = Callable[[str], Awaitable["UserInfo | None"]]


class ReviewUnavailable(Exception):
    """The authenticator or authorizer could not be asked."""


@dataclass
class Authentication:
    """ASGI middleware: the caller's user in ``scope["user"]``, or 401."""

    app: ASGIApp
    token: str | None = None  # the embedded kubeconfig's
    request_headers: RequestHeaders | None = None  # when a front-proxy CA is trusted
    review_token: TokenReviewer | None = None
    _expected: bytes = field(init=False, default=b"")

    def __post_init__(self) -> None:
        self._expected = f"Bearer {self.token}".encode() if self.token else b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC:
            await self.app(scope, receive, send)
            return
        try:
            user = await self._authenticate(scope)
        except ApiError as err:
            await error_response(err)(scope, receive, send)
            return
        if user is None:
            await error_response(Unauthorized("Unauthorized"))(scope, receive, send)
            return
        scope["user"] = user.authenticated()
        await self.app(scope, receive, send)

    async def _authenticate(self, scope: Scope) -> UserInfo | None:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        tls = scope.get("extensions", {}).get("tls", {})
        if self.request_headers is not None and tls.get("client_cn") is not None:
            allowed = self.request_headers.allowed_names
            if allowed and tls["client_cn"] not in allowed:
                return None
            return self.request_headers.user(headers)
        authorization = next((v for k, v in headers if k == b"authorization"), b"")
        if self._expected and hmac.compare_digest(authorization, self._expected):
            return UserInfo(EMBEDDED_USER, ("system:masters", "system:authenticated"))
        if self.review_token is not None and authorization.startswith(b"Bearer "):
            try:
                return await self.review_token(authorization[7:].decode("latin-1"))
            except ReviewUnavailable as err:
                raise Unavailable(f"the authenticator is unavailable: {err}",
                                  retry_after=1) from err
        return None
