"""The controller's connections to brokers (Kafka's ControllerChannelManager).

Each live broker gets a queue, a daemon sender thread and one blocking socket. The sender sends
one request at a time and waits for its response before taking the next: a broker must apply
LeaderAndIsr / UpdateMetadata / StopReplica in the order the controller decided them, and one
in-flight request per broker is what gives that order. A connection failure or a request timeout
closes the socket and resends the *same* request after a backoff, until it gets an answer or the
broker is removed (its requests are then moot: the controller resends state when it returns).
Threads rather than asyncio because the controller's event thread and kazoo are blocking.
"""
from __future__ import annotations

import itertools
import logging
import queue
import socket
import struct
import threading
from typing import Callable, Optional

from odradek.common.metadata import BrokerInfo
from odradek.common.netutil import outgoing_address
from odradek.protocol import controller_api
from odradek.protocol.controller_api import ControllerRequest, Response
from odradek.protocol.framing import FrameBuffer, FramingError
from odradek.protocol.schema import SchemaError
from odradek.security.client_security import PLAINTEXT, ClientSecurity, connect_blocking

log = logging.getLogger("odradek.controller.channel")

Callback = Callable[[Response | Exception], None]

_BACKOFF_INITIAL_S = 0.05
_BACKOFF_MAX_S = 2.0
_RECV_BYTES = 65536
PER_PARTITION_TIMEOUT_S = 0.001


class ChannelClosedError(Exception):
    """Given to the callbacks of requests still queued or in flight when their broker is removed
    or the channel shut down, so every callback runs exactly once."""


class ProtocolError(Exception):
    """The broker answered something other than the response we wait for; reconnect."""


def exchange(sock: socket.socket, frame: bytes, correlation_id: int, api_key: int,
             api_version: int) -> memoryview:
    """Send one request frame on a connected blocking socket and return its response's body
    (also how a broker asks the controller for a controlled shutdown)."""
    sock.sendall(frame)
    frames = FrameBuffer()
    while True:
        data = sock.recv(_RECV_BYTES)
        if not data:
            raise ConnectionError("connection closed by broker")
        got = frames.feed(data)
        if got:
            break
    if len(got) > 1 or frames.buffered:
        raise ProtocolError("more than one response for one request")
    received_id, body = controller_api.parse_response_header(api_key, api_version, got[0])
    if received_id != correlation_id:
        raise ProtocolError(f"correlation id {received_id}, expected {correlation_id}")
    return body


class _RequestSendThread(threading.Thread):
    """Sends one broker's requests in order, one in flight, resending across reconnects."""

    def __init__(self, controller_id: int, broker: BrokerInfo, connect_timeout_s: float,
                 request_timeout_s: float, security: ClientSecurity = PLAINTEXT) -> None:
        super().__init__(name=f"controller-{controller_id}-to-broker-{broker.id}-send-thread",
                         daemon=True)
        self.broker = broker
        self.queue: queue.Queue[tuple[ControllerRequest, Optional[Callback]] | None] = queue.Queue()
        self._client_id = f"controller-{controller_id}"
        self._security = security
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._stopped = threading.Event()
        self._sock_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._correlation_ids = itertools.count()

    def stop(self) -> None:
        """Ask the thread to exit and wake it from a queue wait, a backoff or a blocking recv."""
        self._stopped.set()
        self.queue.put(None)
        with self._sock_lock:
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                item = self.queue.get()
                if item is None:
                    break
                request, callback = item
                result = self._send_until_answered(request)
                _invoke(callback, ChannelClosedError(f"broker {self.broker.id} removed")
                        if result is None else result)
        finally:
            self._close()
            self._fail_queued()

    def _send_until_answered(self, request: ControllerRequest) -> Response | Exception | None:
        """The decoded response, or the error that makes resending pointless (the request cannot
        be encoded, the response cannot be decoded); None if stopped before an answer."""
        api_key = controller_api.api_key_of(request)
        api_version = controller_api.VERSIONS[api_key]
        backoff = _BACKOFF_INITIAL_S
        while not self._stopped.is_set():
            correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
            try:
                frame = controller_api.encode_request(request, correlation_id, self._client_id)
            except (ValueError, TypeError, struct.error) as exc:  # no broker could ever accept it
                log.error("cannot encode %s for broker %d: %s", type(request).__name__,
                          self.broker.id, exc)
                return exc
            try:
                body = self._round_trip(frame, correlation_id, api_key, api_version,
                                        self._timeout_for(request))
            except (OSError, FramingError, SchemaError, ProtocolError) as exc:
                if self._stopped.is_set():
                    return None
                log.warning("request %s to broker %d failed (%s: %s); reconnecting in %.2fs",
                            type(request).__name__, self.broker.id, type(exc).__name__, exc,
                            backoff)
                self._close()
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                continue
            try:
                return controller_api.decode_response(api_key, api_version, body)
            except SchemaError as exc:  # resending would get the same undecodable answer
                log.error("undecodable %s response from broker %d: %s",
                          type(request).__name__, self.broker.id, exc)
                return exc
        return None

    def _timeout_for(self, request: ControllerRequest) -> float:
        """The request timeout plus 1 ms per partition: a LeaderAndIsr that creates 50,000
        partitions keeps a broker busy for more than 30 s, and resending it on a timeout
        would only make the broker do the work twice."""
        partitions = getattr(request, "partitions", ())
        entries = getattr(request, "partition_states", None) or partitions
        return self._request_timeout_s + len(entries) * PER_PARTITION_TIMEOUT_S

    def _round_trip(self, frame: bytes, correlation_id: int, api_key: int,
                    api_version: int, timeout_s: float) -> memoryview:
        """Send one request frame and return the body of its response."""
        sock = self._connect()
        sock.settimeout(timeout_s)
        return exchange(sock, frame, correlation_id, api_key, api_version)

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        sock = connect_blocking(self.broker.host, self.broker.port, self._security, self._connect_timeout_s,
                                self._client_id, source_address=outgoing_address())
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self._request_timeout_s)
        with self._sock_lock:
            self._sock = sock
        if self._stopped.is_set():  # stop() ran before the socket was visible to it
            raise ConnectionAbortedError("stopped while connecting")
        log.info("connected to broker %d at %s:%d", self.broker.id, self.broker.host,
                 self.broker.port)
        return sock

    def _close(self) -> None:
        with self._sock_lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                _invoke(item[1], ChannelClosedError(f"broker {self.broker.id} removed"))


def _invoke(callback: Optional[Callback], result: Response | Exception) -> None:
    """Run a callback on the sender thread; its failure must not kill the thread."""
    if callback is None:
        return
    try:
        callback(result)
    except Exception:
        log.exception("controller channel callback failed")


class ControllerChannel:
    """Queues controller requests per broker and delivers them in order (see module doc)."""

    def __init__(self, controller_id: int, connect_timeout_s: float = 5.0,
                 request_timeout_s: float = 30.0, security: ClientSecurity = PLAINTEXT) -> None:
        """``security``: how brokers' inter-broker listeners are reached (TLS, SASL)."""
        self.controller_id = controller_id
        self.security = security
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._lock = threading.Lock()
        self._senders: dict[int, _RequestSendThread] = {}

    def add_broker(self, info: BrokerInfo) -> None:
        """Start a sender for a live broker. Adding a known broker with the same endpoint is a
        no-op; a new host or port replaces its sender (queued requests are then dropped)."""
        with self._lock:
            current = self._senders.get(info.id)
            if current is not None and (current.broker.host, current.broker.port) == \
                    (info.host, info.port):
                return
        if current is not None:
            self.remove_broker(info.id)
        sender = _RequestSendThread(self.controller_id, info, self.connect_timeout_s,
                                    self.request_timeout_s, self.security)
        with self._lock:
            if info.id in self._senders:  # a concurrent add_broker won
                return
            self._senders[info.id] = sender
            sender.start()
        log.info("added broker %d (%s:%d) to the controller channel", info.id, info.host,
                 info.port)

    def remove_broker(self, broker_id: int) -> None:
        """Stop the broker's sender and wait for it; its unsent requests get ChannelClosedError.
        Blocks at most about connect_timeout_s (a connect attempt cannot be interrupted)."""
        with self._lock:
            sender = self._senders.pop(broker_id, None)
        if sender is None:
            return
        sender.stop()
        if sender is not threading.current_thread():  # a callback may remove its own broker
            sender.join(self.connect_timeout_s + 1.0)
        log.info("removed broker %d from the controller channel", broker_id)

    def send(self, broker_id: int, request: ControllerRequest,
             callback: Optional[Callback] = None) -> None:
        """Queue a request; never blocks. The callback runs on the broker's sender thread with the
        response, or an exception if the request cannot be answered. Requests for brokers not in
        the channel are dropped with a log line, as Kafka does for offline brokers.
        Raises TypeError at once if `request` is not a controller request."""
        controller_api.api_key_of(request)  # a non-request is the caller's bug: raise here
        with self._lock:  # so no request is queued after remove_broker popped the sender
            sender = self._senders.get(broker_id)
            if sender is not None:
                sender.queue.put((request, callback))
                return
        log.warning("not sending %s to broker %d: not a live broker in the channel",
                    type(request).__name__, broker_id)

    def broker_ids(self) -> set[int]:
        """The brokers that currently have a sender."""
        with self._lock:
            return set(self._senders)

    def shutdown(self) -> None:
        """Remove every broker (stopping and joining all sender threads)."""
        for broker_id in self.broker_ids():
            self.remove_broker(broker_id)
