"""ControllerChannel against a real TCP server thread that speaks the controller APIs."""
import logging
import queue
import socket
import threading
import time

import pytest

from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.controller.controller_channel import ChannelClosedError, ControllerChannel
from odradek.protocol.controller_api import (
    ControllerResponse,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
    decode_request,
    encode_response,
)
from odradek.protocol.framing import FrameBuffer, parse_request_header

TP = TopicPartition("t", 0)
WAIT_S = 10.0


class FakeBroker:
    """Accepts one connection at a time, decodes every request and answers with no errors.

    Requests whose arrival index (0-based, counting resends) is in `drop` make it close the
    connection without answering; those in `ignore` are left unanswered on an open connection.
    """

    def __init__(self, port: int = 0, drop=(), ignore=()):
        self.drop, self.ignore = set(drop), set(ignore)
        self.received: list = []
        self.connections = 0
        self._stop = threading.Event()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen()
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(0.05)
                self._handle(conn)

    def _handle(self, conn):
        frames = FrameBuffer()
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except socket.timeout:
                continue
            if not data:
                return
            for frame in frames.feed(data):
                key, version, corr, _, end = parse_request_header(frame)
                request = decode_request(key, version, frame[end:])
                index = len(self.received)
                self.received.append(request)
                if index in self.drop:
                    return
                if index in self.ignore:
                    continue
                tps = getattr(request, "partitions", None) or \
                    [ps.tp for ps in request.partition_states]
                conn.sendall(encode_response(key, version, corr,
                                             ControllerResponse(0, {tp: 0 for tp in tps})))

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self._listener.close()


@pytest.fixture
def channel():
    ch = ControllerChannel(controller_id=0, connect_timeout_s=1.0, request_timeout_s=5.0)
    yield ch
    ch.shutdown()


@pytest.fixture
def broker():
    b = FakeBroker()
    yield b
    b.close()


def stop_replica(n: int) -> StopReplicaRequest:
    """Requests told apart by their controller epoch."""
    return StopReplicaRequest(0, n, 1, False, (TopicPartition("t", n),))


class Results:
    """Collects callback results in call order."""

    def __init__(self):
        self.q: queue.Queue = queue.Queue()

    def callback(self, tag):
        return lambda result: self.q.put((tag, result))

    def take(self, n: int):
        return [self.q.get(timeout=WAIT_S) for _ in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_requests_are_answered_in_order(channel, broker):
    results = Results()
    channel.add_broker(BrokerInfo(1, "127.0.0.1", broker.port, epoch=5))
    lai = LeaderAndIsrRequest(0, 1, 5, (PartitionState(TP, 1, 1, 0, (1,), 0, (1,), True),),
                              (BrokerInfo(1, "127.0.0.1", broker.port),))
    um = UpdateMetadataRequest(0, 1, 5, (PartitionState(TP, 1, 1, 0, (1,), 0, (1,)),),
                               (BrokerInfo(1, "127.0.0.1", broker.port, rack="r"),))
    sr = StopReplicaRequest(0, 1, 5, True, (TP,))
    for tag, req in [("lai", lai), ("um", um), ("sr", sr)]:
        channel.send(1, req, results.callback(tag))
    assert results.take(3) == [("lai", ControllerResponse(0, {TP: 0})),
                               ("um", ControllerResponse(0)),
                               ("sr", ControllerResponse(0, {TP: 0}))]
    assert broker.received == [lai, um, sr]
    assert broker.connections == 1


def test_dropped_connection_resends_the_same_request_in_order(channel, caplog):
    broker = FakeBroker(drop={1})  # the second request to arrive kills the connection once
    try:
        results = Results()
        channel.add_broker(BrokerInfo(1, "127.0.0.1", broker.port))
        for n in range(3):
            channel.send(1, stop_replica(n), results.callback(n))
        got = results.take(3)
        assert [tag for tag, _ in got] == [0, 1, 2]
        assert all(isinstance(r, ControllerResponse) and r.error_code == 0 for _, r in got)
        assert [r.controller_epoch for r in broker.received] == [0, 1, 1, 2]
        assert broker.connections == 2
        assert "reconnecting" in caplog.text
    finally:
        broker.close()


def test_request_timeout_resends_on_a_new_connection():
    broker = FakeBroker(ignore={0})
    channel = ControllerChannel(0, connect_timeout_s=1.0, request_timeout_s=0.3)
    try:
        results = Results()
        channel.add_broker(BrokerInfo(1, "127.0.0.1", broker.port))
        channel.send(1, stop_replica(7), results.callback("x"))
        [(_, response)] = results.take(1)
        assert response == ControllerResponse(0, {TopicPartition("t", 7): 0})
        assert [r.controller_epoch for r in broker.received] == [7, 7]
        assert broker.connections == 2
    finally:
        channel.shutdown()
        broker.close()


def test_broker_that_starts_late_still_gets_the_request(channel):
    port = free_port()
    results = Results()
    channel.add_broker(BrokerInfo(1, "127.0.0.1", port))
    channel.send(1, stop_replica(1), results.callback("late"))
    time.sleep(0.3)  # a few refused connects and backoffs
    broker = FakeBroker(port=port)
    try:
        [(_, response)] = results.take(1)
        assert isinstance(response, ControllerResponse)
        assert [r.controller_epoch for r in broker.received] == [1]
    finally:
        broker.close()


def test_unknown_broker_is_ignored_with_a_log_line(channel, caplog):
    called = []
    with caplog.at_level(logging.WARNING, logger="odradek.controller.channel"):
        channel.send(99, stop_replica(0), called.append)
    assert "broker 99" in caplog.text
    assert called == []


def test_remove_broker_fails_pending_requests(channel):
    results = Results()
    channel.add_broker(BrokerInfo(1, "127.0.0.1", free_port()))  # nothing listens there
    channel.send(1, stop_replica(0), results.callback(0))
    channel.send(1, stop_replica(1), results.callback(1))
    time.sleep(0.1)
    channel.remove_broker(1)
    got = results.take(2)
    assert [tag for tag, _ in got] == [0, 1]
    assert all(isinstance(r, ChannelClosedError) for _, r in got)
    assert channel.broker_ids() == set()
    channel.send(1, stop_replica(2), results.callback(2))  # now unknown: dropped
    assert results.q.empty()


def test_failing_callback_does_not_stop_the_sender(channel, broker):
    results = Results()

    def explode(_):
        raise RuntimeError("boom")

    channel.add_broker(BrokerInfo(1, "127.0.0.1", broker.port))
    channel.send(1, stop_replica(0), explode)
    channel.send(1, stop_replica(1), results.callback(1))
    [(tag, response)] = results.take(1)
    assert tag == 1 and isinstance(response, ControllerResponse)


def test_add_broker_is_idempotent_and_shutdown_joins_threads(broker):
    channel = ControllerChannel(3, connect_timeout_s=1.0)
    channel.add_broker(BrokerInfo(1, "127.0.0.1", broker.port))
    channel.add_broker(BrokerInfo(1, "127.0.0.1", broker.port))
    channel.add_broker(BrokerInfo(2, "127.0.0.1", broker.port))
    names = {t.name for t in threading.enumerate() if t.name.startswith("controller-3-to-broker")}
    assert len(names) == 2
    channel.shutdown()
    assert not any(t.name.startswith("controller-3-to-broker") and t.is_alive()
                   for t in threading.enumerate())


def test_send_rejects_non_requests(channel):
    with pytest.raises(TypeError):
        channel.send(1, object())
