"""The self-signed serving certificate names what is served."""

from __future__ import annotations

from pathlib import Path

from apiserver.access.tls import certificate_names, ensure_certificate, serving_names


def test_serving_names() -> None:
    assert serving_names("127.0.0.1") == ["localhost", "127.0.0.1", "::1"]
    assert serving_names("10.200.0.1") == ["localhost", "127.0.0.1", "::1", "10.200.0.1"]
    assert serving_names("0.0.0.0", interfaces=["127.0.0.1", "10.1.2.3", "fe80::1"],
                         hostname="node-1") == [
        "localhost", "127.0.0.1", "::1", "10.1.2.3", "fe80::1", "node-1"]


def test_a_certificate_is_made_again_when_a_name_is_missing(tmp_path: Path) -> None:
    cert, _ = ensure_certificate(tmp_path, serving_names("127.0.0.1"))
    first = cert.read_bytes()
    assert certificate_names(cert) == {"localhost", "127.0.0.1", "::1"}
    assert ensure_certificate(tmp_path, ["localhost"])[0].read_bytes() == first  # reused
    cert, _ = ensure_certificate(tmp_path, serving_names("10.200.0.1"))
    assert cert.read_bytes() != first
    assert "10.200.0.1" in certificate_names(cert)
