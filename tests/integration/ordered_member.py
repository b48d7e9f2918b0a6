"""One OrderedConsumer group member as its own process, so a test can kill it with kill -9.

    python ordered_member.py BOOTSTRAP GROUP TOPIC NAME OUT_FILE SLOW_PARTITIONS DELAY_S

Every record poll() returns is written to OUT_FILE as one line, "time_ns key seq partition
offset", flushed at once (CLOCK_MONOTONIC is shared by the processes of one machine, so the
lines of several members merge into the group's delivery order). SIGTERM closes the consumer.
"""
from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import time

from odradek.client.ordered_consumer import OrderedConsumer


def main() -> None:
    bootstrap, group, topic, name, out_path, slow, delay = sys.argv[1:8]
    slow_partitions = {int(p) for p in slow.split(",") if p}
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that times out asks for stacks
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s {name} %(name)s %(message)s")
    consumer = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                                "auto.offset.reset": "earliest", "heartbeat.interval.ms": 300,
                                "session.timeout.ms": 6000, "auto.commit.interval.ms": 1000})
    consumer.subscribe([topic])
    with open(out_path, "a", buffering=1) as out:
        try:
            while not stopping:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    print(f"{name}: {msg.error()}", file=sys.stderr, flush=True)
                    continue
                out.write(f"{time.monotonic_ns()} {msg.key().decode()} {int(msg.value())} {msg.partition()} "
                          f"{msg.offset()}\n")
                if msg.partition() in slow_partitions:
                    time.sleep(float(delay))
        finally:
            consumer.close()


if __name__ == "__main__":
    main()
