"""A TCP proxy in front of each broker of a fault run that can delay one connection: the
network fault behind KAFKA-17754, where a request held up on the way (a produce, an EndTxn, a
WriteTxnMarkers) reaches its broker after its sender has given up on it and moved on to the
next transaction.

Run as its own process (`python -m odradek.faults.delay_proxy LISTEN=UPSTREAM ...`), so its
forwarding never competes for the fault run's interpreter. It reads commands on stdin:

    delay SECONDS SEED

holds everything one connection sends towards its broker for SECONDS (chosen under SEED among
the connections that have carried a transactional request or a produce, or among all if none
has), then delivers it in order, and answers one line naming the connection. Bytes a client
sent before it closed the connection are still delivered after the hold, as TCP delivers the
segments in flight of a closed connection: a late request must reach the broker even when its
sender has reconnected. Responses are never held.

While the broker behind a route is down, the route refuses connections, as the broker's own
port would: the proxy closes its listener when a connection to the broker fails and opens it
again once the broker accepts one. Accepting a client and then closing it at once made
librdkafka fail its connection in a tight loop, which drove it into a deadlock of its own
(librdkafka issue #5476: `rd_kafka_toppar_forget_leader` against an OffsetForLeaderEpoch
leader query), a consumer hung for good.
"""
from __future__ import annotations

import asyncio
import functools
import itertools
import random
import struct
import sys
import time
from dataclasses import dataclass, field

#: the requests that make a connection worth delaying (Kafka API keys)
INTERESTING = {0: "Produce", 24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn",
               27: "WriteTxnMarkers", 28: "TxnOffsetCommit"}


@dataclass
class Connection:
    number: int
    peer: str
    upstream: str
    api_keys: set[int] = field(default_factory=set)
    held_until: float = 0.0
    # where the next request frame starts in the client's byte stream: bytes left of the
    # current frame, and the start of a header not yet complete
    _left: int = 0
    _header: bytes = b""

    def observe(self, data: bytes) -> None:
        """Note the API key of every request frame that starts in `data` (size int32, then the
        request header's api_key int16)."""
        view = memoryview(data)
        while view:
            if self._left:
                step = min(self._left, len(view))
                self._left -= step
                view = view[step:]
                continue
            need = 6 - len(self._header)
            self._header += bytes(view[:need])
            view = view[need:]
            if len(self._header) == 6:
                size, api_key = struct.unpack(">ih", self._header)
                self.api_keys.add(api_key)
                self._left = max(0, size - 2)
                self._header = b""

    def describe(self) -> str:
        kinds = sorted(INTERESTING[k] for k in self.api_keys if k in INTERESTING)
        return f"connection {self.number} {self.peer} -> {self.upstream}" + (f" ({', '.join(kinds)})" if kinds else "")


class DelayProxy:
    #: how often a route whose broker is down tries it again
    UPSTREAM_RETRY_S = 0.1

    def __init__(self, routes: list[tuple[tuple[str, int], tuple[str, int]]]) -> None:
        self.routes = routes
        self.connections: dict[int, Connection] = {}
        self._numbers = itertools.count(1)
        self._servers: dict[tuple[str, int], asyncio.Server] = {}
        self._tasks: set[asyncio.Task[None]] = set()   # held: the loop keeps only weak references

    async def serve(self) -> None:
        for listen, upstream in self.routes:
            await self._listen(listen, upstream)
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            parts = line.decode().split()
            if len(parts) == 3 and parts[0] == "delay":
                print(self.delay(float(parts[1]), int(parts[2])), flush=True)
            else:
                print(f"unknown command {line!r}", flush=True)

    def delay(self, seconds: float, seed: int) -> str:
        rng = random.Random(seed)
        live = sorted(self.connections)
        interesting = [n for n in live if self.connections[n].api_keys & set(INTERESTING)]
        if not live:
            return "no connection to delay"
        conn = self.connections[rng.choice(interesting or live)]
        conn.held_until = time.monotonic() + seconds
        return f"{conn.describe()} held {seconds:.1f} s"

    async def _listen(self, listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        self._servers[listen] = await asyncio.start_server(
            functools.partial(self._accept, listen=listen, upstream=upstream), *listen,
            reuse_address=True, backlog=512)

    async def _broker_down(self, listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        """Refuse connections on ``listen`` until ``upstream`` accepts one again."""
        server = self._servers.pop(listen, None)
        if server is None:
            return  # another connection already saw it down
        server.close()
        while True:
            await asyncio.sleep(self.UPSTREAM_RETRY_S)
            try:
                _, probe = await asyncio.open_connection(*upstream)
            except OSError:
                continue
            probe.close()
            try:
                await self._listen(listen, upstream)
                return
            except OSError:   # the address not free again yet
                continue

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, *,
                      listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*upstream)
        except OSError:
            client_w.close()
            task = asyncio.get_running_loop().create_task(self._broker_down(listen, upstream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        peer = client_w.get_extra_info("peername")
        conn = Connection(next(self._numbers), f"{peer[0]}:{peer[1]}", f"{upstream[0]}:{upstream[1]}")
        self.connections[conn.number] = conn
        try:
            await asyncio.gather(self._pump(client_r, up_w, conn), self._pump(up_r, client_w, None))
        finally:
            self.connections.pop(conn.number, None)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, conn: Connection | None) -> None:
        """Copy until end of stream; with `conn` (the client's direction), note its requests and
        wait out a hold before forwarding what was read."""
        try:
            while data := await source.read(65536):
                if conn is not None:
                    conn.observe(data)
                    wait = conn.held_until - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                sink.close()
            except (ConnectionError, OSError):
                pass


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> None:
    routes = [(_address(listen), _address(upstream)) for listen, _, upstream in (a.partition("=") for a in argv)]
    asyncio.run(DelayProxy(routes).serve())


if __name__ == "__main__":
    main(sys.argv[1:])
