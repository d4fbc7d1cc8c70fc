"""A change is offered to the watches that can see it: those of its
resource in its namespace and those of every namespace, not the watches of
other namespaces or resources (each would wake for every change)."""

from __future__ import annotations

from pipeline.model.cache import Cached, Event, Subscription
from pipeline.model.messages import Change
from pipeline.serving.changelog import Watchers


def _event(resource: str, namespace: str, name: str, rv: int) -> Event:
    obj = {"apiVersion": "v1", "kind": "X",
           "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)}}
    return Event((resource, namespace, name), Cached.of(Change("ADDED", obj, rv)))


def _queued(sub: Subscription) -> list[int]:
    out = []
    while not sub.queue.empty():
        event = sub.queue.get_nowait()
        out.append(event.change.resource_version if event else 0)
    return out


def test_events_go_to_their_namespace_and_to_every_namespace_watches() -> None:
    watchers = Watchers()
    everywhere = Subscription(("polr", None), 100)
    team_a = Subscription(("polr", "a"), 100)
    team_a_again = Subscription(("polr", "a"), 100)
    team_b = Subscription(("polr", "b"), 100)
    other_resource = Subscription(("ephr", None), 100)
    for sub in (everywhere, team_a, team_a_again, team_b, other_resource):
        watchers.add(sub)
    # how many watches each went to (what the dispatch time is observed for)
    assert watchers.offer(_event("polr", "a", "x", 1)) == 3
    assert watchers.offer(_event("polr", "b", "y", 2)) == 2
    assert watchers.offer(_event("ephr", "a", "z", 3)) == 1
    assert watchers.offer(_event("polr", "c", "w", 4)) == 1
    assert watchers.offer(_event("clpolr", "", "v", 5)) == 0
    assert _queued(everywhere) == [1, 2, 4]
    assert _queued(team_a) == _queued(team_a_again) == [1]
    assert _queued(team_b) == [2]
    assert _queued(other_resource) == [3]


def test_a_removed_watch_gets_nothing_more_and_close_ends_every_watch() -> None:
    watchers = Watchers()
    kept, removed = Subscription(("polr", "a"), 100), Subscription(("polr", "a"), 100)
    watchers.add(kept)
    watchers.add(removed)
    watchers.remove(removed)
    watchers.remove(removed)  # twice: harmless
    watchers.offer(_event("polr", "a", "x", 1))
    assert _queued(removed) == []
    watchers.close()
    assert _queued(kept) == [1, 0]  # its event, then the end
