"""Label and field selectors: parsing Kubernetes' syntax, matching objects, and
translating to ClickHouse conditions with bound parameters. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from apiserver.contract.errors import BadRequest

JSON = dict[str, Any]

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_QUALIFIED = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        rf"{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")


@lru_cache(maxsize=4096)  # the same few keys on every write
def label_key_errors(key: str) -> tuple[str, ...]:
    if not _QUALIFIED.match(key):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must"
                " start and end with an alphanumeric character, with an optional DNS subdomain"
                " prefix and '/'",)
    prefix, _, name = key.rpartition("/")
    errors = []
    if len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if len(prefix) > 253:
        errors.append("prefix part must be no more than 253 characters")
    return tuple(errors)


@lru_cache(maxsize=4096)
def label_value_errors(value: str) -> tuple[str, ...]:
    if len(value) > 63:
        return ("must be no more than 63 characters",)
    if not _VALUE.match(value):
        return ("a valid label must be an empty string or consist of alphanumeric characters,"
                " '-', '_' or '.', and must start and end with an alphanumeric character",)
    return ()


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # "!=", "notin"


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def sql(self, params: dict[str, Any], column: str = "labels") -> list[str]:
        """Conditions over a ``Map(String, String)`` column, values bound in ``params``."""
        out = []
        for i, r in enumerate(self.requirements):
            k = f"lk{len(params)}_{i}"
            params[k] = r.key
            if r.op == "exists":
                out.append(f"mapContains({column}, {{{k}:String}})")
            elif r.op == "!":
                out.append(f"NOT mapContains({column}, {{{k}:String}})")
            else:
                v = f"lv{len(params)}_{i}"
                params[v] = list(r.values)
                has = f"(mapContains({column}, {{{k}:String}}) AND {column}[{{{k}:String}}]" \
                      f" IN {{{v}:Array(String)}})"
                out.append(has if r.op in ("=", "in") else f"NOT {has}")
        return out


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text:
        return LabelSelector()
    tokens = _TOKEN.findall(text)
    if "".join(tokens) != re.sub(r"\s+", "", text):
        raise BadRequest(f"unable to parse requirement: invalid label selector {text!r}")
    reqs: list[Requirement] = []
    pos = 0

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise BadRequest(f"invalid label selector {text!r}: unexpected end")
        pos += 1
        return tokens[pos - 1]

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    while pos < len(tokens):
        tok = take()
        if tok == "!":
            key = take()
            _check_key(key, text)
            reqs.append(Requirement(key, "!"))
        else:
            key = tok
            _check_key(key, text)
            op = peek()
            if op in ("=", "==", "!="):
                take()
                value = take() if peek() not in (",", None) else ""
                _check_value(value, text)
                reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
            elif op in ("in", "notin"):
                take()
                if take() != "(":
                    raise BadRequest(f"invalid label selector {text!r}: expected '('")
                values: list[str] = []
                while True:
                    v = take()
                    if v == ")":
                        break
                    if v == ",":
                        continue
                    _check_value(v, text)
                    values.append(v)
                if not values:
                    raise BadRequest(f"invalid label selector {text!r}: {op} needs values")
                reqs.append(Requirement(key, op, tuple(values)))
            elif op in (",", None):
                reqs.append(Requirement(key, "exists"))
            else:
                raise BadRequest(f"invalid label selector {text!r}: unexpected {op!r}")
        nxt = peek()
        if nxt == ",":
            take()
            if peek() is None:
                raise BadRequest(f"invalid label selector {text!r}: trailing ','")
        elif nxt is not None:
            raise BadRequest(f"invalid label selector {text!r}: expected ',' before {nxt!r}")
    return LabelSelector(tuple(reqs))


def _check_key(key: str, text: str) -> None:
    if key in ("=", "==", "!=", "(", ")", ",", "!") or label_key_errors(key):
        raise BadRequest(f"invalid label selector {text!r}: invalid label key {key!r}")


def _check_value(value: str, text: str) -> None:
    if value in ("=", "==", "!=", "(", ")", "!") or label_value_errors(value):
        raise BadRequest(f"invalid label selector {text!r}: invalid label value {value!r}")


FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class FieldSelector:
    """Conjunction of (field, equal?, value)."""

    terms: tuple[tuple[str, bool, str], ...] = ()

    def matches(self, obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        for field, equal, value in self.terms:
            actual = meta.get(field.split(".", 1)[1]) or ""
            if (actual == value) != equal:
                return False
        return True

    def sql(self, params: dict[str, Any]) -> list[str]:
        out = []
        for i, (field, equal, value) in enumerate(self.terms):
            k = f"fv{len(params)}_{i}"
            params[k] = value
            column = field.split(".", 1)[1]
            out.append(f"{column} {'=' if equal else '!='} {{{k}:String}}")
        return out


def parse_field_selector(text: str | None) -> FieldSelector:
    if not text:
        return FieldSelector()
    terms = []
    for part in text.split(","):
        part = part.strip()
        m = re.match(r"^([^=!]+)(==|=|!=)(.*)$", part)
        if not m:
            raise BadRequest(f"invalid field selector {text!r}: {part!r} is not field=value")
        field, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in FIELDS:
            raise BadRequest(f'field label not supported: {field}')
        terms.append((field, op != "!=", value))
    return FieldSelector(tuple(terms))
