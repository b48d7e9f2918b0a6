"""One client connection: frames in, responses out, strictly in request order.

Handlers may answer at once (bytes), later (an awaitable, e.g. acks=all or a long-polling fetch)
or never (acks=0). Kafka clients match responses by position, so a later answer holds back the
ones queued behind it. Garbage framing closes the connection; nothing a client sends may raise
out of here. KafkaApis answers a handler's unexpected failure itself (error_responses.py), so
closing after one is the last resort for a handler that is not KafkaApis.

A client over its quota is throttled (``throttle``, client_quotas.py): for the throttle time no
request of the connection is read, as Kafka's SocketServer mutes a throttled channel. Requests
that had already arrived in the same read wait too, so the client's next request is served
only once the throttle time is over, whether or not it backs off by itself.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Awaitable, Callable, Union

from odradek.broker.session import ANONYMOUS, Session, reset_session, set_session
from odradek.common.gc_policy import drop_transport_cycle
from odradek.protocol.framing import FrameBuffer, FramingError

log = logging.getLogger("odradek.broker.connection")

# bytes, or a list of buffers written with writelines (record data is never copied), or None
Response = Union[bytes, list[Union[bytes, memoryview]], None]
Handler = Callable[[memoryview, "KafkaConnection"], Union[Response, Awaitable[Response]]]

MAX_PENDING = 64  # stop reading from a client with this many unanswered requests


class CloseConnection(Exception):
    """A handler's way to say the request cannot be answered and the connection must go."""


class _Last:
    """A response after which the connection closes (close_after_response)."""

    __slots__ = ("response",)

    def __init__(self, response: bytes | list[bytes | memoryview]) -> None:
        self.response = response


class KafkaConnection(asyncio.Protocol):
    """``listener`` and ``security_protocol`` name the listener the connection came in on;
    ``principal_of_certificate``, on a TLS listener, names the principal of the client's
    certificate (None when it showed none), which the connection is until SASL says otherwise."""

    def __init__(self, handler: Handler, max_frame_bytes: int, listener: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT",
                 principal_of_certificate: Callable[[bytes | None], str] | None = None) -> None:
        self._handler = handler
        self._frames = FrameBuffer(max_frame_bytes)
        self._pending: deque[asyncio.Future[Response] | bytes | list[bytes | memoryview] | _Last] = deque()
        self._transport: asyncio.Transport | None = None
        self._paused = False  # too many unanswered requests
        self._reading_paused = False  # the transport's state: paused for either reason
        self._close_after_response = False
        self._closing = False  # a last response is queued: nothing read after it is served
        # throttled (a client quota): until the timer fires, frames are held, not dispatched
        self._unthrottle: asyncio.TimerHandle | None = None
        self._throttled_until = 0.0  # loop time
        self._held: deque[memoryview] = deque()
        self._principal_of_certificate = principal_of_certificate
        self.peer = "?"
        self.session = Session(ANONYMOUS, "", listener, security_protocol)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        principal = self.session.principal
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and self._principal_of_certificate is not None:
            try:
                principal = self._principal_of_certificate(ssl_object.getpeercert(binary_form=True))
            except ValueError as exc:  # no ssl.principal.mapping.rules rule matched: Kafka fails the connection
                log.warning("closing connection from %s: its certificate maps to no principal: %s", self.peer, exc)
                transport.close()
                return
        self.session = Session(principal, peer[0] if peer else "", self.session.listener,
                               self.session.security_protocol)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            drop_transport_cycle(self._transport)
        self._transport = None
        for item in self._pending:
            if isinstance(item, asyncio.Future):
                item.cancel()
        self._pending.clear()
        if self._unthrottle is not None:
            self._unthrottle.cancel()
            self._unthrottle = None
        self._held.clear()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._frames.feed(data)
        except FramingError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        for frame in frames:
            if self._transport is None or self._closing:
                return
            if self._unthrottle is not None or self._held:
                self._held.append(frame)  # throttled: served once the throttle time is over
            else:
                self._dispatch(frame)

    def _dispatch(self, frame: memoryview) -> None:
        # the handler, and the task of an answer it gives later, see this connection's session
        token = set_session(self.session)
        try:
            self._dispatch_as_session(frame)
        finally:
            reset_session(token)

    def _dispatch_as_session(self, frame: memoryview) -> None:
        try:
            result = self._handler(frame, self)
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        except Exception:
            log.exception("closing connection from %s after an unexpected error", self.peer)
            self.close()
            return
        if result is None:
            return  # acks=0: no response at all
        if self._close_after_response and isinstance(result, (bytes, list)):
            # the last response: after the ones before it, then the connection closes; nothing
            # read after it is served
            self._close_after_response, self._closing = False, True
            if not self._pending:
                self._write(result)
                self.close()
                return
            self._pending.append(_Last(result))
            return
        if isinstance(result, (bytes, list)):
            if not self._pending:
                self._write(result)
                return
            self._pending.append(result)
        else:
            fut = asyncio.ensure_future(result)
            fut.add_done_callback(self._on_done)
            self._pending.append(fut)
        if len(self._pending) >= MAX_PENDING and not self._paused and self._transport is not None:
            self._paused = True
            self._apply_reading()

    def _on_done(self, _fut: asyncio.Future[Response]) -> None:
        while self._pending:
            head = self._pending[0]
            if isinstance(head, asyncio.Future):
                if not head.done():
                    break
                self._pending.popleft()
                if head.cancelled():
                    continue
                exc = head.exception()
                if exc is not None:
                    log.error("closing connection from %s: handler failed", self.peer, exc_info=exc)
                    self.close()
                    return
                data = head.result()
                if data is not None:
                    self._write(data)
            else:
                self._pending.popleft()
                if isinstance(head, _Last):
                    self._write(head.response)
                    self.close()
                    return
                self._write(head)
        if self._paused and len(self._pending) < MAX_PENDING // 2 and self._transport is not None:
            self._paused = False
            self._apply_reading()

    def throttle(self, delay_ms: int) -> None:
        """Read no request for ``delay_ms`` from now (a client over its quota; Kafka's muted
        channel), or until a throttle already running ends, whichever is later."""
        if delay_ms <= 0 or self._transport is None:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + delay_ms / 1000
        if self._unthrottle is not None:
            if until <= self._throttled_until:
                return
            self._unthrottle.cancel()
        self._throttled_until = until
        self._unthrottle = loop.call_at(until, self._end_throttle)
        self._apply_reading()

    @property
    def throttled(self) -> bool:
        return self._unthrottle is not None

    def _end_throttle(self) -> None:
        """The throttle time is over: the requests held meanwhile are served in order (one of
        them may throttle the connection again), then reading goes on."""
        self._unthrottle = None
        while self._held and self._unthrottle is None and self._transport is not None and not self._closing:
            self._dispatch(self._held.popleft())
        self._apply_reading()

    def _apply_reading(self) -> None:
        """Pause the transport's reading while throttled or with too many unanswered requests."""
        if self._transport is None:
            return
        paused = self._paused or self._unthrottle is not None
        if paused != self._reading_paused:
            self._reading_paused = paused
            if paused:
                self._transport.pause_reading()
            else:
                self._transport.resume_reading()

    def _write(self, data: bytes | list[bytes | memoryview]) -> None:
        if self._transport is None:
            return
        if isinstance(data, list):
            self._transport.writelines(data)
        else:
            self._transport.write(data)

    def close_after_response(self) -> None:
        """Close once the response the handler is giving now is written, after those still
        pending before it (a failed SASL exchange); the transport sends what it holds first."""
        self._close_after_response = True

    def set_max_frame_bytes(self, max_frame_bytes: int) -> None:
        """The largest frame from now on (after authentication: socket.request.max.bytes)."""
        self._frames.max_frame_bytes = max_frame_bytes

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            drop_transport_cycle(self._transport)
            self._transport = None
