"""kubeclient against a TLS server on loopback that answers as scripted: the
trust kubectl gives (a partial chain, tls-server-name, client certificates),
requests sent again when the server did not serve them, and watches read a
whole line at a time."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from bench.pki import Authority
from kubeclient import (
    APIServerError,
    APITooManyRequestsError,
    Client,
    ConnectionFailed,
    client_context,
    target,
)

Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Server:
    """Answers each request with the next of ``answers`` (200 {} after them)."""

    answers: list[Answer] = field(default_factory=list)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *fields = head.decode().split("\r\n")
                method, path, _ = line.split(" ", 2)
                headers = {k.lower(): v.strip() for k, v in
                           (f.split(":", 1) for f in fields if ":" in f)}
                await reader.readexactly(int(headers.get("content-length", "0")))
                self.seen.append((method, path, headers))
                status, extra, body = self.answers.pop(0) if self.answers else (200, {}, b"{}")
                streamed = extra.pop("stream", None) is not None
                out = [f"HTTP/1.1 {status} X", "Content-Type: application/json",
                       *(f"{k}: {v}" for k, v in extra.items())]
                out.append("Connection: close" if streamed else f"Content-Length: {len(body)}")
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode())
                if streamed:  # in pieces, across line ends
                    for i in range(0, len(body), 7):
                        writer.write(body[i:i + 7])
                        await writer.drain()
                    writer.close()
                    return
                writer.write(body)
                await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def serving(context: ssl.SSLContext) -> AsyncIterator[Server]:
    server = Server()
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=context)
    server.port = listening.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listening.close()
        await listening.wait_closed()


def serving_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


@contextlib.asynccontextmanager
async def loopback(tmp_path: Path) -> AsyncIterator[tuple[Server, Path]]:
    """A server with a certificate of a CA of its own, and a kubeconfig
    trusting that CA, without credentials."""
    ca = Authority(tmp_path, "ca")
    cert, key = ca.issue("server", hosts=["127.0.0.1"])
    async with serving(serving_context(cert, key)) as server:
        yield server, kubeconfig(tmp_path / "config", {
            "server": f"https://127.0.0.1:{server.port}",
            "certificate-authority": str(ca.file)}, {})


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def test_the_served_certificate_itself_is_trusted_as_kubectl_trusts_it(
        tmp_path: Path) -> None:
    """`up --tls-cert-file`'s kubeconfig gives the serving certificate as the
    authority, not the CA that signed it (a partial chain)."""
    ca = Authority(tmp_path, "ca")
    cert, key = ca.issue("server", hosts=["127.0.0.1"])
    async with serving(serving_context(cert, key)) as server:
        config = kubeconfig(tmp_path / "config", {
            "server": f"https://127.0.0.1:{server.port}",
            "certificate-authority-data": b64(cert)}, {"token": "t"})
        async with Client(await target(config, {})) as client:
            assert await client.json("GET", "/api") == {}
        assert server.seen[0][2]["authorization"] == "Bearer t"
        # without the partial-chain flag, Python refuses what kubectl accepts
        strict = ssl.create_default_context(cadata=cert.read_text())
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", server.port, ssl=strict)
        assert client_context(ca_pem=cert.read_text()).verify_flags & \
            ssl.VERIFY_X509_PARTIAL_CHAIN


async def test_tls_server_name_and_a_client_certificate(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "ca")
    cert, key = ca.issue("server", hosts=["api.example"])
    client_cert, client_key = ca.issue("me", organizations=["system:masters"])
    async with serving(serving_context(cert, key, client_ca=ca.file)) as server:
        cluster = {"server": f"https://127.0.0.1:{server.port}",
                   "certificate-authority": str(ca.file)}
        user = {"client-certificate-data": b64(client_cert),
                "client-key-data": b64(client_key)}
        named = kubeconfig(tmp_path / "named", {**cluster, "tls-server-name": "api.example"},
                           user)
        async with Client(await target(named, {})) as client:
            assert await client.json("GET", "/version") == {}
        unnamed = kubeconfig(tmp_path / "unnamed", cluster, user)
        async with Client(await target(unnamed, {})) as client:
            with pytest.raises(ConnectionFailed, match="127.0.0.1"):
                await client.json("GET", "/version")


async def test_what_the_server_did_not_serve_is_sent_again(tmp_path: Path) -> None:
    async with loopback(tmp_path) as (server, config):
        async with Client(await target(config, {}), retries=3) as client:
            server.answers = [(429, {"Retry-After": "0"}, b""),
                              (503, {"Retry-After": "0"}, b""), (201, {}, b'{"ok":1}')]
            assert await client.json("POST", "/x", body={"a": 1}) == {"ok": 1}
            assert [s[0] for s in server.seen] == ["POST"] * 3

            server.seen.clear()
            server.answers = [(500, {}, b'{"kind":"Status","message":"boom"}')]
            with pytest.raises(APIServerError, match="boom"):
                await client.json("POST", "/x", body={"a": 1})
            assert len(server.seen) == 1  # it may have been applied

            server.seen.clear()
            server.answers = [(429, {"Retry-After": "0"}, b"")] * 4
            with pytest.raises(APITooManyRequestsError):
                await client.json("GET", "/x")
            assert len(server.seen) == 4


async def test_a_watch_is_read_a_whole_line_at_a_time(tmp_path: Path) -> None:
    async with loopback(tmp_path) as (server, config):
        long = "x" * 100_000
        server.answers = [(200, {"stream": "1"},
                           b'{"type":"ADDED","n":1}\n\n{"type":"MODIFIED","s":"' + long.encode()
                           + b'"}\n')]
        async with Client(await target(config, {})) as client, \
                client.stream("/w", params={"watch": "1"}) as events:
            got = [event async for event in events]
        assert got == [{"type": "ADDED", "n": 1}, {"type": "MODIFIED", "s": long}]
        assert server.seen[0][1] == "/w?watch=1"
