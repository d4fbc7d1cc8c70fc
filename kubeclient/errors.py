"""The client's one error tree, after kopf's clients package: every failure
of a request is a ``KubeClientError``; an answer that is not 2xx is an
``APIError`` with its status and the Kubernetes ``Status`` it carried, split
by class and by the statuses callers act on. The HTTP library's own errors
are chained as causes (``raise ... from``), never raised as they are."""

from __future__ import annotations

from typing import Any

import orjson

JSON = dict[str, Any]


class KubeClientError(Exception):
    """Anything that kept a request from an answer, or the answer an error."""


class ConfigError(KubeClientError):
    """A kubeconfig (or a pod's service account) that cannot be used; the
    message is one line that says why."""


class ConnectionFailed(KubeClientError):
    """No answer: the server could not be reached, or did not answer in time."""

    def __init__(self, server: str, detail: str):
        self.server = server
        #: the request and what happened to it
        self.detail = detail
        super().__init__(f"{server}: {detail}")


class APIError(KubeClientError):
    """An answer that is not 2xx."""

    def __init__(self, method: str, path: str, status: int, body: bytes):
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        #: the Kubernetes Status the server sent, when it sent one
        self.details: JSON | None = _status(body)
        #: the reason in one line: "404 NotFound: ... not found" or "HTTP 502: ..."
        self.reason = failure_reason(status, body, self.details)
        super().__init__(f"{method} {path}: {self.reason}")


class APIClientError(APIError):
    """4xx: the request, as sent, will not succeed."""


class APIUnauthorizedError(APIClientError):
    """401."""


class APIForbiddenError(APIClientError):
    """403."""


class APINotFoundError(APIClientError):
    """404."""


class APIConflictError(APIClientError):
    """409: an object changed since it was read, or already exists."""


class APIGoneError(APIClientError):
    """410: a resourceVersion or continue token too old to serve."""


class APIInvalidError(APIClientError):
    """422: the object is not valid."""


class APITooManyRequestsError(APIClientError):
    """429: the server asks to be called later."""


class APIServerError(APIError):
    """5xx."""


_BY_STATUS: dict[int, type[APIError]] = {
    401: APIUnauthorizedError, 403: APIForbiddenError, 404: APINotFoundError,
    409: APIConflictError, 410: APIGoneError, 422: APIInvalidError,
    429: APITooManyRequestsError}


def api_error(method: str, path: str, status: int, body: bytes) -> APIError:
    """The error of the tree for an answer with ``status``. Pure."""
    kind = _BY_STATUS.get(status) or (APIServerError if status >= 500 else
                                       APIClientError if status >= 400 else APIError)
    return kind(method, path, status, body)


def _status(body: bytes) -> JSON | None:
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return found if isinstance(found, dict) and found.get("kind") == "Status" else None


def failure_reason(status: int, body: bytes, details: JSON | None = None) -> str:
    """A refused request's reason, from its Kubernetes Status when it has one. Pure."""
    found = details if details is not None else _status(body)
    if found and found.get("message"):
        return f"{status} {found.get('reason') or ''}: {found['message']}".replace(" :", ":")
    return f"HTTP {status}: {body[:200].decode(errors='replace')}"
