"""The Kubernetes API contract beyond plain CRUD: selectors, paging,
resourceVersion semantics, watch, patch, metadata rules, dry run, field
validation, and two frontend replicas on one pipeline."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from pipeline.model.resources import RESOURCES
from tests.helpers import collection_path, report
from tests.integration.conftest import serve, watch_until

pytestmark = pytest.mark.integration
POLR, CPOLR = RESOURCES[0], RESOURCES[1]
PATH = collection_path(POLR, "ns")
META_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"


async def create(api: httpx.AsyncClient, name: str, *, ns: str = "ns",
                 labels: dict[str, str] | None = None, fail: int = 0) -> dict:  # type: ignore[type-arg]
    r = await api.post(collection_path(POLR, ns), json=report(POLR, name, ns, fail=fail,
                                                              labels=labels))
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def names(body: dict) -> list[str]:  # type: ignore[type-arg]
    return [i["metadata"]["name"] for i in body["items"]]


async def test_selectors(api: httpx.AsyncClient) -> None:
    await create(api, "a", labels={"app": "web", "tier": "front"})
    await create(api, "b", labels={"app": "db"})
    await create(api, "c")
    await create(api, "d", ns="other", labels={"app": "web"})
    cases = {"app=web": ["a"], "app!=web": ["b", "c"], "app in (web,db)": ["a", "b"],
             "app notin (web)": ["b", "c"], "app": ["a", "b"], "!app": ["c"],
             "app=web,tier=front": ["a"], "tier,app=db": []}
    for selector, expected in cases.items():
        r = await api.get(PATH, params={"labelSelector": selector})
        assert names(r.json()) == expected, selector
    # labels changed after materialization still select correctly (cache overlay)
    current = (await api.get(f"{PATH}/c")).json()
    current["metadata"]["labels"] = {"app": "web"}
    assert (await api.put(f"{PATH}/c", json=current)).status_code == 200
    assert names((await api.get(PATH, params={"labelSelector": "app=web"})).json()) == ["a", "c"]
    everywhere = collection_path(POLR, None)
    r = await api.get(everywhere, params={"fieldSelector": "metadata.namespace=other"})
    assert names(r.json()) == ["d"]
    r = await api.get(everywhere, params={"fieldSelector": "metadata.name!=a,metadata.name!=d"})
    assert names(r.json()) == ["b", "c"]
    for bad in ({"labelSelector": "app in web"}, {"labelSelector": "=x"},
                {"fieldSelector": "spec.foo=x"}, {"continue": "garbage"},
                {"resourceVersion": "x"}, {"resourceVersionMatch": "Exact"}):
        r = await api.get(PATH, params=bad)
        assert r.status_code == 400 and r.json()["reason"] == "BadRequest", bad


async def test_paging_sees_each_object_at_most_once_while_data_changes(
        api: httpx.AsyncClient) -> None:
    for i in range(7):
        await create(api, f"p{i}")
    seen: list[str] = []
    token = ""
    rvs = set()
    pages = 0
    while True:
        params = {"limit": "2"}
        if token:
            params["continue"] = token
        body = (await api.get(PATH, params=params)).json()
        pages += 1
        seen += names(body)
        rvs.add(body["metadata"]["resourceVersion"])
        token = body["metadata"].get("continue", "")
        if pages == 1:  # the data changes between pages: every page is
            # still the first page's snapshot, as kube-apiserver serves it
            await create(api, "p00")  # created since: not seen
            await create(api, "p9")  # created since: not seen
            assert (await api.delete(f"{PATH}/p5")).status_code == 200  # seen, as it was
        if not token:
            break
    assert seen == ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]
    assert len(seen) == len(set(seen)) and len(rvs) == 1 and pages == 4
    other = await api.get(collection_path(POLR, "elsewhere"), params={"continue": token or
                          (await api.get(PATH, params={"limit": "1"})).json()["metadata"][
                              "continue"]})
    assert other.status_code == 400


async def test_resource_version_semantics(api: httpx.AsyncClient) -> None:
    created = await create(api, "x")
    rv = int(created["metadata"]["resourceVersion"])
    listed = (await api.get(PATH)).json()
    assert int(listed["metadata"]["resourceVersion"]) >= rv
    for params in ({"resourceVersion": "0"}, {"resourceVersion": str(rv)},
                   {"resourceVersion": str(rv), "resourceVersionMatch": "NotOlderThan"}):
        r = await api.get(PATH, params=params)
        assert r.status_code == 200 and names(r.json()) == ["x"], params
    exact = await api.get(PATH, params={"resourceVersion": listed["metadata"]["resourceVersion"],
                                        "resourceVersionMatch": "Exact"})
    assert exact.status_code == 200
    await create(api, "y")
    old = await api.get(PATH, params={"resourceVersion": str(rv), "resourceVersionMatch": "Exact"})
    assert old.status_code == 410 and old.json()["reason"] == "Expired"
    # a version the store never reached (from another store: the etcd the
    # reports were migrated from) is "too large", for lists and watches
    # alike, with the cause on which client-go's reflectors list afresh
    future = await api.get(PATH, params={"resourceVersion": str(rv + 1000)})
    assert future.status_code == 504
    assert future.json()["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    watched = await api.get(PATH, params={"watch": "true", "resourceVersion": str(rv + 1000)})
    [event] = [json.loads(line) for line in watched.text.splitlines()]
    assert event["type"] == "ERROR" and event["object"]["code"] == 504
    assert event["object"]["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


async def test_metadata_only_and_table_lists(api: httpx.AsyncClient) -> None:
    await create(api, "m", labels={"a": "b"})
    r = await api.get(PATH, headers={"Accept": META_LIST + ",application/json"})
    body = r.json()
    assert body["kind"] == "PartialObjectMetadataList"
    assert body["items"][0]["kind"] == "PartialObjectMetadata"
    assert body["items"][0]["metadata"]["labels"] == {"a": "b"}
    assert "results" not in body["items"][0]
    one = await api.get(f"{PATH}/m", headers={
        "Accept": "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"})
    assert one.json()["kind"] == "PartialObjectMetadata"
    assert (await api.get(PATH, headers={"Accept": "application/yaml"})).text.startswith(
        "apiVersion: wgpolicyk8s.io/v1alpha2\nkind: PolicyReportList")
    r = await api.get(PATH, headers={"Accept": "application/vnd.kubernetes.protobuf"})
    assert r.status_code == 406 and r.json()["reason"] == "NotAcceptable"
    # watches end by themselves after timeoutSeconds; unset and "0" start with the state
    for rv in (None, "0"):
        params = {"watch": "true", "timeoutSeconds": "1"}
        if rv is not None:
            params["resourceVersion"] = rv
        watched = await api.get(PATH, params=params, headers={
            "Accept": "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"})
        events = [json.loads(line) for line in watched.text.splitlines()]
        assert [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"])
                for e in events] == [("ADDED", "PartialObjectMetadata", "m")]


async def test_patches(api: httpx.AsyncClient) -> None:
    await create(api, "q")
    merge = {"Content-Type": "application/merge-patch+json"}
    r = await api.patch(f"{PATH}/q", content=b'{"metadata":{"labels":{"k":"v"}},'
                        b'"summary":{"fail":3}}', headers=merge)
    assert r.status_code == 200 and r.json()["summary"]["fail"] == 3
    assert r.json()["metadata"]["labels"] == {"k": "v"}
    r = await api.patch(f"{PATH}/q", content=b'[{"op":"replace","path":"/summary/fail",'
                        b'"value":5}]', headers={"Content-Type": "application/json-patch+json"})
    assert r.status_code == 200 and r.json()["summary"]["fail"] == 5
    r = await api.patch(f"{PATH}/q", content=b'[{"op":"test","path":"/summary/fail",'
                        b'"value":1}]', headers={"Content-Type": "application/json-patch+json"})
    assert r.status_code == 422
    r = await api.patch(f"{PATH}/q", content=b"{}",
                        headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert r.status_code == 415 and r.json()["reason"] == "UnsupportedMediaType"
    stale = await api.patch(f"{PATH}/q", content=b'{"metadata":{"resourceVersion":"1"}}',
                            headers=merge)
    assert stale.status_code == 409
    missing = await api.patch(f"{PATH}/nope", content=b"{}", headers=merge)
    assert missing.status_code == 404
    apply = {"Content-Type": "application/apply-patch+yaml"}
    doc = report(POLR, "applied", "ns", labels={"x": "1", "y": "2"})
    r = await api.patch(f"{PATH}/applied", json=doc, headers=apply,
                        params={"fieldManager": "tester"})
    assert r.status_code == 201, r.text
    doc["metadata"]["labels"] = {"x": "1"}
    r = await api.patch(f"{PATH}/applied", json=doc, headers=apply,
                        params={"fieldManager": "tester"})
    assert r.status_code == 200 and r.json()["metadata"]["labels"] == {"x": "1"}
    assert [m["manager"] for m in r.json()["metadata"]["managedFields"]] == ["tester"]
    r = await api.patch(f"{PATH}/applied", json=doc, headers=apply)
    assert r.status_code == 422


async def test_metadata_rules_finalizers_preconditions_and_dry_run(
        api: httpx.AsyncClient) -> None:
    bad = report(POLR, "bad", "ns", labels={"not valid!": "x"})
    r = await api.post(PATH, json=bad)
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"].startswith(
        "metadata.labels")
    gen = report(POLR, "ignored", "ns")
    gen["metadata"] = {"generateName": "gen-"}
    r = await api.post(PATH, json=gen)
    assert r.status_code == 201 and r.json()["metadata"]["name"].startswith("gen-")

    owned = report(POLR, "owned", "ns")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                             "uid": "u-1", "controller": True}]
    owned["metadata"]["finalizers"] = ["example.com/hold"]
    created = (await api.post(PATH, json=owned)).json()
    assert created["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    dry = await api.delete(f"{PATH}/owned", params={"dryRun": "All"})
    assert dry.status_code == 200 and "deletionTimestamp" in dry.json()["metadata"]
    assert "deletionTimestamp" not in (await api.get(f"{PATH}/owned")).json()["metadata"]
    wrong = await api.request("DELETE", f"{PATH}/owned", json={
        "kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "nope"}})
    assert wrong.status_code == 409
    r = await api.request("DELETE", f"{PATH}/owned", json={
        "preconditions": {"uid": created["metadata"]["uid"]}})
    assert r.status_code == 200 and r.json()["metadata"]["deletionTimestamp"]
    held = (await api.get(f"{PATH}/owned")).json()
    held["metadata"]["finalizers"] = []
    assert (await api.put(f"{PATH}/owned", json=held)).status_code == 200
    assert (await api.get(f"{PATH}/owned")).status_code == 404

    r = await api.post(PATH, json=report(POLR, "dry", "ns"), params={"dryRun": "All"})
    assert r.status_code == 201 and "resourceVersion" not in r.json()["metadata"]
    assert (await api.get(f"{PATH}/dry")).status_code == 404


async def test_field_validation(api: httpx.AsyncClient) -> None:
    doc = report(POLR, "fv", "ns")
    doc["bogus"] = 1
    doc["results"][0]["extra"] = "x"
    strict = await api.post(PATH, json=doc, params={"fieldValidation": "Strict"})
    assert strict.status_code == 400 and 'unknown field "bogus"' in strict.json()["message"]
    warn = await api.post(PATH, json=doc, params={"fieldValidation": "Warn"})
    assert warn.status_code == 201
    # one Warning header each, quoted and escaped as the kube-apiserver writes them
    assert sorted(warn.headers.get_list("warning")) == [
        '299 - "unknown field \\"bogus\\""', '299 - "unknown field \\"results[0].extra\\""']
    assert "bogus" not in warn.json() and "extra" not in warn.json()["results"][0]
    doc["metadata"]["name"] = "fv2"
    ignored = await api.post(PATH, json=doc, params={"fieldValidation": "Ignore"})
    assert ignored.status_code == 201 and "warning" not in ignored.headers
    assert "bogus" not in ignored.json()


async def test_verbs_and_paths(api: httpx.AsyncClient) -> None:
    await create(api, "v")
    assert (await api.post(f"{PATH}/v", json={})).status_code == 405
    assert (await api.put(PATH, json={})).status_code == 405
    assert (await api.post(collection_path(POLR, None), json={})).status_code == 405
    r = await api.get(f"/apis/{CPOLR.group}/{CPOLR.version}/namespaces/ns/{CPOLR.plural}")
    assert r.status_code == 404
    for r in (await api.get(f"{PATH}?labelSelector=(")), (await api.get("/apis/x/y/z")):
        assert r.json()["kind"] == "Status"
    deleted = await api.delete(PATH, params={"labelSelector": "!nothing"})
    assert deleted.status_code == 200 and names(deleted.json()) == ["v"]
    assert names((await api.get(PATH)).json()) == []


async def test_watch_filters_and_expiry(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    running = await start(make_settings(watch_cache_size=8))
    api = running.client
    await create(api, "w0", labels={"app": "web"})
    rv = (await api.get(PATH)).json()["metadata"]["resourceVersion"]
    async with serve(running.system.app) as url, httpx.AsyncClient(
            base_url=url, headers=api.headers) as client:
        started = asyncio.Event()
        watcher = asyncio.create_task(watch_until(
            client, PATH, {"resourceVersion": rv, "labelSelector": "app=web",
                           "allowWatchBookmarks": "true"},
            lambda ev: any(e["type"] == "DELETED" for e in ev), started=started))
        await started.wait()
        await create(api, "w1", labels={"app": "db"})  # not selected
        await create(api, "w2", labels={"app": "web"})
        moved = (await api.get(f"{PATH}/w1")).json()
        moved["metadata"]["labels"] = {"app": "web"}
        assert (await api.put(f"{PATH}/w1", json=moved)).status_code == 200
        assert (await api.delete(f"{PATH}/w2")).status_code == 200
        events = [(e["type"], e["object"]["metadata"].get("name")) for e in await watcher
                  if e["type"] != "BOOKMARK"]
        assert events == [("ADDED", "w2"), ("ADDED", "w1"), ("DELETED", "w2")]

        initial = await watch_until(client, PATH, {"sendInitialEvents": "true",
                                                   "allowWatchBookmarks": "true",
                                                   "resourceVersionMatch": "NotOlderThan"},
                                    lambda ev: ev[-1]["type"] == "BOOKMARK")
        assert [e["object"]["metadata"]["name"] for e in initial[:-1]] == ["w0", "w1"]
        assert initial[-1]["object"]["metadata"]["annotations"] == {
            "k8s.io/initial-events-end": "true"}

        for i in range(10):
            await create(api, f"fill{i}")
        expired = await watch_until(client, PATH, {"resourceVersion": rv},
                                    lambda ev: bool(ev))
        assert expired[0]["type"] == "ERROR" and expired[0]["object"]["code"] == 410
        quiet = await watch_until(client, PATH, {"resourceVersion": "0",
                                                 "timeoutSeconds": "1"}, lambda ev: False)
        assert len(quiet) == 12


async def test_two_frontends_share_one_pipeline(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings()
    first = await start(settings)
    second = await start(settings, worker=False)
    a, b = first.client, second.client
    rv = (await b.get(PATH)).json()["metadata"]["resourceVersion"]
    async with serve(second.system.app) as url, httpx.AsyncClient(
            base_url=url, headers=b.headers) as client:
        watcher = asyncio.create_task(watch_until(client, PATH, {"resourceVersion": rv},
                                                  lambda ev: len(ev) >= 2))
        created = await create(a, "shared")
        got = await b.get(f"{PATH}/shared")  # read-your-writes across replicas
        assert got.status_code == 200 and got.json() == created
        assert (await b.delete(f"{PATH}/shared")).status_code == 200
        assert (await a.get(f"{PATH}/shared")).status_code == 404
        events = await watcher
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "shared"), ("DELETED", "shared")]
        # and once the first frontend's cache is current, so that its writer
        # could be answered before the transaction's markers are written
        for i in range(20):
            created = await create(a, f"next{i}")
            got = await b.get(f"{PATH}/next{i}")
            assert got.status_code == 200 and got.json() == created, i


async def test_discovery_legacy_and_aggregated(api: httpx.AsyncClient) -> None:
    legacy = await api.get("/apis", headers={"Accept": "application/json"})
    assert legacy.json()["kind"] == "APIGroupList"
    # what client-go and the aggregator send: the aggregated form first
    accept = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
              "application/json")
    r = await api.get("/apis", headers={"Accept": accept})
    assert r.headers["content-type"] == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    body = r.json()
    assert body["kind"] == "APIGroupDiscoveryList"
    assert body["apiVersion"] == "apidiscovery.k8s.io/v2"
    found = {}
    for group in body["items"]:
        [version] = group["versions"]
        assert version["freshness"] == "Current"
        legacy_list = (await api.get(f"/apis/{group['metadata']['name']}/{version['version']}"))
        legacy_names = {x["name"]: x for x in legacy_list.json()["resources"]}
        for res in version["resources"]:
            same = legacy_names[res["resource"]]
            assert res["verbs"] == same["verbs"] and res["shortNames"] == same["shortNames"]
            assert res["scope"] == ("Namespaced" if same["namespaced"] else "Cluster")
            assert res["responseKind"] == {"group": group["metadata"]["name"],
                                           "version": version["version"], "kind": same["kind"]}
            found[res["resource"]] = res["singularResource"]
    assert found == {r.plural: r.singular for r in RESOURCES}
    # unchanged: the client's cached copy stays good
    again = await api.get("/apis", headers={"Accept": accept,
                                            "If-None-Match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""

    # /api in the form asked for: aggregated (no core group served here, so
    # client-go asks nothing more of it), or the legacy APIVersions
    core = await api.get("/api", headers={"Accept": accept})
    assert core.headers["content-type"] == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    assert core.json() == {"kind": "APIGroupDiscoveryList",
                           "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
                           "items": []}
    assert (await api.get("/api", headers={"Accept": accept, "If-None-Match":
                                           core.headers["etag"]})).status_code == 304
    plain = await api.get("/api", headers={"Accept": "application/json"})
    assert plain.json()["kind"] == "APIVersions"


async def test_a_fresh_store_lists_and_watches_at_a_real_resource_version(
        start, make_settings) -> None:  # type: ignore[no-untyped-def]
    """client-go's RetryWatcher (Kyverno's report counters) refuses a list at
    "0": a store never written lists at 1, as etcd's first revision, and a
    watch from there sees the first write."""
    running = await start(make_settings())
    api = running.client
    for path in (PATH, collection_path(POLR, None), collection_path(CPOLR, None)):
        rv = (await api.get(path)).json()["metadata"]["resourceVersion"]
        assert rv == "1", path
    async with serve(running.system.app) as url, httpx.AsyncClient(
            base_url=url, headers=api.headers) as client:
        started = asyncio.Event()
        watch = asyncio.create_task(watch_until(client, PATH, {"resourceVersion": "1"},
                                                lambda events: len(events) >= 1,
                                                started=started))
        await started.wait()
        created = await create(api, "first")
        [event] = await watch
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["resourceVersion"] == created["metadata"][
        "resourceVersion"]
    assert int(created["metadata"]["resourceVersion"]) > 1


async def test_server_side_apply_conflicts_with_other_managers(api: httpx.AsyncClient) -> None:
    """As kube-apiserver: a second manager applying another value to a field
    the first owns gets 409 with a cause per field and manager; force=true
    takes the field; ordinary writes record their manager's fields."""
    apply = {"Content-Type": "application/apply-patch+yaml"}
    doc = report(POLR, "owned-fields", "ns", labels={"team": "a"})
    r = await api.patch(f"{PATH}/owned-fields", json=doc, headers=apply,
                        params={"fieldManager": "alice"})
    assert r.status_code == 201, r.text
    doc["metadata"]["labels"] = {"team": "b"}
    r = await api.patch(f"{PATH}/owned-fields", json=doc, headers=apply,
                        params={"fieldManager": "bob"})
    assert r.status_code == 409, r.text
    status = r.json()
    assert status["reason"] == "Conflict"
    assert status["message"] == ('Apply failed with 1 conflict: conflict with "alice":'
                                 ' .metadata.labels.team')
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict",
                                            "message": 'conflict with "alice"',
                                            "field": ".metadata.labels.team"}]
    assert (await api.get(f"{PATH}/owned-fields")).json()["metadata"]["labels"] == {
        "team": "a"}
    r = await api.patch(f"{PATH}/owned-fields", json=doc, headers=apply,
                        params={"fieldManager": "bob", "force": "true"})
    assert r.status_code == 200 and r.json()["metadata"]["labels"] == {"team": "b"}
    fields = {(m["manager"], m["operation"]): m["fieldsV1"]
              for m in r.json()["metadata"]["managedFields"]}
    assert "f:team" in fields[("bob", "Apply")]["f:metadata"]["f:labels"]
    assert "f:team" not in fields[("alice", "Apply")]["f:metadata"].get("f:labels", {})

    # an ordinary write: its manager (fieldManager, else the user agent) takes
    # the fields it changed, and the next apply of another value conflicts
    r = await api.patch(f"{PATH}/owned-fields", headers={
        "Content-Type": "application/merge-patch+json", "User-Agent": "kubectl/v1.37.2"},
        json={"metadata": {"labels": {"team": "c"}}})
    assert r.status_code == 200
    managers = {(m["manager"], m["operation"]) for m in r.json()["metadata"]["managedFields"]}
    assert ("kubectl", "Update") in managers
    r = await api.patch(f"{PATH}/owned-fields", json=doc, headers=apply,
                        params={"fieldManager": "bob"})
    assert r.status_code == 409
    assert r.json()["details"]["causes"][0]["message"] == (
        'conflict with "kubectl" using wgpolicyk8s.io/v1alpha2')
