"""kubeclient without a server: kubeconfigs read as kubectl reads them, the
error tree, and when a request is sent again."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.pki import Authority
from kubeclient import (
    APIClientError,
    APIConflictError,
    APIError,
    APIGoneError,
    APINotFoundError,
    APIServerError,
    APITooManyRequestsError,
    ConfigError,
    KubeClientError,
    client_context,
    failure_reason,
    retry_after,
    target,
)
from kubeclient.errors import api_error


def write(path: Path, *, clusters: dict[str, dict[str, Any]], users: dict[str, dict[str, Any]],
          contexts: dict[str, tuple[str, str]], current: str | None = None) -> Path:
    config: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": {"cluster": c, "user": u}}
                     for n, (c, u) in contexts.items()]}
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return Authority(tmp_path, "ca")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- the error tree -------------------------------------------------------------

def test_each_status_has_its_error() -> None:
    status = b'{"kind":"Status","reason":"Conflict","message":"the object has been modified"}'
    conflict = api_error("PUT", "/x", 409, status)
    assert isinstance(conflict, APIConflictError) and isinstance(conflict, APIClientError)
    assert isinstance(conflict, APIError) and isinstance(conflict, KubeClientError)
    assert conflict.status == 409 and conflict.details and conflict.details["reason"] == "Conflict"
    assert str(conflict) == "PUT /x: 409 Conflict: the object has been modified"
    assert isinstance(api_error("GET", "/x", 404, b""), APINotFoundError)
    assert isinstance(api_error("GET", "/x", 410, b""), APIGoneError)
    assert isinstance(api_error("GET", "/x", 429, b""), APITooManyRequestsError)
    assert type(api_error("GET", "/x", 418, b"")) is APIClientError
    assert type(api_error("GET", "/x", 502, b"")) is APIServerError


def test_a_refusal_reads_the_kubernetes_status() -> None:
    status = (b'{"kind":"Status","status":"Failure","reason":"Invalid",'
              b'"message":"results[0].result: Unsupported value"}')
    assert failure_reason(422, status) == "422 Invalid: results[0].result: Unsupported value"
    assert failure_reason(502, b"bad gateway") == "HTTP 502: bad gateway"


# -- when a request is sent again -------------------------------------------------

def test_what_the_server_did_not_serve_is_sent_again_after_retry_after() -> None:
    assert retry_after(429, "3", "POST", 0) == 3.0
    assert retry_after(503, "1", "POST", 0) == 1.0  # not served: any verb
    assert retry_after(500, "2", "PATCH", 4) == 2.0
    assert retry_after(429, None, "POST", 2) == 1.0  # no header: backing off
    assert retry_after(429, "Wed, 21 Oct 2026 07:28:00 GMT", "GET", 0) == 0.25


def test_a_write_that_may_have_been_applied_is_not_sent_again() -> None:
    assert retry_after(500, None, "POST", 0) is None
    assert retry_after(504, None, "PUT", 0) is None
    assert retry_after(502, None, "GET", 0) == 0.25  # a read is safe to repeat
    assert retry_after(409, "1", "PUT", 0) is None  # an answer, not a refusal to serve
    assert retry_after(404, None, "GET", 0) is None
    assert retry_after(503, None, "GET", 10) == 8.0


# -- kubeconfigs --------------------------------------------------------------------

async def test_certificate_authority_files_are_relative_to_their_kubeconfig(
        tmp_path: Path, ca: Authority) -> None:
    cert, key = ca.issue("me")
    config = write(tmp_path / "config", clusters={"k": {
        "server": "https://10.0.0.1:6443/", "certificate-authority": ca.file.name}},
        users={"u": {"client-certificate": cert.name, "client-key": key.name}},
        contexts={"c": ("k", "u")}, current="c")
    found = await target(config, {})
    assert found.server == "https://10.0.0.1:6443"
    assert found.context.verify_mode == ssl.CERT_REQUIRED and found.context.check_hostname
    assert [c["subject"] for c in found.context.get_ca_certs()] == [((("commonName", "ca"),),)]
    assert await found.headers() == {}
    assert found.tls_server_name is None


async def test_inline_data_tls_server_name_and_a_token(tmp_path: Path, ca: Authority) -> None:
    config = write(tmp_path / "config", clusters={"k": {
        "server": "https://10.0.0.1", "certificate-authority-data": b64(ca.pem),
        "tls-server-name": "api.example"}}, users={"u": {"token": "abc"}},
        contexts={"c": ("k", "u")}, current="c")
    found = await target(config, {})
    assert found.tls_server_name == "api.example"
    assert await found.headers() == {"Authorization": "Bearer abc"}
    assert found.context.verify_flags & ssl.VERIFY_X509_PARTIAL_CHAIN


async def test_a_token_file_is_read_again_as_it_rotates(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    config = write(tmp_path / "config", clusters={"k": {"server": "https://10.0.0.1",
                                                         "insecure-skip-tls-verify": True}},
                   users={"u": {"tokenFile": "token"}}, contexts={"c": ("k", "u")},
                   current="c")
    found = await target(config, {})
    assert found.context.verify_mode == ssl.CERT_NONE and not found.context.check_hostname
    assert await found.headers() == {"Authorization": "Bearer first"}
    token.write_text("second")
    assert await found.headers() == {"Authorization": "Bearer second"}


async def test_contexts_and_kubeconfig_lists(tmp_path: Path) -> None:
    first = write(tmp_path / "a", clusters={"one": {"server": "https://one"}},
                  users={"u": {"token": "from-a"}},
                  contexts={"first": ("one", "u"), "second": ("two", "u")}, current="first")
    second = write(tmp_path / "b", clusters={"one": {"server": "https://shadowed"},
                                             "two": {"server": "https://two"}},
                   users={"u": {"token": "from-b"}}, contexts={}, current="second")
    env = {"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}"}
    # as kubectl: the first file to set a value wins (current-context too)
    found = await target(None, env)
    assert (found.server, await found.headers()) == ("https://one",
                                                     {"Authorization": "Bearer from-a"})
    chosen = await target(None, env, context="second")  # defined in one file, used from both
    assert (chosen.server, await chosen.headers()) == ("https://two",
                                                       {"Authorization": "Bearer from-a"})
    alone = await target(first, env)  # --kubeconfig: that file alone
    assert alone.server == "https://one"


@pytest.mark.parametrize(("cluster", "user", "message"), [
    ({"proxy-url": "http://proxy:3128"}, {}, "proxy-url (http://proxy:3128) is not supported"),
    ({}, {"auth-provider": {"name": "gcp"}}, "the auth-provider gcp is not supported"),
    ({"certificate-authority": "nowhere.crt"}, {}, "nowhere.crt"),
])
async def test_what_is_not_supported_is_one_line(tmp_path: Path, cluster: dict[str, Any],
                                                 user: dict[str, Any], message: str) -> None:
    config = write(tmp_path / "config", clusters={"k": {"server": "https://x", **cluster}},
                   users={"u": user}, contexts={"c": ("k", "u")}, current="c")
    with pytest.raises(ConfigError) as raised:
        await target(config, {})
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert str(raised.value).startswith(f"cannot use the kubeconfig {config}: ")


async def test_a_missing_kubeconfig_or_context_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        await target(tmp_path / "none", {})
    config = write(tmp_path / "config", clusters={"k": {"server": "https://x"}},
                   users={"u": {}}, contexts={"c": ("k", "u")}, current="c")
    with pytest.raises(ConfigError, match="other"):
        await target(config, {}, context="other")


async def test_in_cluster_reads_the_service_account(tmp_path: Path, ca: Authority) -> None:
    (tmp_path / "token").write_text("pod-token\n")
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443",
           "REPORTS_SERVICE_ACCOUNT_DIR": str(tmp_path)}
    found = await target("in-cluster", env)
    assert found.server == "https://[fd00::1]:443"
    assert await found.headers() == {"Authorization": "Bearer pod-token"}
    with pytest.raises(ConfigError, match="not in a Kubernetes pod"):
        await target("in-cluster", {})


def test_a_certificate_given_as_the_authority_is_trusted_itself(ca: Authority) -> None:
    """The partial chain kubectl accepts (the served certificate in
    certificate-authority-data, not its CA)."""
    cert, _ = ca.issue("server", hosts=["127.0.0.1"])
    context = client_context(ca_pem=cert.read_text())
    assert context.verify_flags & ssl.VERIFY_X509_PARTIAL_CHAIN


async def test_an_exec_plugins_token(tmp_path: Path) -> None:
    plugin = tmp_path / "credential"
    plugin.write_text('#!/bin/sh\necho \'{"apiVersion": "client.authentication.k8s.io/v1",'
                      ' "kind": "ExecCredential", "status": {"token": "from-exec"}}\'\n')
    plugin.chmod(0o755)
    config = write(tmp_path / "config", clusters={"k": {"server": "https://x"}},
                   users={"u": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                         "command": str(plugin),
                                         "interactiveMode": "Never"}}},
                   contexts={"c": ("k", "u")}, current="c")
    found = await target(config, {})
    assert await found.headers() == {"Authorization": "Bearer from-exec"}
