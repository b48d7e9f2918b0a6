"""The acks=all producer every real-cluster test uses (tests/integration and tests/spark)."""
from __future__ import annotations

from confluent_kafka import Producer


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes, list | None]],
            **conf: object) -> list[tuple[int, int, bytes | None, bytes]]:
    """Produce (key, value, headers) with acks=all; the acknowledged (partition, offset, key, value)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
                         **conf})
    acked: list[tuple[int, int, bytes | None, bytes]] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))  # type: ignore[attr-defined]

    for i, (key, value, headers) in enumerate(records):
        producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return acked
