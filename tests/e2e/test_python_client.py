"""The official Python Kubernetes client against the frontend: list then watch
from the list's resourceVersion, metadata-only lists, optimistic concurrency,
and the 410 a too-old watch gets."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from pipeline.model.resources import RESOURCES
from tests.helpers import report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]
ARGS = (POLR.group, POLR.version, "team", POLR.plural)


def api_for(up_instance) -> tuple[client.ApiClient, client.CustomObjectsApi]:  # type: ignore[no-untyped-def]
    api_client = config.new_client_from_config(config_file=str(up_instance.kubeconfig))
    return api_client, client.CustomObjectsApi(api_client)


def test_list_watch_metadata_conflict_and_expiry(up) -> None:  # type: ignore[no-untyped-def]
    api_client, api = api_for(up({"REPORTS_WATCH_CACHE_SIZE": "6"}))
    with api_client:
        first = api.create_namespaced_custom_object(*ARGS, report(POLR, "a", "team"))
        listed = api.list_namespaced_custom_object(*ARGS)
        list_rv = listed["metadata"]["resourceVersion"]
        assert [i["metadata"]["name"] for i in listed["items"]] == ["a"]

        api.create_namespaced_custom_object(*ARGS, report(POLR, "b", "team"))
        api.delete_namespaced_custom_object(*ARGS, "a")
        w = watch.Watch()
        seen = []
        for event in w.stream(api.list_namespaced_custom_object, *ARGS,
                              resource_version=list_rv, timeout_seconds=20):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 2:
                w.stop()
        assert seen == [("ADDED", "b"), ("DELETED", "a")]

        request = api_client.param_serialize(
            "GET", f"/apis/{POLR.group}/{POLR.version}/namespaces/team/{POLR.plural}",
            header_params={"Accept": "application/json;as=PartialObjectMetadataList;v=v1;"
                                     "g=meta.k8s.io"}, auth_settings=["BearerToken"])
        response = api_client.call_api(*request[:4])
        response.read()
        meta = json.loads(response.data)
        assert meta["kind"] == "PartialObjectMetadataList"
        assert [i["metadata"]["name"] for i in meta["items"]] == ["b"]

        b = api.get_namespaced_custom_object(*ARGS, "b")
        b["summary"]["fail"] = 1
        api.replace_namespaced_custom_object(*ARGS, "b", b)  # succeeds once
        with pytest.raises(ApiException) as stale:
            api.replace_namespaced_custom_object(*ARGS, "b", b)  # same, now stale
        assert stale.value.status == 409

        for i in range(8):
            api.create_namespaced_custom_object(*ARGS, report(POLR, f"fill{i}", "team"))
        with pytest.raises(ApiException) as expired:
            for _ in watch.Watch().stream(api.list_namespaced_custom_object, *ARGS,
                                          resource_version=first["metadata"]["resourceVersion"],
                                          timeout_seconds=20):
                pass
        assert expired.value.status == 410
