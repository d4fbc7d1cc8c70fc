"""What a request asks to do, read from its method, path and query once per
request (as k8s.io/apiserver's RequestInfo): the verb a Kubernetes client
means (get, list, watch, create, update, patch, delete, deletecollection),
API group, version, resource, namespace and name; or, for a path that names no
resource (discovery, OpenAPI, health, analytics), the path and the verb of its
HTTP method. Metrics and authorization both read it. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.types import Scope

_VERBS = {("GET", False): "get", ("GET", True): "list", ("POST", True): "create",
          ("PUT", False): "update", ("PATCH", False): "patch", ("DELETE", False): "delete",
          ("DELETE", True): "deletecollection"}
#: non-resource requests use their HTTP method's verb, as the kube-apiserver does
_HTTP_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update",
               "PATCH": "patch", "DELETE": "delete"}
_KEY = "reports.request_info"


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


def parse(method: str, path: str, query: bytes) -> Attributes:
    parts = [p for p in path.split("/") if p]
    if len(parts) < 4 or parts[0] != "apis":
        return Attributes(verb=_HTTP_VERBS.get(method, method.lower()), path=path)
    group, version, rest = parts[1], parts[2], parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, collection = rest[0], len(rest) == 1
    name = "" if collection else rest[1]
    if method == "GET" and collection and parse_qs(query.decode("latin-1")).get(
            "watch", [""])[0] in ("true", "1"):
        verb = "watch"
    else:
        verb = _VERBS.get((method, collection), method.lower())
    return Attributes(verb, group, version, resource, namespace, name, path)


def request_info(scope: Scope) -> Attributes:
    """The request's attributes, parsed on first use and kept in its scope."""
    info = scope.get(_KEY)
    if info is None:
        info = scope[_KEY] = parse(scope["method"], scope["path"],
                                   scope.get("query_string", b""))
    return info  # type: ignore[no-any-return]
