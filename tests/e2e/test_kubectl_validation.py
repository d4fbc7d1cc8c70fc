"""kubectl's validation paths on this server, with the real kubectl: a
misspelled field is a warning kubectl prints (--validate=warn) or an error
(--validate=strict, its default); an unknown kind is reported as kubectl
reports it for any server; a body the schema refuses is kubectl's 422."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import Kubectl, Up
from tests.helpers import report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]


def test_kubectl_validation(up: Callable[[], Up]) -> None:
    k = Kubectl(up().kubeconfig)
    misspelled = report(POLR, "typo", "team-a")
    misspelled["resutls"] = misspelled.pop("results")
    text = yaml.safe_dump(misspelled)

    warned = k.run("apply", "--validate=warn", "-f", "-", input=text)
    assert 'Warning: unknown field "resutls"' in warned.stderr, warned.stderr
    assert "created" in warned.stdout

    strict = k.run("apply", "--validate=strict", "-f", "-",
                   input=text.replace("name: typo", "name: typo2"), check=False)
    assert strict.returncode != 0
    assert 'unknown field "resutls"' in strict.stderr, strict.stderr

    unknown = report(POLR, "x", "team-a")
    unknown["kind"] = "PolicyReprot"
    refused = k.run("apply", "-f", "-", input=yaml.safe_dump(unknown), check=False)
    assert refused.returncode != 0
    assert 'no matches for kind "PolicyReprot" in version "wgpolicyk8s.io/v1alpha2"' in (
        refused.stderr), refused.stderr
    assert "failed to download openapi" not in refused.stderr

    bad = report(POLR, "bad", "team-a")
    bad["results"][0]["result"] = "maybe"
    invalid = k.run("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert invalid.returncode != 0
    assert ('The PolicyReport "bad" is invalid: results[0].result: Unsupported value: "maybe"'
            in invalid.stderr), invalid.stderr
