"""Discovery documents and the OpenAPI description of the served resources. Pure."""

from __future__ import annotations

from typing import Any

from pipeline.model.resources import RESOURCES, ResourceType, groups

JSON = dict[str, Any]

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SERVER_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-reports-pipeline",
                  "gitCommit": "", "gitTreeState": "clean", "buildDate": "",
                  "goVersion": "", "compiler": "", "platform": "linux/amd64"}


def api_versions() -> JSON:
    return {"kind": "APIVersions", "versions": [], "serverAddressByClientCIDRs": []}


def _group(name: str, version: str) -> JSON:
    gv = {"groupVersion": f"{name}/{version}", "version": version}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


def api_group_list() -> JSON:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, v) for g, v in groups().items()]}


def api_group(name: str) -> JSON | None:
    version = groups().get(name)
    if version is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, version)}


def _resource(r: ResourceType) -> JSON:
    return {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": VERBS, "shortNames": list(r.short_names),
            "storageVersionHash": ""}


def api_resource_list(group: str, version: str) -> JSON | None:
    served = [r for r in RESOURCES if r.group == group and r.version == version]
    if not served:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
            "resources": [_resource(r) for r in served]}


#: The aggregated discovery form of ``/apis`` (apidiscovery.k8s.io/v2): the
#: kube-apiserver's aggregator and client-go ask for it first.
AGGREGATED_MEDIA_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def _resource_discovery(r: ResourceType) -> JSON:
    return {"resource": r.plural, "singularResource": r.singular,
            "scope": "Namespaced" if r.namespaced else "Cluster",
            "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
            "verbs": VERBS, "shortNames": list(r.short_names)}


def aggregated_legacy_discovery() -> JSON:
    """``/api`` in the aggregated form: no core group is served here, so no
    item (client-go then needs no request per group version)."""
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {}, "items": []}


def aggregated_discovery() -> JSON:
    """Every served group, version and resource in one APIGroupDiscoveryList."""
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": [{"metadata": {"name": g, "creationTimestamp": None},
                       "versions": [{"version": v, "freshness": "Current",
                                     "resources": [_resource_discovery(r) for r in RESOURCES
                                                   if r.group == g and r.version == v]}]}
                      for g, v in groups().items()]}
