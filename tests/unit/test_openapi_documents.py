"""The served OpenAPI documents validate (openapi-spec-validator), and every
operation declares its path parameters and its verb's query parameters, as the
kube-apiserver's documents do, so OpenAPI tooling accepts them."""

from __future__ import annotations

import re

import orjson
import pytest
from openapi_spec_validator import validate

from apiserver.contract import openapi
from pipeline.model.resources import RESOURCES

GROUP_VERSIONS = sorted({(r.group, r.version) for r in RESOURCES})


def documents() -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    docs = [("v2", orjson.loads(openapi.v2()))]
    for group, version in GROUP_VERSIONS:
        body = openapi.v3(group, version)
        assert body is not None
        docs.append((f"v3 {group}/{version}", orjson.loads(body)))
    return docs


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_the_document_validates_and_declares_its_parameters(name: str, doc: dict) -> None:  # type: ignore[type-arg]
    validate(doc)
    assert doc["paths"]
    for path, item in doc["paths"].items():
        declared = {p["name"] for p in item.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"{(\w+)}", path)), path
        for method, op in item.items():
            if method == "parameters":
                continue
            query = {p["name"] for p in op["parameters"] if p["in"] == "query"}
            kind = max((r.kind for r in RESOURCES if op["operationId"].endswith(r.kind)),
                       key=len)
            verb = op["operationId"].removesuffix(kind)
            expected = {"list": {"labelSelector", "fieldSelector", "limit", "continue",
                                 "watch", "resourceVersion"},
                        "create": {"dryRun", "fieldManager", "fieldValidation"},
                        "replace": {"dryRun", "fieldValidation"},
                        "patch": {"dryRun", "fieldManager", "force"},
                        "delete": {"dryRun", "propagationPolicy", "gracePeriodSeconds"},
                        "deletecollection": {"dryRun", "propagationPolicy"},
                        "read": {"resourceVersion"}}[verb]
            assert expected <= query, (path, method)


def test_a_path_parameter_left_undeclared_is_caught() -> None:
    doc = orjson.loads(openapi.v3(*GROUP_VERSIONS[0]) or b"{}")
    path = next(p for p in doc["paths"] if "{name}" in p)
    del doc["paths"][path]["parameters"]
    with pytest.raises(Exception, match="name"):
        validate(doc)
