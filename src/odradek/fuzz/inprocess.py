"""The in-process run: fuzz cases through a real KafkaConnection into the broker's KafkaApis
(harness.py), each checked against the oracle, the broker's state and its stored data.

Per case: the stream is fed to a fresh connection (in the case's pieces); every request a
handler answers later runs on the virtual clock until answered or until its own wait (the
longest duration field it carries) plus ``GRACE_S`` has passed, which is a hang; a case taking
``WALL_LIMIT_S`` of real time (a handler spinning) is a hang too. Then:

- the frames the connection cut must be those a Kafka peer cuts (oracle.split_frames), and
  the connection must close on a size no peer may send;
- each frame's answer must be what oracle.expect says it is owed, decoded in full with the
  request's correlation id; an exception other than CloseConnection is a crash, also when the
  broker answered it with UNKNOWN_SERVER_ERROR and kept the connection;
- the broker's partitions, metadata cache and epoch fence must be as before, except appends to
  the sink topic that the response (or acks=0) accounts for, and anything after a controller
  request that passed the fence (then the broker is rebuilt, to keep fuzzing the same state);
- no follower may be credited with offsets past the leader's log end, no high watermark may
  leave the log; and every 1,000 cases the guarded topic's files are compared byte for byte.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Any, Callable

from odradek.broker import api_keys
from odradek.broker.connection import CloseConnection, KafkaConnection
from odradek.common.clock import VirtualClock
from odradek.common.metadata import TopicPartition
from odradek.fuzz import harness, oracle
from odradek.fuzz.mutate import CaseMaker
from odradek.fuzz.report import Report
from odradek.protocol import kio_util

GRACE_S = 300.0  # virtual seconds past a request's own wait before it counts as hung
WALL_LIMIT_S = 2.0  # real seconds one case may take (a normal case takes under 10 ms)
DIGEST_EVERY = 1000


class _WallClockExceeded(BaseException):
    """Raised in the main thread by SIGALRM: a case ran too long (BaseException: no handler's
    ``except Exception`` may swallow it)."""


@dataclass
class _Dispatch:
    frame: bytes
    exp: oracle.Expectation
    outcome: str = "pending"
    error: str = ""
    response: bytes | None = None
    verdict: oracle.Verdict | None = None
    #: the traceback of a handler failure the broker answered with UNKNOWN_SERVER_ERROR: a
    #: crash all the same, which the connection survived
    failure: str | None = None


class _Recorder:
    """Sits between the connection and KafkaApis: notes each frame's expectation (at the epoch
    fence of that moment) and outcome, and runs deferred answers as tasks it can wait for."""

    def __init__(self, apis: Callable[..., Any], fence: Callable[[], tuple[int, int]],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.apis = apis
        self.fence = fence
        self.loop = loop
        self.dispatched: list[_Dispatch] = []
        self.tasks: list[asyncio.Task[Any]] = []

    def __call__(self, frame: memoryview, conn: KafkaConnection) -> Any:
        d = _Dispatch(bytes(frame), oracle.expect(frame, self.fence()))
        self.dispatched.append(d)
        # the server calls handlers from its running loop, and a handler may start a task
        # (FindCoordinator creating __consumer_offsets once an UpdateMetadata with leader -2,
        # a topic being deleted, dropped it from the metadata)
        running = asyncio._get_running_loop()
        if running is None:
            asyncio._set_running_loop(self.loop)
        try:
            result = self.apis(frame, conn)
        except CloseConnection:
            d.outcome = "closed"
            raise
        except Exception:
            d.outcome, d.error = "crash", traceback.format_exc()
            raise
        finally:
            if running is None:
                asyncio._set_running_loop(None)
        if result is None:
            d.outcome = "silent"
            return None
        if isinstance(result, (bytes, list)):
            d.outcome = "answered"
            d.failure = getattr(result, "handler_failure", None)
            return result
        task = self.loop.create_task(self._later(d, result))
        self.tasks.append(task)
        return task

    async def _later(self, d: _Dispatch, awaitable: Any) -> Any:
        try:
            result = await awaitable
        except CloseConnection:
            d.outcome = "closed"
            raise
        except asyncio.CancelledError:
            d.outcome = "cancelled"
            raise
        except Exception:
            d.outcome, d.error = "crash", traceback.format_exc()
            raise
        d.outcome = "answered" if result is not None else "silent"
        d.failure = getattr(result, "handler_failure", None)
        return result


def _signature(tb: str) -> str:
    """The exception line and the innermost odradek frame of a traceback."""
    lines = tb.strip().splitlines()
    where = [line.strip() for line in lines if line.strip().startswith("File") and "odradek" in line
             and "/fuzz/" not in line]
    return f"{lines[-1][:200]} at {where[-1] if where else '?'}"


def _responses(out: bytes) -> tuple[list[bytes], bool]:
    frames: list[bytes] = []
    pos = 0
    while len(out) - pos >= 4:
        (size,) = struct.unpack_from(">i", out, pos)
        if size < 0 or len(out) - pos - 4 < size:
            return frames, False
        frames.append(out[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames, pos == len(out)


class InProcessRun:
    def __init__(self, workdir: Path, stream_number: int) -> None:
        self.workdir = workdir
        self.clock = VirtualClock()
        self.generation = 0
        self.broker = harness.fresh(workdir, self.clock, self.generation)
        self.maker = CaseMaker(harness.TOPOLOGY, self.broker.ctx.config.socket_request_max_bytes, stream_number)
        self.report = Report()
        self._overran = False

    def _rebuild(self) -> None:
        self.broker.close()
        self.generation += 1
        self.broker = harness.fresh(self.workdir, self.clock, self.generation)

    def run(self, first_case: int, frames: int, progress: Callable[[Report], None] | None = None) -> Report:
        started = time.perf_counter()
        quiet = logging.getLogger("odradek")
        saved_level = quiet.level
        quiet.setLevel(logging.CRITICAL + 1)  # a million "closing connection" warnings say nothing
        index = first_case
        try:
            with self.clock.installed():
                self.check_failure_isolation()
                while self.report.frames < frames:
                    self.one(index)
                    index += 1
                    if progress is not None and self.report.cases % 20_000 == 0:
                        self.report.seconds = time.perf_counter() - started
                        progress(self.report)
                self._check_digest(b"")
        finally:
            quiet.setLevel(saved_level)
        self.report.seconds = time.perf_counter() - started
        return self.report

    def check_failure_isolation(self) -> list[_Dispatch]:
        """One handler that fails must not take the connection with it: ListGroups made to fail
        at once and DescribeGroups after a wait, pipelined with ApiVersions and Metadata on one
        connection, must get four answers in order, the failed two UNKNOWN_SERVER_ERROR. Run
        once at the start of every run; what it finds is a hang (the requests behind the failed
        one not answered) or a malformed response."""
        apis = self.broker.apis
        saved = dict(apis._routes)

        def fails_at_once(*_args: Any) -> Any:
            raise RuntimeError("planted: a handler that fails at once")

        async def fails_later(*_args: Any) -> Any:
            await asyncio.sleep(0.01)
            raise RuntimeError("planted: a handler that fails after a wait")
        apis._routes[api_keys.LIST_GROUPS] = fails_at_once
        apis._routes[api_keys.DESCRIBE_GROUPS] = fails_later
        stream = b"".join([
            kio_util.encode_request(api_keys.LIST_GROUPS, 4, 1, "fuzzer", {"states_filter": []}),
            kio_util.encode_request(api_keys.API_VERSIONS, 3, 2, "fuzzer", {"client_software_name": "fuzzer",
                                                                        "client_software_version": "1"}),
            kio_util.encode_request(api_keys.DESCRIBE_GROUPS, 5, 3, "fuzzer", {"groups": ["g"], "include_authorized_operations": False}),
            kio_util.encode_request(api_keys.METADATA, 12, 4, "fuzzer", {"topics": [], "allow_auto_topic_creation": False,
                                                                      "include_topic_authorized_operations": False})])
        saved_report, self.report = self.report, Report()
        try:
            dispatched = self.run_case(stream)
        finally:
            apis._routes.clear()
            apis._routes.update(saved)
            planted, self.report = self.report, saved_report
        answers = [(d.outcome, d.verdict.has_error if d.verdict else None) for d in dispatched]
        if answers != [("answered", True), ("answered", False), ("answered", True), ("answered", False)]:
            self.report.find("hang", "the requests pipelined behind a failed handler were not all answered",
                             stream, repr(answers))
        for finding in planted.findings.values():
            if finding.category != "crash":  # the planted failures themselves are crashes
                self.report.find(finding.category, finding.signature, bytes.fromhex(finding.frame_hex), finding.detail)
        return dispatched

    def _alarm(self, _signum: int, _frame: Any) -> None:
        self._overran = True
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # again, in case this one lands in a callback
        raise _WallClockExceeded()

    def one(self, index: int) -> None:
        case = self.maker.case(index)
        self.report.cases += 1
        self.report.frames += case.frames
        self.report.kinds[case.kind] += case.frames
        self.run_stream(case.stream, case.cuts)
        if self.report.cases % DIGEST_EVERY == 0:
            self._check_digest(case.stream)

    def run_stream(self, stream: bytes, cuts: tuple[int, ...] = ()) -> list[_Dispatch]:
        """run_case within ``WALL_LIMIT_S`` of real time (past it: a hang, and a new broker).
        Raised inside a weakref callback or ``__del__`` (a garbage collection), the alarm's
        exception is only printed, so the alarm repeats every 50 ms until one lands."""
        saved = signal.signal(signal.SIGALRM, self._alarm)
        self._overran = False
        signal.setitimer(signal.ITIMER_REAL, WALL_LIMIT_S)
        try:
            dispatched = self.run_case(stream, cuts)
        except _WallClockExceeded:
            dispatched = None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, saved)
        if not self._overran:
            return dispatched or []
        frames = oracle.split_frames(stream, 1 << 31)[0]
        keys = sorted({struct.unpack_from(">h", f)[0] for f in frames if len(f) >= 2})
        self.report.find("hang", f"a case ran over {WALL_LIMIT_S:g} s of real time (api keys {keys})", stream,
                         "finished late" if dispatched is not None else "stopped by the alarm")
        self._rebuild()
        return []

    def run_case(self, stream: bytes, cuts: tuple[int, ...] = ()) -> list[_Dispatch]:
        """Feed one stream and check everything; returns what each frame got (for tests)."""
        broker, report = self.broker, self.report
        rm = broker.replica_manager
        loop = broker.loop
        recorder = _Recorder(broker.apis, lambda: (rm.controller_epoch, rm.broker_epoch), loop)
        transport = harness.RecordingTransport()
        max_frame = broker.ctx.config.socket_request_max_bytes
        conn = KafkaConnection(recorder, max_frame)
        conn.connection_made(transport)  # type: ignore[arg-type]
        bounds = (0, *cuts, len(stream))
        for start, end in zip(bounds, bounds[1:]):
            if not transport.closed:
                conn.data_received(stream[start:end])
        if recorder.tasks:
            deadline = max(d.exp.wait_s for d in recorder.dispatched) + GRACE_S
            _done, pending = loop.run_until_complete(asyncio.wait(recorder.tasks, timeout=deadline))
            loop.run_until_complete(asyncio.sleep(0))  # the connection writes what completed
            for task in pending:
                d = next(d for d in recorder.dispatched if d.outcome == "pending")
                report.find("hang", f"no answer within {deadline:g} s (virtual): api {d.exp.api_key} "
                                    f"v{d.exp.version}", d.frame, "")
                d.outcome = "hung"
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.sleep(0))
        elif report.cases % 64 == 0:
            loop.run_until_complete(asyncio.sleep(0))  # callbacks handlers left (woken waiters)
        conn.connection_lost(None)
        self._check_frames(stream, max_frame, recorder.dispatched, transport)
        self._check_answers(recorder.dispatched, transport)
        self._check_state(stream, recorder.dispatched)
        return recorder.dispatched

    def _check_frames(self, stream: bytes, max_frame: int, dispatched: list[_Dispatch],
                      transport: harness.RecordingTransport) -> None:
        frames, ending = oracle.split_frames(stream, max_frame)
        cut = [d.frame for d in dispatched]
        if cut != frames[:len(cut)]:
            self.report.find("malformed-response", "the connection cut frames a Kafka peer would not", stream, "")
        elif len(cut) < len(frames) and not transport.closed:
            self.report.find("hang", "complete frames left unread", stream, "")
        if ending == "bad-size" and not transport.closed:
            self.report.find("hang", "an impossible frame size did not close the connection", stream, "")
        if ending == "partial" and not transport.closed:
            self.report.outcomes["incomplete (waits for more bytes)"] += 1

    def _check_answers(self, dispatched: list[_Dispatch], transport: harness.RecordingTransport) -> None:
        report = self.report
        responses, whole = _responses(bytes(transport.out))
        if not whole:
            report.find("malformed-response", "the broker wrote a partial or negative-size frame",
                        dispatched[0].frame if dispatched else b"", bytes(transport.out[:200]).hex())
        answered = [d for d in dispatched if d.outcome == "answered"]
        if len(responses) > len(answered):
            report.find("malformed-response", "more responses than answered requests",
                        dispatched[0].frame if dispatched else b"", "")
        if len(responses) < len(answered) and not transport.closed:
            report.find("hang", "an answered request's response was never written", answered[0].frame, "")
        for d, response in zip(answered, responses):
            d.response = response
            d.verdict = verdict = oracle.check_response(d.exp, response) if d.exp.response else oracle.Verdict(
                False, problem="answered a frame that is not a request")
            if d.exp.silent:
                verdict = oracle.Verdict(False, problem="answered a Produce with acks=0")
            if not verdict.ok:
                report.find("malformed-response", f"api {d.exp.api_key} v{d.exp.version}: "
                            f"{verdict.problem[:160]}", d.frame, response[:300].hex())
            else:
                report.outcomes["answered-with-error" if verdict.has_error else "answered-without-error"] += 1
        for d in dispatched:
            if d.failure is not None:
                report.find("crash", _signature(d.failure), d.frame, d.failure)
            if d.outcome == "crash":
                report.find("crash", _signature(d.error), d.frame, d.error)
            elif d.outcome == "closed":
                report.outcomes["closed"] += 1
                if d.exp.response is not None:
                    report.writes["closed although the frame decodes"] += 1
            elif d.outcome == "silent":
                if d.exp.silent:
                    report.outcomes["no-response (acks=0)"] += 1
                else:
                    report.find("hang", f"no response to api {d.exp.api_key} v{d.exp.version}, which needs one",
                                d.frame, "")

    def _check_state(self, stream: bytes, dispatched: list[_Dispatch]) -> None:
        broker, report = self.broker, self.report
        after = broker.snapshot()
        changes = broker.baseline.differences(after)
        problems = broker.bookkeeping_problems()
        for problem in problems:
            report.find("state-changed", "bookkeeping: " + problem.split(": ", 1)[1][:40], stream, problem)
        created = set(broker.zk.topics)
        if created:
            allowed_topics = set().union(*(d.exp.creates for d in dispatched))
            if created - allowed_topics:
                report.find("state-changed", "a topic created by a request that did not ask for it", stream,
                            str(sorted(created - allowed_topics)))
            report.writes["topics created (in the stand-in ZooKeeper)"] += len(created)
            broker.zk.topics.clear()
        if not changes and not problems:
            return
        if any(d.exp.controller_write for d in dispatched):
            report.writes["controller requests accepted (broker rebuilt)"] += 1
            self._rebuild()
            return
        # a decoded Produce may append to what it names, answered or not (its connection may
        # close first, as in Kafka); an answer that reports an error for a partition that grew
        # is a finding, unless another frame of the case named that partition too
        allowed: set[TopicPartition] = set()
        refused: set[TopicPartition] = set()
        named_twice: set[TopicPartition] = set()
        for d in dispatched:
            named_twice |= allowed & d.exp.produces_to
            allowed |= d.exp.produces_to
            if d.verdict is not None and d.verdict.ok:
                refused |= d.exp.produces_to - d.verdict.written
        allowed -= refused - named_twice
        deleting = set().union(*(d.exp.deletes_from for d in dispatched))
        if changes and self._only_appends(broker.baseline, after, allowed | deleting, deleting):
            report.writes["sink appends"] += 1
            broker.baseline = after
            if not problems:
                return
        elif changes:
            report.find("state-changed", changes[0].split(":")[0] + " changed by requests that may not write",
                        stream, "\n".join(changes))
        self._rebuild()

    @staticmethod
    def _only_appends(before: harness.Snapshot, after: harness.Snapshot, allowed: set[TopicPartition],
                      deleting: AbstractSet[TopicPartition] = frozenset()) -> bool:
        """Only appends to ``allowed`` sink partitions changed anything, and log starts moved up
        only where a DeleteRecords named the partition."""
        if before.metadata != after.metadata or before.fence != after.fence:
            return False
        if set(before.partitions) != set(after.partitions):
            return False
        for tp, a in before.partitions.items():
            b = after.partitions[tp]
            if a == b:
                continue
            if tp not in allowed or tp.topic != harness.TOPOLOGY.sink:
                return False
            same = (a.leader, a.leader_epoch, a.zk_version, a.isr, a.replicas) == \
                   (b.leader, b.leader_epoch, b.zk_version, b.isr, b.replicas)
            if b.log_start != a.log_start and not (tp in deleting and b.log_start > a.log_start):
                return False
            if not same or b.log_end < a.log_end or b.high_watermark < a.high_watermark:
                return False
        return True

    def _check_digest(self, stream: bytes) -> None:
        digest = self.broker.guarded_data_digest()
        if digest != self.broker.guarded_digest:
            self.report.find("state-changed", "the guarded topic's files changed", stream, "")
            self._rebuild()

    def close(self) -> None:
        self.broker.close()


def run(frames: int, stream_number: int, first_case: int = 0, workdir: Path | None = None,
        progress: Callable[[Report], None] | None = None) -> Report:
    """Fuzz one in-process broker with ``frames`` frames from case ``first_case`` on."""
    with tempfile.TemporaryDirectory(prefix="odradek-fuzz-", dir=workdir) as tmp:
        fuzz = InProcessRun(Path(tmp), stream_number)
        try:
            return fuzz.run(first_case, frames, progress)
        finally:
            fuzz.close()


#: cases of different workers never overlap: worker w starts at case w * CASES_PER_WORKER
CASES_PER_WORKER = 1_000_000_000


def _progress(report: Report) -> None:
    print(f"  ... {report.frames:,} frames, {report.failures:,} failures, {report.seconds:.0f} s",
          file=sys.stderr, flush=True)


def worker(job: tuple[int, int, int, str | None]) -> Report:
    """One worker process's share: (frames, stream number, worker index, work directory)."""
    frames, stream_number, index, workdir = job
    return run(frames, stream_number, index * CASES_PER_WORKER, Path(workdir) if workdir else None,
               progress=_progress)
