"""One blocking Kafka-protocol connection from odradek's own clients to a broker.

The ordered-delivery clients read their records through librdkafka, but librdkafka cannot send
KIP-253's requests (ConsumerGroupPosition, PartitionLeaderEpochsForPartitions) and hides the
consumer group's generation, member id and assignor, which the ordered consumer needs. This
connection carries those requests: Kafka APIs encoded by kio (``request``), odradek's own
APIs as whole frames their module encodes (``request_frame``).

It is deliberately simple: one request in flight at a time (a lock around each request and its
response), no pipelining, no reconnection. Any failure (refused, reset, timed out, a response
that does not belong to the request) closes it and raises OSError; the caller makes a new
connection, to the same broker or another, as Kafka's NetworkClient does after a disconnect.
"""
from __future__ import annotations

import itertools
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from odradek.client import client_config
from odradek.protocol import kio_util
from odradek.security.client_security import ClientSecurity, connect_blocking

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
#: a response larger than this is a stream out of step, not an answer (Kafka's
#: socket.request.max.bytes is 100 MiB; nothing this client asks for comes near it)
MAX_RESPONSE_BYTES = 64 << 20

METADATA = 3
METADATA_VERSION = 9


class BrokerConnection:
    """One blocking TCP connection to a broker; thread-safe (a lock around each request/response)."""

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0,
                 security: ClientSecurity | None = None) -> None:
        """``security``: TLS and SASL as the client's settings ask; None: the process's
        (client_config, the tools' --command-config)."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._correlation = itertools.count(1)
        sock = connect_blocking(host, port, security or client_config.security(), timeout_s, client_id)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            sock.close()
            raise
        self._sock: socket.socket | None = sock

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}{'' if self._sock else ', closed'})"

    @property
    def closed(self) -> bool:
        return self._sock is None

    def request(self, api_key: int, version: int, body: dict[str, Any], *,
                timeout_s: float | None = None) -> Any:
        """Send one Kafka request (nested dicts, as kio_util.build takes them) and return the
        decoded response entity. ``timeout_s`` overrides the connection's timeout for this
        request: JoinGroup waits for the whole rebalance at the coordinator."""
        def build(correlation_id: int) -> bytes:
            return kio_util.encode_request(api_key, version, correlation_id, self.client_id, body)

        frame = self.request_frame(build, timeout_s=timeout_s)
        try:
            _correlation_id, response = kio_util.decode_response(api_key, version, frame)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError) as exc:
            self.close()
            raise ConnectionError(f"unreadable response to API key {api_key} v{version} from "
                                  f"{self.host}:{self.port}: {exc}") from None
        return response

    def request_frame(self, build: Callable[[int], bytes], *, timeout_s: float | None = None) -> bytes:
        """``build(correlation_id)`` makes the whole request frame (with its size prefix); the
        response frame comes back without its size prefix, its correlation id checked (the
        first four bytes of every response header version)."""
        with self._lock:
            sock = self._sock
            if sock is None:
                raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
            correlation_id = next(self._correlation)
            try:
                sock.settimeout(self.timeout_s if timeout_s is None else timeout_s)
                sock.sendall(build(correlation_id))
                size = _SIZE.unpack(self._read_exactly(sock, 4))[0]
                if not _CORRELATION.size <= size <= MAX_RESPONSE_BYTES:
                    raise ConnectionError(f"response size {size} from {self.host}:{self.port}")
                frame = self._read_exactly(sock, size)
                got = _CORRELATION.unpack_from(frame, 0)[0]
                if got != correlation_id:
                    raise ConnectionError(f"correlation id {got} from {self.host}:{self.port}, "
                                          f"expected {correlation_id}")
                return frame
            except BaseException:
                # whatever happened, the stream may hold half a request or response: never reuse it
                self._close_locked()
                raise

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def abort(self) -> None:
        """Close without waiting for a request in flight on another thread (which then fails
        with OSError): how a member stops a JoinGroup parked at the coordinator."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _close_locked(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _read_exactly(self, sock: socket.socket, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed by the broker at {self.host}:{self.port}")
            chunks += chunk
        return bytes(chunks)


def metadata_response(conn: BrokerConnection, topics: list[str]) -> Any:
    """The decoded Metadata v9 response for ``topics``, never creating a topic."""
    return conn.request(METADATA, METADATA_VERSION, {
        "topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})


def metadata(conn: BrokerConnection, topics: list[str]) -> tuple[list[tuple[int, str, int]], dict[str, int]]:
    """(brokers [(node_id, host, port)], partition count per topic that exists): Metadata v9,
    never creating a topic. A topic the broker does not know, or answers with an error for, is
    left out of the counts."""
    response = metadata_response(conn, topics)
    brokers = [(int(b.node_id), str(b.host), int(b.port)) for b in response.brokers]
    counts = {str(t.name): len(t.partitions) for t in response.topics if t.error_code == 0}
    return brokers, counts
