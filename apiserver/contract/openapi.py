"""OpenAPI v2 and v3 descriptions of the served resources, enough for
``kubectl explain`` and kubectl's field validation. Pure."""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

import orjson

from pipeline.model.resources import RESOURCES, ResourceType

JSON = dict[str, Any]
META = "io.k8s.apimachinery.pkg.apis.meta.v1"


def _s(desc: str, type_: str = "string", **extra: Any) -> JSON:
    return {"description": desc, "type": type_, **extra}


def _ref(name: str, v3: bool) -> JSON:
    return {"$ref": ("#/components/schemas/" if v3 else "#/definitions/") + name}


def _object_ref(desc: str) -> JSON:
    return _s(desc, "object", properties={
        "apiVersion": _s("API version of the referent."),
        "kind": _s("Kind of the referent."), "name": _s("Name of the referent."),
        "namespace": _s("Namespace of the referent."), "uid": _s("UID of the referent."),
        "resourceVersion": _s("Specific resourceVersion of the referent."),
        "fieldPath": _s("A path to a field of the referent."),
    })


def _label_selector(desc: str) -> JSON:
    return _s(desc, "object", properties={
        "matchLabels": _s("Labels that must all match.", "object",
                          additionalProperties={"type": "string"}),
        "matchExpressions": _s("Label selector requirements, ANDed.", "array", items=_s(
            "A selector requirement.", "object", required=["key", "operator"], properties={
                "key": _s("The label key."),
                "operator": _s("In, NotIn, Exists or DoesNotExist."),
                "values": _s("Values for In and NotIn.", "array", items={"type": "string"}),
            })),
    })


SUMMARY = _s("Counts of results by status.", "object", properties={
    f: _s(f"Number of results with status {f}.", "integer") for f in
    ("pass", "fail", "warn", "error", "skip")})

RESULT = _s("One result of applying a policy rule to resources.", "object", required=["policy"],
            properties={
    "source": _s("The policy engine that produced the result."),
    "policy": _s("Name or identifier of the policy."),
    "rule": _s("Name or identifier of the rule within the policy."),
    "category": _s("Category of the policy or rule."),
    "severity": _s("Severity: critical, high, medium, low or info.",
                   enum=["critical", "high", "medium", "low", "info"]),
    "timestamp": _s("When the result was produced.", "object", required=["nanos", "seconds"],
                    properties={
        "seconds": _s("Seconds since the Unix epoch.", "integer", format="int64"),
        "nanos": _s("Nanoseconds within the second.", "integer", format="int32")}),
    "result": _s("Status: pass, fail, warn, error or skip.",
                 enum=["pass", "fail", "warn", "error", "skip"]),
    "scored": _s("Whether the result counts towards a score.", "boolean"),
    "resources": _s("The resources the result is about.", "array",
                    items=_object_ref("A resource the result is about.")),
    "resourceSelector": _label_selector("Selects the resources the result is about."),
    "message": _s("A short explanation of the result."),
    "properties": _s("Free-form key-value data about the result.", "object",
                     additionalProperties={"type": "string"}),
})


def _body(r: ResourceType) -> JSON:
    props: JSON = {
        "summary": SUMMARY,
        "results": _s("Results of policy rules.", "array", items=RESULT),
    }
    if r.body_path:
        props["owner"] = _owner_ref("The resource the report is about.")
        return {"spec": _s("The report.", "object", required=["owner"], properties=props)}
    props["scope"] = _object_ref("The resource the report is about.")
    props["scopeSelector"] = _label_selector("Selects the resources the report is about.")
    if r.group == "openreports.io":
        props["source"] = _s("The tool that produced the report.")
        props["configuration"] = _s("How the report was produced.", "object",
                                    required=["limits"], properties={
            "limits": _s("Limits applied to the report.", "object", properties={
                "maxResults": _s("Most results kept.", "integer"),
                "statusFilter": _s("Statuses kept.", "array", items=_s(
                    "A status kept.", enum=["pass", "fail", "warn", "error", "skip"]))})})
    return props


def _owner_ref(desc: str) -> JSON:
    return _s(desc, "object", required=["apiVersion", "kind", "name", "uid"], properties={
        "apiVersion": _s("API version of the referent."),
        "kind": _s("Kind of the referent."), "name": _s("Name of the referent."),
        "uid": _s("UID of the referent."),
        "controller": _s("Whether the referent is the managing controller.", "boolean"),
        "blockOwnerDeletion": _s("Whether the owner cannot be deleted before this object.",
                                 "boolean"),
    })


def _object_meta() -> JSON:
    return _s("Standard object metadata.", "object", properties={
        "selfLink": _s("Deprecated link to the object."),
        "deletionGracePeriodSeconds": _s("Seconds allowed for graceful deletion.", "integer",
                                         format="int64"),
        "name": _s("Name, unique within a namespace."),
        "generateName": _s("Prefix for a server-generated name."),
        "namespace": _s("Namespace of the object."),
        "uid": _s("Unique identifier, set by the server."),
        "resourceVersion": _s("Opaque version, changes on every write."),
        "generation": _s("Sequence number of changes to the desired state.", "integer"),
        "creationTimestamp": _s("When the object was created.", format="date-time"),
        "deletionTimestamp": _s("When the object will be deleted.", format="date-time"),
        "labels": _s("Key-value labels.", "object", additionalProperties={"type": "string"}),
        "annotations": _s("Key-value annotations.", "object",
                          additionalProperties={"type": "string"}),
        "finalizers": _s("Finalizers that must be removed before deletion.", "array",
                         items={"type": "string"}),
        "ownerReferences": _s("Objects this object depends on.", "array",
                              items=_owner_ref("An owner.")),
        "managedFields": _s("Field ownership, as server-side apply records it.", "array",
                            items=_s("One manager's fields.", "object", properties={
                                "manager": _s("Name of the manager."),
                                "operation": _s("Apply or Update."),
                                "apiVersion": _s("Version of the applied object."),
                                "time": _s("When the fields were last changed.",
                                           format="date-time"),
                                "fieldsType": _s("Format of fieldsV1."),
                                "fieldsV1": _s("The fields.", "object",
                                               **{"x-kubernetes-preserve-unknown-fields": True}),
                                "subresource": _s("Subresource written."),
                            })),
    })


def _schema_name(r: ResourceType) -> str:
    return ".".join(reversed(r.group.split("."))) + f".{r.version}.{r.kind}"


def _schema(r: ResourceType, v3: bool) -> JSON:
    return {
        "description": f"{r.kind} holds policy results.", "type": "object",
        "properties": {"apiVersion": _s("APIVersion of this representation."),
                       "kind": _s("Kind of this object."),
                       "metadata": _ref(f"{META}.ObjectMeta", v3), **_body(r)},
        "x-kubernetes-group-version-kind": [{"group": r.group, "version": r.version,
                                             "kind": r.kind}],
    }


def _list_schema(r: ResourceType, v3: bool) -> JSON:
    return {"description": f"A list of {r.kind}.", "type": "object", "required": ["items"],
            "properties": {"apiVersion": _s("APIVersion."), "kind": _s("Kind."),
                           "metadata": {"type": "object"},
                           "items": {"type": "array", "items": _ref(_schema_name(r), v3)}},
            "x-kubernetes-group-version-kind": [{"group": r.group, "version": r.version,
                                                 "kind": r.list_kind}]}


#: query parameters of each kind of operation, as the kube-apiserver declares them
QUERY = {
    "write": ("dryRun", "fieldManager", "fieldValidation", "pretty"),
    "read": ("resourceVersion", "pretty"),
    "list": ("allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit",
             "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds",
             "watch", "pretty"),
    "delete": ("dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy",
               "pretty"),
    "patch": ("dryRun", "fieldManager", "fieldValidation", "force", "pretty"),
}
_INTEGERS = {"gracePeriodSeconds", "limit", "timeoutSeconds"}
_BOOLEANS = {"allowWatchBookmarks", "orphanDependents", "sendInitialEvents", "watch", "force"}


def _param(name: str, where: str, v3: bool, *, required: bool = False) -> JSON:
    kind = ("integer" if name in _INTEGERS else "boolean" if name in _BOOLEANS
            else "string")
    out: JSON = {"name": name, "in": where, "description": f"The {name} parameter."}
    if required:
        out["required"] = True
    if v3:
        out["schema"] = {"type": kind}
    else:
        out["type"] = kind
    return out


def _params(kind: str, v3: bool) -> list[JSON]:
    return [_param(n, "query", v3) for n in QUERY[kind]]


def _op(op_id: str, kind: str, r: ResourceType, v3: bool, *, response: JSON,
        body: JSON | None = None, body_types: tuple[str, ...] = ("application/json",)
        ) -> JSON:
    out: JSON = {"operationId": op_id, "parameters": _params(kind, v3),
                 "responses": {"200": {"description": "OK", **response}},
                 "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version,
                                                     "kind": r.kind}}
    if body is not None:
        if v3:
            out["requestBody"] = {"required": True,
                                  "content": {t: {"schema": body} for t in body_types}}
        else:
            out["parameters"] = out["parameters"] + [
                {"name": "body", "in": "body", "required": True, "schema": body}]
            out["consumes"] = list(body_types)
    return out


def _paths(resources: list[ResourceType], v3: bool) -> JSON:
    paths: JSON = {}
    for r in resources:
        ref = _ref(_schema_name(r), v3)
        list_ref = _ref(_schema_name(r) + "List", v3)
        status = {"type": "object", "description": "A Kubernetes Status."}

        def answer(schema: JSON) -> JSON:
            return {"content": {"application/json": {"schema": schema}}} if v3 else {
                "schema": schema}

        base = f"/apis/{r.group}/{r.version}/" + ("namespaces/{namespace}/" if r.namespaced
                                                  else "")
        namespace = [_param("namespace", "path", v3, required=True)] if r.namespaced else []
        patch_types = ("application/json-patch+json", "application/merge-patch+json",
                       "application/apply-patch+yaml")
        paths[f"{base}{r.plural}"] = {
            "parameters": namespace,
            "get": _op(f"list{r.kind}", "list", r, v3, response=answer(list_ref)),
            "post": _op(f"create{r.kind}", "write", r, v3, response=answer(ref), body=ref),
            "delete": _op(f"deletecollection{r.kind}", "delete", r, v3,
                          response=answer(list_ref)),
        }
        paths[f"{base}{r.plural}/{{name}}"] = {
            "parameters": [*namespace, _param("name", "path", v3, required=True)],
            "get": _op(f"read{r.kind}", "read", r, v3, response=answer(ref)),
            "put": _op(f"replace{r.kind}", "write", r, v3, response=answer(ref), body=ref),
            "patch": _op(f"patch{r.kind}", "patch", r, v3, response=answer(ref),
                         body={"type": "object"}, body_types=patch_types),
            "delete": _op(f"delete{r.kind}", "delete", r, v3, response=answer(status)),
        }
    return paths


def _schemas(resources: list[ResourceType], v3: bool) -> JSON:
    out: JSON = {f"{META}.ObjectMeta": _object_meta()}
    for r in resources:
        out[_schema_name(r)] = _schema(r, v3)
        out[_schema_name(r) + "List"] = _list_schema(r, v3)
    return out


@cache
def v2() -> bytes:
    doc = {"swagger": "2.0", "info": {"title": "reports-pipeline", "version": "v1"},
           "paths": _paths(list(RESOURCES), False),
           "definitions": _schemas(list(RESOURCES), False)}
    return orjson.dumps(doc)


@cache
def v3(group: str, version: str) -> bytes | None:
    served = [r for r in RESOURCES if r.group == group and r.version == version]
    if not served:
        return None
    doc = {"openapi": "3.0.0", "info": {"title": "reports-pipeline", "version": version},
           "paths": _paths(served, True), "components": {"schemas": _schemas(served, True)}}
    return orjson.dumps(doc)


@cache
def v3_index() -> bytes:
    paths = {}
    for r in RESOURCES:
        doc = v3(r.group, r.version)
        assert doc is not None
        digest = hashlib.sha512(doc).hexdigest()[:32].upper()
        paths[f"apis/{r.group}/{r.version}"] = {
            "serverRelativeURL": f"/openapi/v3/apis/{r.group}/{r.version}?hash={digest}"}
    return orjson.dumps({"paths": paths})


# -- unknown fields ------------------------------------------------------------

@cache
def _resolved(rtype_id: str) -> JSON:
    from pipeline.model.resources import by_id

    r = by_id(rtype_id)
    schemas = _schemas([r], True)

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(schemas[node["$ref"].rsplit("/", 1)[1]])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node
    resolved: JSON = resolve(schemas[_schema_name(r)])
    return resolved


def _walk(schema: JSON, value: Any, path: str, found: list[str], prune: bool) -> Any:
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return value
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = {}
        for key, sub in value.items():
            where = f"{path}.{key}" if path else key
            if props is not None and key in props:
                out[key] = _walk(props[key], sub, where, found, prune)
            elif isinstance(extra, dict):
                out[key] = _walk(extra, sub, where, found, prune)
            elif props is None and extra is None:
                out[key] = sub
            else:
                found.append(where)
                if not prune:
                    out[key] = sub
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_walk(schema["items"], v, f"{path}[{i}]", found, prune)
                for i, v in enumerate(value)]
    return value


def resolved(rtype: ResourceType) -> JSON:
    """The resource's schema with every reference resolved."""
    return _resolved(rtype.id)


def unknown_fields(rtype: ResourceType, obj: JSON) -> list[str]:
    """Paths of fields the resource's schema does not declare."""
    found: list[str] = []
    _walk(_resolved(rtype.id), obj, "", found, False)
    return found


def prune(rtype: ResourceType, obj: JSON) -> JSON:
    """``obj`` without the fields its schema does not declare, as the
    kube-apiserver prunes custom resources."""
    pruned: JSON = _walk(_resolved(rtype.id), obj, "", [], True)
    return pruned
