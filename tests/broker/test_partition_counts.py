"""KIP-253 on the broker: the ordered topics' undeleted_partition_count is recorded from the
controller's LeaderAndIsr (only when applied, in the same callback as its leader epochs) and
UpdateMetadata (only when not fenced). ControllerApis over a real ReplicaManager, no ZooKeeper."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from odradek.broker.controller_apis import ControllerApis
from odradek.broker.fetcher import ReplicaFetcherManager
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.replica_manager import ReplicaManager
from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.log.log import LogConfig
from odradek.log.log_manager import LogManager
from odradek.protocol import controller_api
from odradek.protocol.controller_api import LeaderAndIsrRequest, UpdateMetadataRequest

TP = TopicPartition("t", 0)


def _apis(data_dir: Path) -> tuple[ControllerApis, MetadataCache]:
    async def configs(topics: list[str]) -> dict[str, dict[str, str]]:
        return {t: {} for t in topics}

    rm = ReplicaManager(1, data_dir, LogManager(data_dir, LogConfig()), LogConfig(), 1,
                        ReplicaFetcherManager(1, lambda leader: None), configs, None, 30000,  # type: ignore[arg-type]
                        lambda: {1})
    metadata = MetadataCache()
    return ControllerApis(rm, metadata, None, None), metadata  # type: ignore[arg-type]


def _call(apis: ControllerApis, api_key: int, request: Any) -> None:
    result = apis(api_key, controller_api.VERSIONS[api_key], 1, request)
    if not isinstance(result, bytes):
        asyncio.run(result)  # type: ignore[arg-type]


def test_counts_come_from_applied_leader_and_isr_and_update_metadata(tmp_path: Path) -> None:
    apis, metadata = _apis(tmp_path)
    state = PartitionState(TP, 2, 1, 3, (1,), 0, (1,), True)
    # a new topic: the replica manager reads its config first (the awaitable path)
    _call(apis, controller_api.API_LEADER_AND_ISR,
          LeaderAndIsrRequest(1, 2, -1, (state,), (), (("t", 4, 2),)))
    assert metadata.undeleted_partition_count("t") == 4
    _call(apis, controller_api.API_LEADER_AND_ISR,
          LeaderAndIsrRequest(1, 2, -1, (state._replace(leader_epoch=4, is_new=False),), (),
                              (("t", 5, 2),)))
    assert metadata.undeleted_partition_count("t") == 5  # the synchronous path
    _call(apis, controller_api.API_UPDATE_METADATA,
          UpdateMetadataRequest(1, 2, -1, (state._replace(is_new=False),),
                                (BrokerInfo(1, "h", 9092),), (("t", 6, 2),)))
    assert metadata.undeleted_partition_count("t") == 6
    # a request from an older controller is fenced, its count ignored
    _call(apis, controller_api.API_LEADER_AND_ISR,
          LeaderAndIsrRequest(1, 1, -1, (state._replace(leader_epoch=9),), (), (("t", 2, 2),)))
    _call(apis, controller_api.API_UPDATE_METADATA,
          UpdateMetadataRequest(1, 1, -1, (), (BrokerInfo(1, "h", 9092),), (("t", 2, 2),)))
    assert metadata.undeleted_partition_count("t") == 6
    assert metadata.undeleted_partition_count("plain") is None


def test_a_request_meant_for_the_previous_incarnation_is_fenced_once_the_broker_epoch_is_known(
        tmp_path: Path) -> None:
    """A restarted broker listens before it registers; its controller, reconnecting to the
    same address, resends an UpdateMetadata meant for the process it replaced (one event's
    partitions only). Held until the registration gives this process its broker epoch, it is
    fenced as stale and the cache stays unfilled (Metadata is then answered from ZooKeeper);
    one for this incarnation is applied."""
    async def main() -> None:
        async def configs(topics: list[str]) -> dict[str, dict[str, str]]:
            return {t: {} for t in topics}
        rm = ReplicaManager(1, tmp_path, LogManager(tmp_path, LogConfig()), LogConfig(), 1,
                            ReplicaFetcherManager(1, lambda leader: None), configs, None, 30000,  # type: ignore[arg-type]
                            lambda: {1})
        metadata, registered = MetadataCache(), asyncio.Event()
        apis = ControllerApis(rm, metadata, None, None, registered)  # type: ignore[arg-type]
        state = PartitionState(TP, 2, 1, 3, (1,), 0, (1,), False)
        update = UpdateMetadataRequest(1, 2, 70, (state,), (BrokerInfo(1, "h", 9092),), ())
        stale = apis(controller_api.API_UPDATE_METADATA, controller_api.VERSIONS[controller_api.API_UPDATE_METADATA],
                     1, update)
        assert not isinstance(stale, bytes)
        pending = asyncio.ensure_future(stale)
        await asyncio.sleep(0)
        assert not pending.done() and not metadata.initialized
        rm.broker_epoch = 90   # the registration returns
        registered.set()
        await pending
        assert not metadata.initialized   # fenced: STALE_BROKER_EPOCH
        fresh = apis(controller_api.API_UPDATE_METADATA, controller_api.VERSIONS[controller_api.API_UPDATE_METADATA],
                     2, UpdateMetadataRequest(1, 2, 90, (state,), (BrokerInfo(1, "h", 9092),), ()))
        assert isinstance(fresh, bytes) and metadata.initialized
    asyncio.run(main())
