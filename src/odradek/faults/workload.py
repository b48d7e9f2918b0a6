"""What the fault run's clients do, and what they saw: idempotent acks=all producers writing
keyed values with a per-key sequence number, and a consumer tailing every partition.

Each client is created once for the whole run, as an application would: a client that raised
from produce() or poll(), reported a fatal error, or failed a delivery (the delivery timeout
is longer than the run, so a failure is not a timeout) counts as a client the application
would have had to re-create.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.client.librdkafka_log import ProtocolErrorRecorder

LOGGER = logging.getLogger("odradek.faults.librdkafka")
PROTOCOL_ERRORS = ProtocolErrorRecorder()
LOGGER.addHandler(PROTOCOL_ERRORS)
LOGGER.propagate = False
LOGGER.setLevel(logging.DEBUG)

def log_clients_to(data_dir: Path, fmt: str = "%(asctime)s %(threadName)s %(name)s %(message)s") -> logging.Handler:
    """The run's clients' log lines (LOGGER) also go to DATA_DIR/librdkafka.log, every workload's
    evidence file; the handler, for a workload that logs more loggers there or detaches it."""
    handler = logging.FileHandler(data_dir / "librdkafka.log")
    handler.setFormatter(logging.Formatter(fmt))
    LOGGER.addHandler(handler)
    return handler


#: value = b"<producer>:<key>:<seq>"
Value = tuple[int, str, int]


def encode_value(producer: int, key: str, seq: int) -> bytes:
    return f"{producer}:{key}:{seq}".encode()


def decode_value(raw: bytes) -> Value:
    producer, key, seq = raw.decode().split(":")
    return int(producer), key, int(seq)


class PacedKeys:
    """A producer's keys written in turn, their next sequence numbers, and its pace: about
    ``rate`` values a second, catching up at once after a stall rather than in a burst."""

    def __init__(self, index: int, keys: int, rate: float) -> None:
        self.index = index
        self.keys = [f"p{index}-k{k}" for k in range(keys)]
        self.seq = {k: 0 for k in self.keys}
        self._interval = 1.0 / rate
        self._i = 0
        self._next_at = time.monotonic()

    def next_value(self) -> tuple[str, int, bytes]:
        """(key, seq, encoded value) of the next value; ``written`` once it was handed over."""
        key = self.keys[self._i % len(self.keys)]
        seq = self.seq[key] + 1
        return key, seq, encode_value(self.index, key, seq)

    def written(self, key: str, seq: int) -> float:
        """Count the value as sent; returns how long to wait before the next one."""
        self.seq[key] = seq
        self._i += 1
        self._next_at += self._interval
        pause = self._next_at - time.monotonic()
        if pause <= 0:
            self._next_at = time.monotonic()
        return max(pause, 0.0)


@dataclass
class ClientTrouble:
    """Everything a real application would have had to handle itself."""

    died: list[str] = field(default_factory=list)             # exceptions, fatal errors
    failed_deliveries: list[str] = field(default_factory=list)
    consumer_errors: list[str] = field(default_factory=list)  # errors poll() handed back
    non_monotonic_polls: list[str] = field(default_factory=list)
    hung: list[str] = field(default_factory=list)              # client calls that never returned


class KeyedProducer:
    """One idempotent acks=all producer for the whole run, writing its own keys in turn at
    about `rate` values per second; remembers where each acknowledged value landed.
    OrderedKeyedProducer (ordered_workload.py) is the same loop over an OrderedProducer."""

    name = "producer"

    def __init__(self, index: int, bootstrap: str, topic: str, keys: int, rate: float,
                 trouble: ClientTrouble, debug: str | None = None, extra: dict[str, Any] | None = None,
                 profile: str = "librdkafka") -> None:
        """``extra``: settings over the defaults; ``profile``: its name in the report
        (producer_profiles.py)."""
        self.index, self.topic, self.trouble, self.profile = index, topic, trouble, profile
        self._keys = PacedKeys(index, keys, rate)
        self.acked: dict[Any, tuple[int, int | None]] = {}  # offset None: acknowledged implicitly
        self.sent = 0
        self._stop = threading.Event()
        self._producer = self._make_producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 900_000, "logger": LOGGER, "error_cb": self._on_error,
            # the idempotent producer's state changes (epoch bumps, sequence errors), kept in the
            # run's librdkafka.log: what explains a duplicate or a reordering (more contexts,
            # e.g. eos,msg,protocol, through ODRADEK_FAULTS_PRODUCER_DEBUG, or `debug`)
            "debug": debug or os.environ.get("ODRADEK_FAULTS_PRODUCER_DEBUG", "eos"),
            "client.id": f"faults-{self.name}-{index}", **(extra or {})})
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-{index}", daemon=True)

    def _make_producer(self, config: dict[str, Any]) -> Any:
        return Producer(config)

    def _value_of(self, raw: bytes) -> Any:
        """What `acked` is keyed by: the whole decoded value."""
        return decode_value(raw)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.trouble.died.append(f"producer {self.index}: fatal {err}")

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        value = self._value_of(msg.value())
        if err is not None:
            self.trouble.failed_deliveries.append(f"producer {self.index} {value}: {err}")
        else:
            offset = msg.offset()
            self.acked[value] = (msg.partition(), offset if offset is not None and offset >= 0 else None)

    def _run(self) -> None:
        while not self._stop.is_set():
            key, seq, value = self._keys.next_value()
            try:
                self._producer.produce(self.topic, key=key.encode(), value=value, on_delivery=self._on_delivery)
            except BufferError:  # the local queue is full (a partition has no leader): wait
                self._producer.poll(0.1)
                continue
            except:  # noqa: E722 - an application would crash here (a fatal error: a bare KafkaError)
                self.trouble.died.append(f"producer {self.index}: produce() raised {sys.exc_info()[1]!r}")
                return
            pause = self._keys.written(key, seq)
            self.sent += 1
            self._producer.poll(0)
            if pause > 0:
                time.sleep(pause)

    def start(self) -> None:
        self._thread.start()

    def stop(self, flush_timeout_s: float) -> int:
        """Stop producing and wait for every value's outcome; returns those still unresolved."""
        self._stop.set()
        self._thread.join(30)
        try:
            return int(self._producer.flush(flush_timeout_s))
        except:  # noqa: E722 - after a fatal error confluent-kafka raises a bare KafkaError, no Exception
            self.trouble.died.append(f"producer {self.index}: flush() raised {sys.exc_info()[1]!r}")
            return len(self._producer)


class TailingConsumer:
    """A consumer assigned every partition from its end, polling for the whole run: it must
    never be handed an error, and its offsets per partition must only grow."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, trouble: ClientTrouble) -> None:
        self.trouble = trouble
        self.received = 0
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults-unused",
                                   "enable.auto.commit": False, "logger": LOGGER,
                                   "error_cb": self._on_error, "client.id": "faults-consumer"})
        self._consumer.assign([TopicPartition(topic, p, -1) for p in range(partitions)])  # -1: the end
        self._thread = threading.Thread(target=self._run, name="consumer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.trouble.died.append(f"consumer: fatal {err}")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self._consumer.poll(0.2)
            except Exception as exc:  # noqa: BLE001 - an application would crash here
                self.trouble.died.append(f"consumer: poll() raised {exc!r}")
                return
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self.trouble.consumer_errors.append(str(error))
                continue
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None  # set on every message without an error
            last = self._last.get(partition, -1)
            if offset <= last:
                self.trouble.non_monotonic_polls.append(f"partition {partition}: {last} then {offset}")
            self._last[partition] = offset
            self.received += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()
