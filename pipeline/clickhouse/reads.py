"""The frontend's reads of objects: a GET (those made together asked as
one query), the pages of a LIST, the versions a watch or a list's snapshot
asks for; and the latest state of keys, which the committer recovers from."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from clickhouse_connect.driver.client import Client

from pipeline.clickhouse.coalesce import Coalesced
from pipeline.clickhouse.connection import Connection
from pipeline.model.storage import StoredObject
from pipeline.model.versions import Current


async def current(connection: Connection, keys: Iterable[tuple[str, str, str]]
                  ) -> dict[tuple[str, str, str], Current]:
    """Latest committed state of the given (resource, namespace, name)
    keys: each key's rows newest first, the first taken (FINAL would merge
    every part's rows around the keys)."""
    wanted = list(keys)
    if not wanted:
        return {}

    def query(client: Client) -> dict[tuple[str, str, str], Current]:
        result = client.query(
            "SELECT resource, namespace, name, resource_version, deleted, object"
            " FROM reports WHERE (resource, namespace, name) IN {keys:Array(Tuple(String,"
            " String, String))} ORDER BY resource_version DESC LIMIT 1 BY resource,"
            " namespace, name", parameters={"keys": wanted},
            column_formats={"object": "bytes"})
        return {(r[0], r[1], r[2]): Current(int(r[3]), r[5], bool(r[4]))
                for r in result.result_rows}
    return await connection.run(query)


class ObjectReads:
    """Objects read on ``connection``; ``close`` fails the GETs still waiting."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._gets: Coalesced[tuple[str, str, str], Current] = Coalesced(self._current)

    async def _current(self, keys: list[tuple[str, str, str]]
                       ) -> dict[tuple[str, str, str], Current]:
        return await current(self._connection, keys)

    async def close(self) -> None:
        await self._gets.close()

    async def get(self, resource: str, namespace: str, name: str) -> StoredObject | None:
        """The object's latest version, unless that is its deletion. Reads
        made while others are in flight are asked together (``current``)."""
        found = await self._gets.get((resource, namespace, name))
        if found is None or found.deleted:
            return None
        return StoredObject(found.resource_version, namespace, name, found.raw)

    async def versions(self, resource: str, wanted: Sequence[tuple[str, str, int]]
                       ) -> dict[tuple[str, str], StoredObject]:
        """The given (namespace, name, resourceVersion) versions of objects,
        while ClickHouse still holds them: a merge keeps only an object's
        newest version, so one that was replaced may be gone."""
        if not wanted:
            return {}
        sql = ("SELECT resource_version, namespace, name, object FROM reports"
               " WHERE resource = {r:String} AND namespace IN {nss:Array(String)}"
               " AND name IN {names:Array(String)}"
               " AND has({keys:Array(Tuple(String, String, UInt64))},"
               " (namespace, name, resource_version)) AND NOT deleted")
        params = {"r": resource, "nss": sorted({w[0] for w in wanted}),
                  "names": sorted({w[1] for w in wanted}), "keys": list(wanted)}

        def query(client: Client) -> dict[tuple[str, str], StoredObject]:
            rows = client.query(sql, parameters=params,
                                column_formats={"object": "bytes"}).result_rows
            return {(r[1], r[2]): StoredObject(int(r[0]), r[1], r[2], r[3]) for r in rows}
        return await self._connection.run(query)

    async def list_page(self, resource: str, *, namespace: str | None,
                        conditions: Sequence[str] = (), params: dict[str, Any] | None = None,
                        after: tuple[str, str] | None = None, limit: int = 1000
                        ) -> list[StoredObject]:
        """Current objects in (namespace, name) order after ``after``: ``limit``
        of them, fewer only at the end. Extra ``conditions`` reference bound
        ``params``; callers build both.

        One query reads the rows past the cursor in key order, every version,
        a little more than the objects still wanted (ClickHouse reads the
        primary key's order and stops at the limit); each key's newest is kept
        here, as FINAL would (FINAL merges them in order inside ClickHouse,
        which costs more than reading them). The last key read may have more
        versions past the limit: it is read again by the next query. The
        conditions are a column, judged on that newest version, and only
        matching objects' bodies leave ClickHouse, as bytes. A query that
        yields few objects (a selective condition, deletions, versions not
        yet merged) is followed by longer ones."""
        base = {**(params or {}), "r": resource}
        scope = ["resource = {r:String}"]
        if namespace is not None:
            scope.append("namespace = {ns:String}")
            base["ns"] = namespace
        matched = " AND ".join(f"({c})" for c in conditions) or "1"
        select = ("SELECT resource_version, namespace, name, deleted, " + matched
                  + " AS matched, if(matched AND NOT deleted, object, '') AS body FROM reports"
                  " WHERE ")

        def query(client: Client) -> list[StoredObject]:
            out: list[StoredObject] = []
            cursor, scale = after, 1
            while len(out) < limit:
                want = limit - len(out)
                # a little more than wanted, for versions not yet merged away
                span = min(scale * (want + want // 16 + 16), 1 << 20)
                bound = {**base, "span": span}
                rows = list(client.query(
                    select + " AND ".join(scope + _past(namespace, cursor, bound))
                    + " ORDER BY namespace, name LIMIT {span:UInt32}", parameters=bound,
                    column_formats={"body": "bytes"}).result_rows)
                exhausted = len(rows) < span
                if not exhausted:
                    last = (rows[-1][1], rows[-1][2])
                    while rows and (rows[-1][1], rows[-1][2]) == last:
                        rows.pop()
                    if not rows:  # one key's versions filled the span
                        scale *= 2
                        continue
                newest: dict[tuple[str, str], Sequence[Any]] = {}
                for row in rows:
                    have = newest.get((row[1], row[2]))
                    if have is None or row[0] > have[0]:
                        newest[(row[1], row[2])] = row
                found = [StoredObject(int(r[0]), r[1], r[2], r[5])
                         for _, r in sorted(newest.items()) if r[4] and not r[3]]
                out.extend(found[:want])
                if exhausted:
                    break
                cursor = (rows[-1][1], rows[-1][2])
                if len(found) < want // 2:
                    scale *= 2
            return out
        return await self._connection.run(query)


def _past(namespace: str | None, key: tuple[str, str] | None, params: dict[str, Any]
          ) -> list[str]:
    """The condition on keys past ``key``, in forms the primary key's index
    can use; binds its parameters in ``params``."""
    if key is None:
        return []
    params.update({"ans": key[0], "aname": key[1]})
    if namespace == key[0]:
        return ["name > {aname:String}"]
    return ["namespace >= {ans:String} AND (namespace, name) > ({ans:String}, {aname:String})"]
