"""The TCP sample: fuzz cases sent to a live broker process over loopback.

In-process runs cover volume; this covers what they cannot: the real asyncio server and
sockets, the broker's real ZooKeeper client and controller behind its handlers. The broker gets
two topics like the in-process topology (a guarded topic with data, a sink), then the cases.
Each frame's answer is checked as in-process (oracle.py), with real time: a request that asks
to wait (Fetch max_wait, Produce timeout) gets its wait plus ``GRACE_S``; one that asks for more
than ``LONGEST_WAIT_S`` is left waiting after that long and counted, not failed, as a long
poll Kafka would hold just the same. A controller request that would pass the broker's epoch
fence is not sent (it would really change the broker's state), nor is a CreateTopics that is
not validate-only (a mutated partition count could ask a one-broker cluster for 100,000
partitions) or that asks for over ``MAX_PARTITIONS_SENT`` partitions; all are counted. At the end the broker process must be alive and answering, and
the topic list, the guarded topic's files and its log end offsets as before.
"""
from __future__ import annotations

import hashlib
import select
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from odradek.admin.zookeeper import connect_zk
from odradek.fuzz import oracle, templates
from odradek.fuzz.mutate import CaseMaker
from odradek.fuzz.report import Report
from odradek.protocol import kio_util
from odradek.protocol.records import build_batch

GRACE_S = 5.0
LONGEST_WAIT_S = 3.0
QUIET_S = 0.05  # how long a frame the broker must not answer (incomplete, acks=0) is watched
#: CreateTopics asking for more partitions are not sent: the broker refuses them before it
#: assigns replicas (topic_admin.check_partition_count_fits), but a broker that assigned first
#: would grow to 24 GB for 2^31 partitions and be OOM-killed, ending the TCP run rather than
#: failing one case
MAX_PARTITIONS_SENT = 1_000_000


class _Peer:
    """One client connection; reopened after the broker closes it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.sock: socket.socket | None = None
        self._buf = bytearray()

    def connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=10)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._buf = bytearray()
        return self.sock

    def drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def read_frame(self, timeout: float) -> bytes | None:
        """The next response frame; None if the connection closed; TimeoutError if none came."""
        deadline = time.monotonic() + timeout
        assert self.sock is not None
        while True:
            if len(self._buf) >= 4:
                (size,) = struct.unpack_from(">i", self._buf, 0)
                if size >= 0 and len(self._buf) - 4 >= size:
                    frame = bytes(self._buf[4:4 + size])
                    del self._buf[:4 + size]
                    return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.sock], [], [], remaining)
            if not ready:
                raise TimeoutError
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                chunk = b""
            if not chunk:
                return None
            self._buf += chunk

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.connect().sendall(kio_util.encode_request(api_key, version, 1, "fuzz-setup", body))
        frame = self.read_frame(30)
        if frame is None:
            raise ConnectionError("the broker closed a set-up connection")
        return kio_util.decode_response(api_key, version, frame)[1]


def _fence(zookeeper: str, broker_id: int) -> tuple[int, int]:
    """The broker's (controller epoch, broker epoch), as ZooKeeper holds them."""
    zk = connect_zk(zookeeper)
    try:
        epoch = int(zk.get("/controller_epoch")[0])
        broker_epoch = zk.get(f"/brokers/ids/{broker_id}")[1].czxid
    finally:
        zk.stop()
        zk.close()
    return epoch, broker_epoch


def topology(host: str, port: int, zookeeper: str, broker_id: int = 1) -> templates.Topology:
    controller_epoch, broker_epoch = _fence(zookeeper, broker_id)
    return templates.Topology(broker_id, host, port, controller_epoch, broker_epoch,
                              current_epoch_controller_requests=False)


def set_up(peer: _Peer, t: templates.Topology) -> None:
    """Create the two topics and write the guarded one's data (acks=all)."""
    for name, count in ((t.guarded, t.guarded_partitions), (t.sink, t.sink_partitions)):
        peer.request(19, 7, {"topics": [{"name": name, "num_partitions": count, "replication_factor": 1,
                                         "assignments": [], "configs": []}], "timeout": 30000, "validate_only": False})
    for p in range(t.guarded_partitions):
        body = {"acks": -1, "timeout": 30000, "topic_data": [{"name": t.guarded, "partition_data": [
            {"index": p, "records": build_batch([(b"k", b"v" * (p + 1))] * 3, timestamp_ms=templates.BATCH_TIMESTAMP_MS)}]}]}
        resp = peer.request(0, 9, body)
        code = int(resp.responses[0].partition_responses[0].error_code)
        if code != 0:
            raise RuntimeError(f"set-up produce to {t.guarded}-{p} failed with error {code}")


def _stored(peer: _Peer, t: templates.Topology, data_dir: Path) -> tuple[object, ...]:
    """What must not change: the guarded topic's files and log end offsets, and the topics."""
    ends = []
    for p in range(t.guarded_partitions):
        resp = peer.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": t.guarded, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}]}]})
        ends.append(resp.topics[0].partitions[0].offset)
    digest = hashlib.sha256()
    for part in sorted(data_dir.glob(f"{t.guarded}-*")):
        for f in sorted(part.glob("*.log")):
            digest.update(f.name.encode() + f.read_bytes())
    return tuple(ends), digest.hexdigest()


def _topics(peer: _Peer) -> set[str]:
    resp = peer.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    return {t.name for t in resp.topics}


def run(host: str, port: int, zookeeper: str, broker_data_dir: Path, broker_alive: Callable[[], bool],
        frames: int, stream_number: int) -> Report:
    """Send ``frames`` fuzz frames to the broker at host:port (broker id 1, data in
    ``broker_data_dir``); ``broker_alive`` says whether its process still runs."""
    started = time.perf_counter()
    report = Report()
    peer = _Peer(host, port)
    t = topology(host, port, zookeeper)
    set_up(peer, t)
    before_stored, before_topics = _stored(peer, t, broker_data_dir), _topics(peer)
    fence = (t.controller_epoch, t.broker_epoch)
    maker = CaseMaker(t, 100 * 1024 * 1024, stream_number)
    index = 0
    while report.frames < frames:
        case = maker.case(index)
        index += 1
        wanted, ending = oracle.split_frames(case.stream, 100 * 1024 * 1024)
        exps = [oracle.expect(f, fence) for f in wanted]
        if any(e.controller_write for e in exps):
            report.writes["cases not sent: a controller request would pass the epoch fence"] += 1
            continue
        if any(e.creates for e in exps):
            report.writes["cases not sent: a CreateTopics would create topics"] += 1
            continue
        if any(_partitions_asked(e) > MAX_PARTITIONS_SENT for e in exps):
            report.writes[f"cases not sent: a CreateTopics asks for over {MAX_PARTITIONS_SENT:,} partitions"] += 1
            continue
        report.cases += 1
        report.frames += case.frames
        report.kinds[case.kind] += case.frames
        _exchange(peer, case.stream, wanted, exps, ending, report)
        if not broker_alive():
            report.find("crash", "the broker process died", case.stream, "")
            break
    peer.drop()
    if broker_alive():
        after_stored, after_topics = _stored(peer, t, broker_data_dir), _topics(peer)
        if after_stored != before_stored:
            report.find("state-changed", "the guarded topic's data or log end offsets changed", b"",
                        f"{before_stored} -> {after_stored}")
        if after_topics != before_topics:
            report.find("state-changed", "the topic list changed", b"", f"{sorted(before_topics)} -> "
                        f"{sorted(after_topics)}")
        peer.drop()
    report.seconds = time.perf_counter() - started
    return report


def _partitions_asked(exp: oracle.Expectation) -> int:
    if exp.api_key != 19 or exp.request is None:
        return 0
    return max((t.num_partitions for t in exp.request.topics), default=0)


def _exchange(peer: _Peer, stream: bytes, frames: list[bytes], exps: list[oracle.Expectation], ending: str,
              report: Report) -> None:
    try:
        peer.connect().sendall(stream)
    except (BrokenPipeError, ConnectionResetError):
        peer.drop()
        report.outcomes["closed"] += 1
        return
    for frame, exp in zip(frames, exps):
        if exp.response is None:  # not a request: the broker must close the connection
            _expect_close(peer, frame, report, "a frame that is not a request")
            return
        if exp.silent:
            report.outcomes["no-response (acks=0)"] += 1
            continue
        wait = min(exp.wait_s, LONGEST_WAIT_S) + GRACE_S
        try:
            response = peer.read_frame(wait)
        except TimeoutError:
            if exp.wait_s > LONGEST_WAIT_S:
                report.writes["long waits left pending (asked for more than %g s)" % LONGEST_WAIT_S] += 1
            else:
                report.find("hang", f"no answer within {wait:g} s: api {exp.api_key} v{exp.version}", frame, "")
            peer.drop()
            return
        if response is None:
            report.outcomes["closed"] += 1
            peer.drop()
            return
        verdict = oracle.check_response(exp, response)
        if not verdict.ok:
            report.find("malformed-response", f"api {exp.api_key} v{exp.version}: {verdict.problem[:160]}", frame,
                        response[:300].hex())
        else:
            report.outcomes["answered-with-error" if verdict.has_error else "answered-without-error"] += 1
    if ending == "bad-size":
        _expect_close(peer, stream, report, "an impossible frame size")
    elif ending == "partial" or any(e.silent for e in exps):
        try:  # nothing more may come; the broker waits for the rest of the frame
            extra = peer.read_frame(QUIET_S)
        except TimeoutError:
            extra = b""
        if extra:
            report.find("malformed-response", "an answer nobody asked for", stream, extra[:100].hex())
        if ending == "partial":
            report.outcomes["incomplete (waits for more bytes)"] += 1
            peer.drop()


def _expect_close(peer: _Peer, frame: bytes, report: Report, what: str) -> None:
    try:
        extra = peer.read_frame(GRACE_S)
    except TimeoutError:
        report.find("hang", f"the connection stayed open after {what}", frame, "")
        peer.drop()
        return
    if extra is not None:
        report.find("malformed-response", f"an answer to {what}", frame, extra[:100].hex())
    else:
        report.outcomes["closed"] += 1
    peer.drop()
