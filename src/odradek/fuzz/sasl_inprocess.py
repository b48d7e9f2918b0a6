"""The SASL exchange fuzzed in-process: each case on a new connection made by the broker's own
wiring (``Broker._connection``: the SaslServerAuthenticator in front of KafkaApis, the frame limit
of sasl.server.max.receive.size until authenticated) for a SASL_PLAINTEXT listener whose security
comes from the settings a broker would read (listener_security), in front of the in-process
broker of harness.py (a real KafkaApis over a real data directory).

Here more is seen than over TCP: every request that reaches KafkaApis is noted with the principal
of its connection, so one let through before authentication (or as another principal) is found
even when it is never answered (Produce with acks=0), and anything the broker logs at ERROR (a
handler's traceback) is a crash.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from odradek.broker.connection import KafkaConnection
from odradek.broker.listener_config import parse_listeners
from odradek.broker.listener_security import ListenerSecurity, listener_security
from odradek.common.clock import VirtualClock
from odradek.fuzz import harness
from odradek.fuzz.report import Report
from odradek.fuzz.sasl_cases import MECHANISMS, USERS, SaslCaseMaker
from odradek.fuzz.sasl_driver import Driver, NoAnswer, login_mechanism
from odradek.security.scram import generate_credential

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
#: connections.max.reauth.ms of the fuzzed listener: long enough that no session ends during a case
REAUTH_MS = 3_600_000
LOGIN_CHECK_EVERY = 10  # cases


def listener_settings(reauth_ms: int = REAUTH_MS) -> dict[str, str]:
    """A SASL_PLAINTEXT listener offering every mechanism, USERS as its PLAIN users (the same
    settings the TCP run gives its broker, under the listener's own prefix there)."""
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    return {"listeners": "SASL://127.0.0.1:1", "listener.security.protocol.map": "SASL:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": ",".join(MECHANISMS), "sasl.jaas.config": f"{PLAIN_MODULE} required {users};",
            "connections.max.reauth.ms": str(reauth_ms)}


def fuzz_listener_security(reauth_ms: int = REAUTH_MS) -> ListenerSecurity:
    settings = listener_settings(reauth_ms)
    credentials = {(mechanism, user): generate_credential(mechanism, password)
                   for mechanism in MECHANISMS[1:] for user, password in USERS.items()}
    listener = parse_listeners(settings).listeners[0]
    return listener_security(listener, settings, lambda mechanism, user: credentials.get((mechanism, user)), None)


class _Errors(logging.Handler):
    """Keeps what the broker logs at ERROR or with a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


class InProcessChannel:
    """A connection of the broker's making, fed directly; what it writes is read back."""

    def __init__(self, broker: harness.InProcessBroker, security: ListenerSecurity) -> None:
        self.loop = broker.loop
        self._calls: list[tuple[int, str]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self.conn: KafkaConnection = broker.broker._connection(self._guarded(broker.apis), security)  # type: ignore[arg-type]
        self.transport = harness.RecordingTransport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self._read_at = 0

    def _guarded(self, apis: Callable[..., Any]) -> Callable[..., Any]:
        """KafkaApis, noting the API key and the connection's principal of each request."""
        def handler(frame: memoryview, conn: KafkaConnection) -> Any:
            self._calls.append((struct.unpack_from(">h", frame, 0)[0], conn.session.principal))
            running = asyncio._get_running_loop()
            if running is None:
                asyncio._set_running_loop(self.loop)
            try:
                result = apis(frame, conn)
            finally:
                if running is None:
                    asyncio._set_running_loop(None)
            if result is None or isinstance(result, (bytes, list)):
                return result
            task = self.loop.create_task(_awaited(result))
            self._tasks.append(task)
            return task
        return handler

    def send(self, data: bytes, cuts: Sequence[int]) -> None:
        bounds = (0, *cuts, len(data))
        for start, end in zip(bounds, bounds[1:]):
            if not self.transport.closed:
                self.conn.data_received(data[start:end])
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            self.loop.run_until_complete(asyncio.wait(pending, timeout=300))
            self.loop.run_until_complete(asyncio.sleep(0))  # the connection writes what completed

    def read(self, quiet: bool = False) -> bytes | None:
        out = self.transport.out
        if len(out) - self._read_at >= 4:
            (size,) = struct.unpack_from(">i", out, self._read_at)
            if 0 <= size <= len(out) - self._read_at - 4:
                frame = bytes(out[self._read_at + 4:self._read_at + 4 + size])
                self._read_at += 4 + size
                return frame
        if self.transport.closed:
            return None
        raise NoAnswer()

    def calls(self) -> list[tuple[int, str]]:
        return self._calls

    def close(self) -> None:
        if not self.transport.closed:
            self.conn.close()
        self.conn.connection_lost(None)
        for task in self._tasks:
            task.cancel()


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class SaslInProcessRun:
    def __init__(self, workdir: Path, stream_number: int) -> None:
        self.clock = VirtualClock()
        self.broker = harness.fresh(workdir, self.clock, 0)
        self.security = fuzz_listener_security()
        self.maker = SaslCaseMaker(stream_number, self.security.max_receive_size, harness.TOPOLOGY)
        self.report = Report()
        self.driver = Driver(self.security.mechanisms, self.security.reauth_ms, self.security.max_receive_size,
                             self.broker.ctx.config.socket_request_max_bytes, self.report)

    def channel(self) -> InProcessChannel:
        return InProcessChannel(self.broker, self.security)

    def run(self, first_case: int, cases: int, progress: Callable[[Report], None] | None = None) -> Report:
        started = time.perf_counter()
        quiet = logging.getLogger("odradek")
        saved = quiet.level, quiet.propagate
        errors = _Errors()
        quiet.setLevel(logging.ERROR)  # no "closing connection" warnings, but every error
        quiet.propagate = False
        quiet.addHandler(errors)
        try:
            with self.clock.installed():
                for index in range(first_case, first_case + cases):
                    case = self.maker.case(index)
                    seen = len(errors.records)
                    self.driver.play(case, self.channel())
                    if index % LOGIN_CHECK_EVERY == 0:
                        self.driver.check_login(self.channel(), login_mechanism(index // LOGIN_CHECK_EVERY), index)
                    for record in errors.records[seen:]:
                        self.report.find("crash", record.splitlines()[-1][:160], b"", record)
                    if progress is not None and self.report.cases % 20_000 == 0:
                        self.report.seconds = time.perf_counter() - started
                        progress(self.report)
                for mechanism in MECHANISMS:
                    self.driver.check_login(self.channel(), mechanism, -1)
        finally:
            quiet.removeHandler(errors)
            quiet.setLevel(saved[0])
            quiet.propagate = saved[1]
        self.report.seconds = time.perf_counter() - started
        return self.report

    def close(self) -> None:
        self.broker.close()


def run(cases: int, stream_number: int, first_case: int = 0, workdir: Path | None = None,
        progress: Callable[[Report], None] | None = None) -> Report:
    with tempfile.TemporaryDirectory(prefix="odradek-sasl-fuzz-", dir=workdir) as tmp:
        fuzz = SaslInProcessRun(Path(tmp), stream_number)
        try:
            return fuzz.run(first_case, cases, progress)
        finally:
            fuzz.close()


#: cases of different workers never overlap: worker w starts at case w * CASES_PER_WORKER
CASES_PER_WORKER = 1_000_000_000


def _progress(report: Report) -> None:
    print(f"  ... {report.cases:,} SASL exchanges, {report.failures:,} failures, {report.seconds:.0f} s",
          file=sys.stderr, flush=True)


def worker(job: tuple[int, int, int, str | None]) -> Report:
    """One worker process's share: (cases, stream number, worker index, work directory)."""
    cases, stream_number, index, workdir = job
    return run(cases, stream_number, index * CASES_PER_WORKER, Path(workdir) if workdir else None, _progress)
