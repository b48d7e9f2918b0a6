"""The controller's requests to this broker (LeaderAndIsr, UpdateMetadata, StopReplica) and a
broker's ControlledShutdown to this broker's controller: Kafka's KafkaApis.handleLeaderAndIsrRequest,
handleUpdateMetadataRequest, handleStopReplicaRequest and handleControlledShutdownRequest.

Each is fenced by controller and broker epoch in the replica manager and answered in the same
callback, unless a LeaderAndIsr must read topic configs first or a ControlledShutdown waits
for the controller's event thread.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, cast

from odradek.broker.metadata_cache import LEADER_DURING_DELETE, MetadataCache
from odradek.broker.replica_manager import ReplicaManager
from odradek.common.gc_policy import paused_for
from odradek.common.metadata import TopicPartition
from odradek.controller.events import ControlledShutdown, ControllerEvent, EventPreemptedError, NotControllerError
from odradek.controller.leader_selectors import StateChangeFailedError
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.protocol import controller_api
from odradek.protocol.controller_api import ControlledShutdownRequest, ControlledShutdownResponse, ControllerResponse
from odradek.protocol.errors import ErrorCode

AskController = Callable[[Callable[[Callable[[object], None]], ControllerEvent]], Awaitable[object]]


class ControllerApis:
    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache,
                 group_coordinator: GroupCoordinator, ask_controller: AskController,
                 registered: asyncio.Event | None = None) -> None:
        """``registered``: set once this process has registered in ZooKeeper and knows its
        broker epoch (None: it does already)."""
        self._rm = replica_manager
        self._metadata = metadata
        self._groups = group_coordinator
        self._ask_controller = ask_controller
        self._registered = registered

    def __call__(self, api_key: int, version: int, correlation_id: int,
                 request: Any) -> bytes | Awaitable[bytes]:
        if api_key == controller_api.API_CONTROLLED_SHUTDOWN:
            return self._controlled_shutdown(version, correlation_id, request)
        if self._registered is not None and not self._registered.is_set():
            return self._once_registered(api_key, version, correlation_id, request)
        return self._from_controller(api_key, version, correlation_id, request)

    async def _once_registered(self, api_key: int, version: int, correlation_id: int, request: Any) -> bytes:
        """A controller request that reached this process before its registration: held
        until its broker epoch is known, so the epoch fence can tell a request meant for the
        previous incarnation at the same address (its controller reconnected to the new
        process and resent it) from one meant for this one. Applied unfenced, such a resent
        UpdateMetadata carried only the partitions of its own event and made the cache count
        as filled (metadata_cache.py): a fault run's restarted broker then answered Metadata
        without an existing topic, and a transactional producer's records to it failed."""
        assert self._registered is not None
        await self._registered.wait()
        response = self._from_controller(api_key, version, correlation_id, request)
        return response if isinstance(response, bytes) else await response

    def _from_controller(self, api_key: int, version: int, correlation_id: int,
                         request: Any) -> bytes | Awaitable[bytes]:
        rm = self._rm
        if api_key == controller_api.API_LEADER_AND_ISR:
            result = rm.become_leader_or_follower(request)
            if not isinstance(result, ControllerResponse):
                return _encode_later(api_key, version, correlation_id, result,
                                     lambda applied: self._record_counts(request, applied))
            self._record_counts(request, result)
            response = result
        elif api_key == controller_api.API_STOP_REPLICA:
            with paused_for(len(request.partitions)):
                response = rm.stop_replicas(request)
        else:
            with paused_for(len(request.partition_states)):  # 200,000 new objects at 100,000 partitions
                response = self._update_metadata(request)
        return controller_api.encode_response(api_key, version, correlation_id, response)

    def _record_counts(self, request: Any, applied: ControllerResponse) -> None:
        """KIP-253: an applied LeaderAndIsr's partition_counts are recorded in the
        same loop callback as its leader epochs (the replica manager applies a request in one
        synchronous call), so the two change together, as the KIP requires."""
        counts = request.partition_counts
        if counts and applied.error_code == ErrorCode.NONE:
            self._metadata.record_partition_counts(counts)

    def _update_metadata(self, request: Any) -> ControllerResponse:
        rm = self._rm
        stale = rm.fence(request.controller_epoch, request.broker_epoch)
        if stale is None:
            known = {b.id for b in self._metadata.live_brokers}
            self._metadata.update(request.controller_id, request.controller_epoch,
                                  request.live_brokers, request.partition_states)
            if request.partition_counts:  # KIP-253
                self._metadata.record_partition_counts(request.partition_counts)
            deleted = [st.tp for st in request.partition_states if st.leader == LEADER_DURING_DELETE]
            if deleted:  # Kafka's handleUpdateMetadataRequest: their groups' offsets go too
                self._groups.handle_deleted_partitions(deleted)
            registered = {b.id for b in request.live_brokers} - known
            if registered:
                rm.brokers_registered(registered)
        return ControllerResponse(int(stale or 0), {})

    async def _controlled_shutdown(self, version: int, correlation_id: int,
                                   request: ControlledShutdownRequest) -> bytes:
        """Answered once leadership has moved, with the replicated partitions the stopping
        broker still leads."""
        outcome = await self._ask_controller(
            lambda done: ControlledShutdown(request.broker_id, request.broker_epoch, done))
        if isinstance(outcome, (NotControllerError, EventPreemptedError)):
            response = ControlledShutdownResponse(ErrorCode.NOT_CONTROLLER)
        elif isinstance(outcome, TimeoutError):
            response = ControlledShutdownResponse(ErrorCode.REQUEST_TIMED_OUT)
        elif isinstance(outcome, StateChangeFailedError):  # not registered at that epoch
            response = ControlledShutdownResponse(ErrorCode.STALE_BROKER_EPOCH)
        elif isinstance(outcome, Exception):
            response = ControlledShutdownResponse(ErrorCode.UNKNOWN_SERVER_ERROR)
        else:
            remaining = cast("set[TopicPartition]", outcome)  # ControlledShutdown's answer: still led
            response = ControlledShutdownResponse(ErrorCode.NONE, tuple(sorted(remaining)))
        return controller_api.encode_response(controller_api.API_CONTROLLED_SHUTDOWN, version,
                                              correlation_id, response)


async def _encode_later(api_key: int, version: int, correlation_id: int,
                        pending: Awaitable[ControllerResponse],
                        applied: Callable[[ControllerResponse], None] | None = None) -> bytes:
    """``applied`` runs as soon as ``pending`` returns, before anything else on the loop: a
    coroutine's return resumes its awaiter without yielding."""
    response = await pending
    if applied is not None:
        applied(response)
    return controller_api.encode_response(api_key, version, correlation_id, response)
