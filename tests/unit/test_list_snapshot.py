"""A continuation page's stream: the objects as they are now, with those that
changed since the first page as they were then (pure)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from hypothesis import given
from hypothesis import strategies as st

from apiserver.storage.service import Item, _with_snapshot

keys = st.tuples(st.sampled_from("abc"), st.sampled_from("uvwxyz"))


async def _stream(items: list[Item]) -> AsyncIterator[Item]:
    for item in items:
        yield item


async def _collect(items: AsyncIterator[Item]) -> list[Item]:
    return [i async for i in items]


@given(st.sets(keys), st.dictionaries(keys, st.booleans()))
def test_the_page_stream_is_the_snapshot_in_key_order(
        now: set[tuple[str, str]], changed: dict[tuple[str, str], bool]) -> None:
    current = [Item(ns, name, 2, obj={"now": True}) for ns, name in sorted(now)]
    # changed keys: True existed then (as version 1), False did not
    snapshot = {k: Item(k[0], k[1], 1, obj={"now": False}) if existed else None
                for k, existed in changed.items()}
    out = asyncio.run(_collect(_with_snapshot(_stream(current), snapshot)))
    got = [((i.namespace, i.name), i.resource_version) for i in out]
    expected = sorted({**{k: 2 for k in now if k not in changed},
                       **{k: 1 for k, existed in changed.items() if existed}}.items())
    assert got == expected
