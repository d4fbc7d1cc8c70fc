"""The API's error tree, rendered as Kubernetes ``Status`` objects."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


class ApiError(Exception):
    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, causes: list[JSON] | None = None,
                 details: JSON | None = None, retry_after: int | None = None,
                 continue_token: str = ""):
        super().__init__(message)
        self.message = message
        self.causes = causes or []
        self.details = dict(details or {})
        self.retry_after = retry_after
        #: a list's next page despite the error (Status.metadata.continue)
        self.continue_token = continue_token

    def status(self) -> JSON:
        meta: JSON = {"continue": self.continue_token} if self.continue_token else {}
        out: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": meta, "status": "Failure",
                     "message": self.message, "reason": self.reason, "code": self.code}
        details = dict(self.details)
        if self.causes:
            details["causes"] = self.causes
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            out["details"] = details
        return out


class BadRequest(ApiError):
    code, reason = 400, "BadRequest"


class Unauthorized(ApiError):
    code, reason = 401, "Unauthorized"


class NotFound(ApiError):
    code, reason = 404, "NotFound"


class MethodNotAllowed(ApiError):
    code, reason = 405, "MethodNotAllowed"


class NotAcceptable(ApiError):
    code, reason = 406, "NotAcceptable"


class Conflict(ApiError):
    code, reason = 409, "Conflict"


class Gone(ApiError):
    code, reason = 410, "Expired"


class RequestEntityTooLarge(ApiError):
    code, reason = 413, "RequestEntityTooLarge"


class UnsupportedMediaType(ApiError):
    code, reason = 415, "UnsupportedMediaType"


class Invalid(ApiError):
    code, reason = 422, "Invalid"


class Timeout(ApiError):
    code, reason = 504, "Timeout"


class Unavailable(ApiError):
    code, reason = 503, "ServiceUnavailable"


class FromStatus(ApiError):
    """An error decided elsewhere (the committer) and carried as a Status."""

    def __init__(self, status: JSON):
        super().__init__(str(status.get("message", "")), details=status.get("details"))
        self.code = int(status.get("code", 500))
        self.reason = str(status.get("reason", "InternalError"))


def invalid(kind: str, name: str, group: str, causes: list[JSON]) -> Invalid:
    """422 as the kube-apiserver words it for a custom resource:
    ``Kind.group "name" is invalid: cause`` (several in brackets)."""
    each = [f"{c['field']}: {c['message']}" for c in causes]
    summary = each[0] if len(each) == 1 else "[" + ", ".join(each) + "]"
    details = {"name": name, "group": group, "kind": kind}
    if not name:
        del details["name"]  # omitted when empty, as in the kube-apiserver's Status
    return Invalid(f'{kind}.{group} "{name}" is invalid: {summary}', causes=causes,
                   details=details)


def cause(field: str, message: str, reason: str = "FieldValueInvalid") -> JSON:
    return {"reason": reason, "message": message, "field": field}
