"""The committer's pure decisions."""

from __future__ import annotations

from dataclasses import replace

from pipeline.commit.decision import current_after, decide
from pipeline.commit.state import kept
from pipeline.model.messages import Op, WriteRequest
from pipeline.model.resources import RESOURCES
from pipeline.model.versions import Current
from tests.helpers import report

POLR = RESOURCES[0]
NOW = "2026-11-21T10:00:00Z"


def req(op: Op, rid: str = "r1", obj: dict | None = None, **pre: str) -> WriteRequest:
    return WriteRequest(id=rid, op=op, resource=POLR.id, namespace="ns", name="a",
                        reply_to="replies", now=NOW, obj=obj, preconditions=pre)


def created(rv: int = 5) -> Current:
    d = decide(req("create", "c", report(POLR, "a", "ns")), None, rv)
    assert d.change is not None
    return current_after(d.change)


def test_create_sets_system_metadata() -> None:
    d = decide(req("create", obj=report(POLR, "a", "ns")), None, 7)
    assert d.change is not None and d.change.type == "ADDED"
    meta = d.change.obj["metadata"]
    assert meta["resourceVersion"] == "7" and meta["generation"] == 1
    assert meta["creationTimestamp"] == NOW and len(meta["uid"]) == 36
    assert d.reply.obj is None and d.reply.status is None  # the change log has the object


def test_create_is_deterministic_for_one_request() -> None:
    a = decide(req("create", obj=report(POLR, "a", "ns")), None, 7)
    b = decide(req("create", obj=report(POLR, "a", "ns")), None, 7)
    assert a == b


def test_create_existing_is_already_exists() -> None:
    d = decide(req("create", "r2", report(POLR, "a", "ns")), created(), 9)
    assert d.change is None and d.reply.status is not None
    assert (d.reply.status["code"], d.reply.status["reason"]) == (409, "AlreadyExists")


def test_redelivered_request_gets_the_first_answer_and_no_change() -> None:
    cur = created()
    d = decide(req("create", "c", report(POLR, "a", "ns")), cur, 9)
    assert d.change is None and d.reply.status is None
    assert d.reply.resource_version == cur.resource_version


def test_update_with_stale_resource_version_conflicts() -> None:
    obj = report(POLR, "a", "ns", fail=1)
    obj["metadata"]["resourceVersion"] = "4"
    d = decide(req("update", "u", obj), created(5), 9)
    assert d.change is None and d.reply.status["code"] == 409
    assert d.reply.status["reason"] == "Conflict"


def test_update_keeps_identity_and_bumps_generation() -> None:
    cur = created(5)
    obj = report(POLR, "a", "ns", fail=2)
    obj["metadata"].update(resourceVersion="5", uid="forged",
                           creationTimestamp="1999-01-01T00:00:00Z")
    d = decide(req("update", "u", obj), cur, 9)
    assert d.change is not None and d.change.type == "MODIFIED"
    meta = d.change.obj["metadata"]
    assert meta["uid"] == cur.obj["metadata"]["uid"]
    assert meta["creationTimestamp"] == NOW
    assert meta["generation"] == 2 and meta["resourceVersion"] == "9"


def test_metadata_only_update_keeps_generation() -> None:
    cur = created(5)
    obj = report(POLR, "a", "ns", labels={"x": "y"})
    obj["metadata"]["resourceVersion"] = "5"
    d = decide(req("update", "u", obj), cur, 9)
    assert d.change is not None and d.change.obj["metadata"]["generation"] == 1


def test_update_or_delete_of_missing_is_not_found() -> None:
    for op in ("update", "delete"):
        d = decide(req(op, obj=report(POLR, "a", "ns")), None, 3)
        assert d.change is None and d.reply.status["code"] == 404


def test_delete_emits_deleted_with_new_resource_version() -> None:
    d = decide(req("delete", "d"), created(5), 6)
    assert d.change is not None and d.change.type == "DELETED"
    assert d.change.obj["metadata"]["resourceVersion"] == "6"
    after = current_after(d.change)
    assert after.deleted
    again = decide(req("create", "c2", report(POLR, "a", "ns")), after, 7)
    assert again.change is not None and again.change.type == "ADDED"


def test_delete_preconditions() -> None:
    cur = created(5)
    assert decide(req("delete", "d", uid="other"), cur, 6).reply.status["code"] == 409
    assert decide(req("delete", "d", resourceVersion="4"), cur, 6).reply.status["code"] == 409
    ok = decide(req("delete", "d", uid=cur.obj["metadata"]["uid"], resourceVersion="5"), cur, 6)
    assert ok.change is not None


def test_finalizers_delay_deletion_until_removed() -> None:
    obj = report(POLR, "a", "ns")
    obj["metadata"]["finalizers"] = ["example.com/keep"]
    first = decide(req("create", "c", obj), None, 5)
    assert first.change is not None
    cur = current_after(first.change)
    d = decide(req("delete", "d"), cur, 6)
    assert d.change is not None and d.change.type == "MODIFIED"
    assert d.change.obj["metadata"]["deletionTimestamp"] == NOW
    cur = current_after(d.change)
    released = dict(cur.obj, metadata={**cur.obj["metadata"], "finalizers": []})
    d2 = decide(req("update", "u", released), cur, 7)
    assert d2.change is not None and d2.change.type == "DELETED"


def test_foreground_and_orphan_deletions_leave_the_garbage_collectors_finalizer() -> None:
    created = decide(req("create", "c", report(POLR, "a", "ns")), None, 5)
    assert created.change is not None
    cur = current_after(created.change)
    for finalizer in ("foregroundDeletion", "orphan"):
        d = decide(replace(req("delete", "d"), finalizer=finalizer), cur, 6)
        assert d.change is not None and d.change.type == "MODIFIED"
        meta = d.change.obj["metadata"]
        assert meta["finalizers"] == [finalizer] and meta["deletionTimestamp"] == NOW
        # asked again while deleting: nothing new to record
        again = decide(replace(req("delete", "d2"), finalizer=finalizer),
                       current_after(d.change), 7)
        assert again.change is None
    background = decide(req("delete", "d"), cur, 6)
    assert background.change is not None and background.change.type == "DELETED"


def test_the_committer_keeps_the_objects_written_last_and_forgets_deletions() -> None:
    """Once ClickHouse holds them: every deletion goes, and of the objects
    that exist the ``most`` written last stay (the reports writers come back
    to); versions ClickHouse does not hold yet all stay."""
    def at(rv: int, deleted: bool = False) -> Current:
        return Current(rv, b"{}", deleted)
    state = {("r", "ns", "hot"): at(9), ("r", "ns", "cold"): at(2), ("r", "ns", "warm"): at(7),
             ("r", "ns", "gone"): at(8, deleted=True), ("r", "ns", "new"): at(11),
             ("r", "ns", "new-gone"): at(12, deleted=True)}
    assert set(kept(state, 10, 2)) == {("r", "ns", k) for k in ("hot", "warm", "new", "new-gone")}
    assert set(kept(state, 10, 0)) == {("r", "ns", "new"), ("r", "ns", "new-gone")}
