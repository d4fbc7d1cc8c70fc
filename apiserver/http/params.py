"""The query parameters and headers shared by resource requests, checked."""

from __future__ import annotations

from starlette.requests import Request

from apiserver.contract.errors import BadRequest
from pipeline.model import managedfields


def query_flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("true", "1")


def dry_run(request: Request) -> bool:
    values = request.query_params.getlist("dryRun")
    for value in values:
        if value != "All":
            raise BadRequest(f'unsupported dryRun value "{value}": only "All" is supported')
    return bool(values)


def limit(request: Request) -> int:
    text = request.query_params.get("limit", "0") or "0"
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f'invalid limit "{text}"') from None
    return max(value, 0)


def manager(request: Request) -> str:
    """The field manager of an ordinary write: ``fieldManager``, or as
    kube-apiserver derives it, the user agent up to its first ``/``."""
    return request.query_params.get("fieldManager") or managedfields.manager_from_user_agent(
        request.headers.get("user-agent", ""))
