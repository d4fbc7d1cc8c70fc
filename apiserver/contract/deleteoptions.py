"""DeleteOptions, from a DELETE's body and its query, checked as the
kube-apiserver checks them: a body that is not DeleteOptions is 400 (and
nothing is deleted), values outside their enums are 422 Invalid for kind
DeleteOptions. Custom resources have no graceful deletion, so
``gracePeriodSeconds`` is checked and otherwise ignored; ``propagationPolicy``
(or ``orphanDependents``) Foreground and Orphan add the garbage collector's
finalizer as for any object. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apiserver.contract.errors import BadRequest, cause, invalid
from apiserver.contract.schema import json_type
from pipeline.model.resources import RESOURCES

JSON = dict[str, Any]
POLICIES = ("Foreground", "Background", "Orphan")
#: the finalizer each propagation policy leaves for the garbage collector
FINALIZERS = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}
#: DeleteOptions is registered in every group version the server serves (as
#: k8s.io/apimachinery's AddToGroupVersion does): Kyverno's typed clients send
#: it as reports.kyverno.io/v1
API_VERSIONS = frozenset(("v1", "meta.k8s.io/v1", "meta.k8s.io/v1beta1",
                          *(r.api_version for r in RESOURCES)))


@dataclass(frozen=True)
class DeleteOptions:
    preconditions: JSON = field(default_factory=dict)
    propagation: str = ""  # "" (the resource's default: Background), or one of POLICIES
    dry_run: bool = False
    grace_period_seconds: int | None = None

    @property
    def finalizer(self) -> str:
        """The garbage collector's finalizer the deletion adds, or ""."""
        return FINALIZERS.get(self.propagation, "")


def _type_error(name: str, value: Any, wanted: str) -> BadRequest:
    return BadRequest(f"json: cannot unmarshal {_json_type(value)} into Go struct field"
                      f" DeleteOptions.{name} of type {wanted}")


#: Go's names for JSON types, as its JSON decoder words a type error
_GO_TYPES = {"boolean": "bool", "integer": "number"}


def _json_type(value: Any) -> str:
    name = json_type(value)
    return _GO_TYPES.get(name, name)


def parse(body: JSON | None, query: Mapping[str, str], dry_run_query: Sequence[str]
          ) -> DeleteOptions:
    """The options of a DELETE: its body (``None`` when it has none) and its
    query parameters (which the kube-apiserver lets the body override)."""
    options: JSON = {}
    for key, text in query.items():
        if key == "gracePeriodSeconds":
            try:
                options[key] = int(text)
            except ValueError:
                raise BadRequest(f'gracePeriodSeconds: invalid value "{text}": must be an'
                                 " integer") from None
        elif key == "orphanDependents":
            if text not in ("true", "false"):
                raise BadRequest(f'orphanDependents: invalid value "{text}": must be true or'
                                 " false")
            options[key] = text == "true"
        elif key == "propagationPolicy":
            options[key] = text
    if dry_run_query:
        options["dryRun"] = list(dry_run_query)
    if body is not None:
        if not isinstance(body, dict):
            raise BadRequest("the body of a delete must be a DeleteOptions object")
        kind, version = body.get("kind"), body.get("apiVersion")
        if kind not in (None, "", "DeleteOptions") or (
                version not in (None, "") and version not in API_VERSIONS):
            raise BadRequest(f"the body of a delete must be DeleteOptions, not"
                             f" {version or '?'}/{kind or '?'}")
        options.update({k: v for k, v in body.items() if k not in ("kind", "apiVersion")})
    return _checked(options)


def _checked(options: JSON) -> DeleteOptions:
    grace = options.get("gracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)):
        raise _type_error("gracePeriodSeconds", grace, "int64")
    pre = options.get("preconditions")
    if pre is not None:
        if not isinstance(pre, dict):
            raise _type_error("preconditions", pre, "v1.Preconditions")
        for key in ("uid", "resourceVersion"):
            if pre.get(key) is not None and not isinstance(pre[key], str):
                raise _type_error(f"preconditions.{key}", pre[key], "string")
    orphan = options.get("orphanDependents")
    if orphan is not None and not isinstance(orphan, bool):
        raise _type_error("orphanDependents", orphan, "bool")
    policy = options.get("propagationPolicy")
    if policy is not None and not isinstance(policy, str):
        raise _type_error("propagationPolicy", policy, "v1.DeletionPropagation")
    dry_run = options.get("dryRun")
    if dry_run is not None and (not isinstance(dry_run, list)
                                or not all(isinstance(v, str) for v in dry_run)):
        raise _type_error("dryRun", dry_run, "[]string")

    causes = []
    if orphan is not None and policy:
        causes.append(cause("propagationPolicy", f'Invalid value: "{policy}": orphanDependents'
                            " and deletionPropagation cannot be both set"))
    if policy and policy not in POLICIES:
        causes.append(cause("propagationPolicy", f'Unsupported value: "{policy}": supported'
                            ' values: "Foreground", "Background", "Orphan"',
                            "FieldValueNotSupported"))
    for i, value in enumerate(dry_run or []):
        if value != "All":
            causes.append(cause(f"dryRun[{i}]", f'Unsupported value: "{value}": supported'
                                ' values: "All"', "FieldValueNotSupported"))
    if causes:
        raise invalid("DeleteOptions", "", "meta.k8s.io", causes)
    if orphan is not None:
        policy = "Orphan" if orphan else "Background"
    return DeleteOptions(
        preconditions={k: v for k, v in (pre or {}).items()
                       if k in ("uid", "resourceVersion") and v},
        propagation=policy or "", dry_run=bool(dry_run), grace_period_seconds=grace)
