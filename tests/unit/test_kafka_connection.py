"""A request sent on a connection uvloop has already closed fails as a
broken connection, which aiokafka's callers retry (its metadata task ended
for good on the RuntimeError uvloop raises instead)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.metadata import MetadataRequest

import pipeline.kafka.clientconfig  # noqa: F401  (mends aiokafka's send)


def test_a_send_on_a_closed_uvloop_connection_is_a_connection_error() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.transport.close()
            await asyncio.sleep(0.05)
            with pytest.raises(RuntimeError, match="closed"):
                writer.write(b"x")  # what uvloop does
            conn = AIOKafkaConnection("127.0.0.1", port)
            conn._writer = writer  # as after its peer went away
            conn._versions = {MetadataRequest.API_KEY: (0, 1)}
            with pytest.raises(KafkaConnectionError, match="closed"):
                await conn.send(MetadataRequest([]))
        finally:
            server.close()
            await server.wait_closed()

    uvloop.run(scenario())
