"""Kafka's ProducerIdManager (ZooKeeper mode): producer ids for InitProducerId, handed out from
blocks of 1,000 that each broker claims in /latest_producer_id_block with a conditional write,
so no two brokers ever give out the same id and a broker reads ZooKeeper once per 1,000."""
from __future__ import annotations

import asyncio
from typing import Any


class ProducerIdManager:
    def __init__(self, broker_id: int, zk: Any) -> None:
        """``zk``: KafkaZkClient (blocking; called through asyncio.to_thread)."""
        self._broker_id = broker_id
        self._zk = zk
        self._ids: list[int] = []  # the current block, next id last
        self._lock = asyncio.Lock()

    async def generate_producer_id(self) -> int:
        async with self._lock:
            if not self._ids:
                block = await asyncio.to_thread(self._zk.allocate_producer_id_block, self._broker_id)
                self._ids = list(range(block.end, block.start - 1, -1))
            return self._ids.pop()
