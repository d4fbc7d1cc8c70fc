"""Fuzzing the running system: schemathesis against the OpenAPI v3 documents it
serves, and hypothesis over patch bodies of every patch type. Whatever comes
in, the answer is never a 5xx nor a crash, every refusal is a ``Status``, and
the system serves afterwards."""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.model.resources import RESOURCES, groups
from tests.e2e.conftest import BIN, Kubectl, Up
from tests.helpers import collection_path, report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]


def _credentials(up: Up, tmp_path: Path) -> tuple[str, str, Path]:
    config = yaml.safe_load(up.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    return cluster["server"], config["users"][0]["user"]["token"], ca


def test_schemathesis_finds_no_server_error(up, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    system: Up = up()
    server, token, ca = _credentials(system, tmp_path)
    runs = [(group, version, ["--phases", "examples,fuzzing", "--max-examples", "15"])
            for group, version in groups().items()]
    # The coverage phase (boundary and invalid values of every parameter and
    # field) for one group: the others differ only by their schemas. Not for
    # reads: it asks for `watch=true` without a timeout, a stream that stays
    # open as the kube-apiserver's does.
    runs.append(("wgpolicyk8s.io", "v1alpha2",
                 ["--phases", "coverage", "--exclude-method", "GET"]))
    for group, version, phases in runs:
        # Bounded: a few examples per operation, positive and negative
        # bodies, parameters and headers, no state between calls. One worker:
        # schemathesis describes its filters by parsing its own source, and
        # Python 3.11's ast.parse in two threads at once can fail with
        # "SystemError: AST constructor recursion depth mismatch" (CPython
        # gh-106905), which ends the run with an error that is not the server's.
        result = subprocess.run(
            [str(BIN / "schemathesis"), "run", f"{server}/openapi/v3/apis/{group}/{version}",
             "--url", server, "--header", f"Authorization: Bearer {token}",
             "--tls-verify", str(ca), "--checks", "not_a_server_error", *phases,
             "--workers", "1", "--seed", "1", "--generation-database", "none", "--no-color",
             "--request-timeout", "30", "--report-dir", str(tmp_path / "report")],
            capture_output=True, text=True, timeout=240, check=False,
            cwd=tmp_path)  # its crash cache (.schemathesis/) stays out of the work tree
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
        # every selected operation was exercised
        selected = re.search(r"Selected: (\d+)/(\d+)", result.stdout)
        tested = re.search(r"Tested: (\d+)", result.stdout)
        assert selected and tested, result.stdout
        assert int(tested[1]) == int(selected[1]) > 0, result.stdout
    _serves_afterwards(system, server, token, ca)


def _trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def _serves_afterwards(system: Up, server: str, token: str, ca: Path) -> None:
    with httpx.Client(base_url=server, verify=_trusting(ca), timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        r = client.post(collection_path(POLR, "after"), json=report(POLR, "after", "after"))
        assert r.status_code == 201, r.text
        assert client.get(f"{collection_path(POLR, 'after')}/after").status_code == 200
    out = Kubectl(system.kubeconfig).run("get", "polr", "-n", "after").stdout
    assert "after" in out


FIELDS = ["results", "summary", "metadata", "labels", "annotations", "policy", "rule",
          "result", "severity", "scope", "pass", "fail", "name", "namespace", "finalizers",
          "resourceVersion", "uid", "generation", "$patch", "$retainKeys",
          "$setElementOrder/results", "kind", "apiVersion", "properties", "source"]
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.sampled_from(["pass", "fail", "maybe", "", "x" * 300, "Critical", "7"])
           | st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=4), max_leaves=20)
paths = st.sampled_from(["/results", "/results/0", "/results/-", "/results/0/result",
                         "/summary/pass", "/metadata/labels", "/metadata/labels/a~1b",
                         "/metadata/name", "/metadata/resourceVersion", "/scope", "", "/",
                         "/results/99", "/nope/deeper", "results"]) | st.text(max_size=12)
operations = st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "bogus"]),
     "path": paths},
    optional={"value": values, "from": paths})
json_patches = st.lists(operations, max_size=5) | values
bodies = st.one_of(
    st.tuples(st.just("application/merge-patch+json"), values.map(json.dumps)),
    st.tuples(st.just("application/strategic-merge-patch+json"), values.map(json.dumps)),
    st.tuples(st.just("application/json-patch+json"), json_patches.map(json.dumps)),
    st.tuples(st.just("application/apply-patch+yaml"), values.map(yaml.safe_dump)),
    st.tuples(st.sampled_from(["application/merge-patch+json", "application/json-patch+json",
                               "application/apply-patch+yaml", "text/plain"]),
              st.text(max_size=40)),
)


def _is_status(r: httpx.Response) -> bool:
    try:
        body: Any = r.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("kind") == "Status"


def test_patch_bodies_never_break_the_server(up, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    system: Up = up()
    server, token, ca = _credentials(system, tmp_path)
    path = f"{collection_path(POLR, 'fuzz')}/target"
    seen: dict[int, int] = {}
    with httpx.Client(base_url=server, verify=_trusting(ca), timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:

        @settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(body=bodies, manager=st.sampled_from([None, "fuzz"]))
        def patch(body: tuple[str, str], manager: str | None) -> None:
            if client.get(path).status_code == 404:
                created = client.post(collection_path(POLR, "fuzz"),
                                      json=report(POLR, "target", "fuzz", fail=1))
                assert created.status_code == 201, created.text
            content_type, text = body
            params = {"fieldManager": manager} if manager else {}
            r = client.patch(path, content=text.encode(), params=params,
                             headers={"Content-Type": content_type})
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
            assert r.status_code < 500, (r.status_code, r.text, body)
            if r.status_code >= 400:
                assert _is_status(r), (r.status_code, r.text)
            else:
                assert r.json()["metadata"]["name"] == "target", r.text

        patch()
    # both accepted and refused patches were tried
    assert any(code < 300 for code in seen) and any(code >= 400 for code in seen), seen
    _serves_afterwards(system, server, token, ca)

