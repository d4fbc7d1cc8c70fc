"""The HTTP/1.1 protocol of the frontend's listener: uvicorn's httptools
protocol whose own refusals are Kubernetes ``Status`` objects too, with the
limits the configuration names. A URL over ``max_url_bytes`` is 414, request
headers over ``max_header_bytes`` 431 (both below llhttp's own 80 KiB limit),
and a request that does not parse is 400."""

from __future__ import annotations

from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from apiserver.contract.errors import ApiError, BadRequest


class UriTooLong(ApiError):
    code, reason = 414, "RequestURITooLong"


class HeadersTooLarge(ApiError):
    code, reason = 431, "RequestHeaderFieldsTooLarge"


_REASONS = {414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


class _Refused(Exception):
    def __init__(self, error: ApiError):
        self.error = error


class StatusProtocol(HttpToolsProtocol):
    max_url_bytes = 32 * 1024
    max_header_bytes = 48 * 1024

    #: after a refusal, how long what the client still sends is read and
    #: dropped before the connection closes (closing with unread data resets
    #: it, and the client would lose the Status)
    drain_seconds = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_bytes = 0
        self._refused = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        # the verified client certificate's common name, for authentication
        # (a certificate the listener's CA did not sign fails the handshake)
        self.scope["extensions"] = {"tls": {"client_cn": self._client_cn()}}

    def _client_cn(self) -> str | None:
        if not hasattr(self, "_peer_cn"):
            peer = None
            ssl_object = self.transport.get_extra_info("ssl_object")
            cert = ssl_object.getpeercert() if ssl_object is not None else None
            if cert:
                peer = next((value for rdn in cert.get("subject", ()) for key, value in rdn
                             if key == "commonName"), "")
            self._peer_cn: str | None = peer
        return self._peer_cn

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.max_url_bytes:
            raise _Refused(UriTooLong(
                f"the request URL is longer than {self.max_url_bytes} bytes"
                " (REPORTS_MAX_URL_BYTES)"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self.max_header_bytes:
            raise _Refused(HeadersTooLarge(
                f"the request headers are larger than {self.max_header_bytes} bytes"
                " (REPORTS_MAX_HEADER_BYTES)"))
        super().on_header(name, value)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # draining
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:
            cause = err.__cause__ or err.__context__
            if isinstance(cause, _Refused):
                self._refuse(cause.error)
            else:  # as uvicorn does: the request is refused, the server goes on
                self.logger.warning("refused a request its callbacks failed on: %r", cause)
                self._refuse(BadRequest("the request could not be handled as HTTP/1.1"))
        except httptools.HttpParserUpgrade:
            super().data_received(b"")  # as uvicorn: upgrade or warn
        except httptools.HttpParserError as err:
            self._refuse(BadRequest(f"the request could not be parsed as HTTP/1.1: {err}"))

    def send_400_response(self, msg: str) -> None:
        self._refuse(BadRequest(msg))

    def _refuse(self, error: ApiError) -> None:
        body = orjson.dumps(error.status())
        status = STATUS_LINE.get(error.code) or (
            b"HTTP/1.1 %d %s\r\n" % (error.code, _REASONS.get(error.code, b"Error")))
        content = [status]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([b"content-type: application/json\r\n",
                        b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                        b"connection: close\r\n", b"\r\n", body])
        self.transport.write(b"".join(content))
        self._refused = True
        self.loop.call_later(self.drain_seconds, self.transport.close)


def protocol(max_url_bytes: int, max_header_bytes: int) -> type[StatusProtocol]:
    """The protocol class with these limits (uvicorn makes one per connection)."""
    return type("LimitedStatusProtocol", (StatusProtocol,),
                {"max_url_bytes": max_url_bytes, "max_header_bytes": max_header_bytes})
