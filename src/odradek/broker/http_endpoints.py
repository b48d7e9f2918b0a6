"""The broker's HTTP server: Prometheus metrics on ``/metrics`` (metrics.py's exposition; with
``?name[]=N&name[]=M`` only the samples so named, as prometheus_client's own handler filters) and
the tail of the broker's state-change log on ``/state-change-log``, so a dashboard on another
host can follow the controller's decisions without the broker's files.

It replaces prometheus_client's start_http_server (which serves only the registry) with a small
http.server of our own: read-only (GET and HEAD of two routes), every answer bounded
(LOG_CHUNK_MAX bytes of log), at most HTTP_MAX_CONCURRENT requests at once (503 beyond) with a
socket timeout, and every failure answered or logged on its own thread, never raised into the
broker. The broker publishes the address in its registration (zk.paths.encode_broker_info's
``metrics_url``) so tools find it from ZooKeeper alone.

On a secured cluster (broker/metrics_security.py) it is served over TLS (``ssl_context``: each
connection's handshake is made on its own thread, under the same socket timeout, so a client that
never completes one holds no other) and every request is first put to ``authenticate`` with its
Authorization header and client address: 401 with ``WWW-Authenticate: Basic realm="odradek"``
without a valid login, 403 for a user not allowed, before any route is read.
"""
from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST

from odradek.broker.state_change_log_reader import read_log_chunk

log = logging.getLogger("odradek.broker.http_endpoints")

#: the most of the state-change log one answer carries (and its default)
LOG_CHUNK_MAX = 4 << 20
LOG_CHUNK_DEFAULT = 1 << 20
#: requests served at once; more get 503 (a scraper loop gone wrong must not take the broker's threads)
HTTP_MAX_CONCURRENT = 8
#: a client that sends or reads nothing for this long is dropped
HTTP_TIMEOUT_S = 10.0


#: the text of a scrape, all of it (None) or only the samples named (``name[]`` parameters)
Exposition = Callable[[AbstractSet[str] | None], bytes]
#: the HTTP status a request with this Authorization header (None: none) from this client address
#: gets before any route: 200 to be answered, 401 (no valid login) or 403 (not allowed) otherwise
Authenticate = Callable[[str | None, str], int]
#: the TLS server context a secured endpoint is served with
TlsContext = ssl.SSLContext
#: what a 401 asks for (RFC 7617)
WWW_AUTHENTICATE = 'Basic realm="odradek"'


def serve(host: str, port: int, exposition: Exposition, state_change_log: Path | None,
          ssl_context: ssl.SSLContext | None = None, authenticate: Authenticate | None = None) -> ThreadingHTTPServer:
    """``/metrics`` (from ``exposition``) and ``/state-change-log`` on daemon threads of their
    own, over TLS with ``ssl_context`` and to the requests ``authenticate`` lets through when
    given; OSError when the port cannot be bound."""
    server = _BrokerHttpServer((host, port), _BrokerHttpHandler)
    server.exposition, server.state_change_log = exposition, state_change_log
    server.ssl_context, server.authenticate = ssl_context, authenticate
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    log.info("metrics on %s://%s:%d/metrics%s", "https" if ssl_context else "http", host, server.server_address[1],
             " (HTTP Basic login)" if authenticate else "")
    return server


class _BrokerHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    exposition: Exposition
    state_change_log: Path | None
    ssl_context: ssl.SSLContext | None = None
    authenticate: Authenticate | None = None

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(HTTP_MAX_CONCURRENT)

    def get_request(self) -> tuple[socket.socket, Any]:
        """The accepted connection, TLS-wrapped when the server has a context; the handshake is
        left to the request's own thread (_BrokerHttpHandler.setup), never made on the accepting one."""
        sock, address = super().get_request()
        if self.ssl_context is not None:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (OSError, ValueError):
                sock.close()
                raise
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics HTTP request from %s failed", client_address, exc_info=True)


class _BrokerHttpHandler(BaseHTTPRequestHandler):
    server: _BrokerHttpServer
    timeout = HTTP_TIMEOUT_S
    protocol_version = "HTTP/1.0"

    def setup(self) -> None:
        super().setup()  # the socket timeout, which bounds the handshake too
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # a failure ends this connection (handle_error)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        if not self.server.slots.acquire(blocking=False):
            self._send(503, "text/plain", b"busy\n", send_body)
            return
        try:
            try:
                status, content_type, body = self._authenticated() or self._route()
            except Exception:  # noqa: BLE001 - a failed answer costs this request, never the broker
                log.warning("metrics HTTP: %s failed", self.path, exc_info=True)
                status, content_type, body = 500, "text/plain", b"internal error\n"
            self._send(status, content_type, body, send_body)
        finally:
            self.server.slots.release()

    def _authenticated(self) -> tuple[int, str, bytes] | None:
        """None when the request may be answered, else the refusal to send instead."""
        authenticate = self.server.authenticate
        if authenticate is None:
            return None
        status = authenticate(self.headers.get("Authorization"), str(self.client_address[0]))
        if status == 401:
            return 401, "text/plain", b"a login is required (HTTP Basic, a SCRAM user of the cluster)\n"
        if status == 403:
            return 403, "text/plain", b"this user may not DESCRIBE the cluster\n"
        return None

    def _route(self) -> tuple[int, str, bytes]:
        url = urlsplit(self.path)
        if url.path in ("/metrics", "/"):
            names = parse_qs(url.query).get("name[]")  # as prometheus_client's own handler filters
            return 200, CONTENT_TYPE_LATEST, self.server.exposition(frozenset(names) if names else None)
        if url.path == "/state-change-log":
            return self._state_change_log(parse_qs(url.query, keep_blank_values=True))
        return 404, "text/plain", b"not found: /metrics or /state-change-log?offset=N\n"

    def _state_change_log(self, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        """``?offset=N`` (omitted: the tail) and ``&max_bytes=M``: a LogChunk as JSON."""
        path = self.server.state_change_log
        if path is None:
            return 404, "text/plain", b"this broker has no state-change log\n"
        try:
            offset = int(query["offset"][0]) if "offset" in query else None
            max_bytes = int(query["max_bytes"][0]) if "max_bytes" in query else LOG_CHUNK_DEFAULT
        except ValueError:
            return 400, "text/plain", b"offset and max_bytes are integers\n"
        chunk = read_log_chunk(path, offset, max(1, min(max_bytes, LOG_CHUNK_MAX)))
        return 200, "application/json", json.dumps(
            {"start": chunk.start, "next_offset": chunk.next_offset, "size": chunk.size, "lines": chunk.lines},
            separators=(",", ":")).encode()

    def _send(self, status: int, content_type: str, body: bytes, send_body: bool) -> None:
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", WWW_AUTHENTICATE)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass  # a scrape every few seconds is not worth a log line
