"""The six report resource types served by the project. Pure data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    namespaced: bool
    #: Ephemeral reports keep their body under ``spec``.
    body_path: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def id(self) -> str:
        """Stable identifier used as a storage column and in Kafka keys."""
        return f"{self.plural}.{self.group}"


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports", "policyreport",
                 ("polr",), True),
    ResourceType("wgpolicyk8s.io", "v1alpha2", "ClusterPolicyReport", "clusterpolicyreports",
                 "clusterpolicyreport", ("cpolr",), False),
    ResourceType("reports.kyverno.io", "v1", "EphemeralReport", "ephemeralreports",
                 "ephemeralreport", ("ephr",), True, ("spec",)),
    ResourceType("reports.kyverno.io", "v1", "ClusterEphemeralReport", "clusterephemeralreports",
                 "clusterephemeralreport", ("cephr",), False, ("spec",)),
    ResourceType("openreports.io", "v1alpha1", "Report", "reports", "report", ("reps",), True),
    ResourceType("openreports.io", "v1alpha1", "ClusterReport", "clusterreports", "clusterreport",
                 ("creps",), False),
)

_BY_ID = {r.id: r for r in RESOURCES}
_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_KIND = {(r.api_version, r.kind): r for r in RESOURCES}


def by_id(resource_id: str) -> ResourceType:
    return _BY_ID[resource_id]


def by_path(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def by_kind(api_version: str, kind: str) -> ResourceType | None:
    return _BY_KIND.get((api_version, kind))


def groups() -> dict[str, str]:
    """Group name -> its (single) served version, in a stable order."""
    out: dict[str, str] = {}
    for r in RESOURCES:
        out.setdefault(r.group, r.version)
    return out
