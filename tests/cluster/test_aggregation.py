"""The system behind a real kube-apiserver's aggregation layer, driven with
the real kubectl as users and controllers meet it."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import GROUP_VERSIONS, System

pytestmark = pytest.mark.cluster


def test_the_apiservices_are_available(system: System) -> None:
    for name in GROUP_VERSIONS:
        conditions = system.cluster.kubectl.json("get", "apiservice", name)["status"][
            "conditions"]
        assert {"type": "Available", "status": "True"} in [
            {k: c[k] for k in ("type", "status")} for c in conditions]
