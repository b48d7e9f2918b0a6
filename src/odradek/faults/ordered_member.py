"""One OrderedConsumer group member of the ordered fault workload, as a process of its own so
the nemesis can kill it with kill -9 (`python -m odradek.faults.ordered_member ...`).

    python -m odradek.faults.ordered_member BOOTSTRAP GROUP TOPIC NAME DELIVERIES_FILE

Every record poll() hands the application is appended to DELIVERIES_FILE as one line,
"D <monotonic ns> <key> <seq> <partition> <offset>", written before the next poll() (which is
where the member reports its position to the group, so a line is on disk before any other
member may act on it). CLOCK_MONOTONIC is one clock for every process of a machine, so the
checker merges the members' files into the group's delivery order. An error poll() hands back
is a line "E <monotonic ns> <text>". SIGTERM closes the consumer (exit 0); any exception
ends the process with a traceback on stderr and a non-zero status, which the run reports.
"""
from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import time

from odradek.client.librdkafka_log import client_logger
from odradek.client.ordered_consumer import OrderedConsumer

#: the members' group settings: heartbeats (and so position exchanges) every 300 ms; a killed
#: member is out of the group 6 s later
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 300


def _log_state(consumer: OrderedConsumer) -> None:
    """What the member's gates wait on and what it knows of the group (SIGUSR2: the run asks
    when the group still owes values at its end). Reads the consumer's internals: evidence for
    a fault run, not an interface."""
    log = logging.getLogger("odradek.faults.member")
    for tp, owned in sorted(consumer._owned.items()):
        log.info("state: %s position %d paused %s limit %s gate %r", tp, owned.position, owned.paused,
                 owned.limit, owned.gate)
    ex = consumer._exchange
    log.info("state: generation %d requested %s wanted %s group positions %s reports %s", ex.generation,
             ex.requested, sorted(ex.wanted), ex.group_positions, ex.reports)


def main(argv: list[str] | None = None) -> int:
    bootstrap, group, topic, name, out_path = (argv if argv is not None else sys.argv[1:])[:5]
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    # the run asks for every thread's stack when the group still owes values at its end
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {name} %(name)s %(message)s")
    librdkafka = client_logger(f"odradek.faults.{name}.librdkafka")
    librdkafka.setLevel(logging.WARNING)
    consumer = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                                "auto.offset.reset": "earliest", "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                                "session.timeout.ms": SESSION_TIMEOUT_MS, "auto.commit.interval.ms": 1000,
                                "logger": librdkafka})
    consumer.subscribe([topic])
    signal.signal(signal.SIGUSR2, lambda *_: _log_state(consumer))
    with open(out_path, "a", buffering=1, encoding="utf-8") as out:
        try:
            while not stopping:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    out.write(f"E {time.monotonic_ns()} {str(msg.error()).replace(chr(10), ' ')}\n")
                    continue
                _, key, seq = msg.value().decode().split(":")
                out.write(f"D {time.monotonic_ns()} {key} {seq} {msg.partition()} {msg.offset()}\n")
        finally:
            consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
