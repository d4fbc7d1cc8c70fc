"""Opaque ``continue`` tokens bound to the query that made them. Pure.

A token names the last key of a page; the next page starts after it, in
(namespace, name) order, so a paged list sees each object at most once however
the data changes meanwhile."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import orjson

from apiserver.contract.errors import BadRequest


@dataclass(frozen=True)
class Continue:
    resource_version: int
    after: tuple[str, str]
    query: str


def query_digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def encode(token: Continue) -> str:
    raw = orjson.dumps({"v": 1, "rv": token.resource_version, "k": list(token.after),
                        "q": token.query})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(text: str, query: str) -> Continue:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = orjson.loads(raw)
        token = Continue(int(value["rv"]), (str(value["k"][0]), str(value["k"][1])),
                         str(value["q"]))
    except (ValueError, KeyError, TypeError, IndexError, orjson.JSONDecodeError) as err:
        raise BadRequest("continue key is not valid: the token is malformed") from err
    if value.get("v") != 1:
        raise BadRequest("continue key is not valid: unknown token version")
    if token.query != query:
        raise BadRequest("continue key is not valid: it was issued for a different query")
    return token
