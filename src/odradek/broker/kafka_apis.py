"""KafkaApis: one method per Kafka API this broker answers.

Requests are decoded by kio; responses are described as nested dicts and encoded by kio for the
version the client asked for (protocol/kio_util.py). Produce and Fetch keep record batches as
opaque bytes end to end. Anything a client sends is answered with a Kafka error code or, for
bytes that are not a Kafka request at all, a closed connection; never a crash.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
import traceback
from typing import Any, Awaitable

from odradek.broker import (
    acl_apis,
    api_keys,
    client_quota_apis,
    client_quotas,
    config_helper,
    error_responses,
    group_apis,
    metadata_apis,
    ordered_delivery_apis,
    reassignment_apis,
    request_authorization,
    scram_credential_apis,
    txn_admin_apis,
    txn_apis,
    zk_admin_manager,
)
from odradek.broker.connection import CloseConnection, KafkaConnection
from odradek.broker.context import BrokerContext
from odradek.broker.create_partitions import create_partitions
from odradek.broker.create_topics import create_topics
from odradek.broker.delete_records import delete_records
from odradek.broker.delete_topics import delete_topics
from odradek.broker.describe_log_dirs import describe_log_dirs
from odradek.broker.elect_leaders import elect_leaders
from odradek.broker.fetch_handler import READ_COMMITTED, FetchHandler, leader_for
from odradek.broker.init_producer_id import init_producer_id
from odradek.broker.metrics import REQUEST_NAMES, BrokerMetrics
from odradek.broker.ordered_delivery_fence import OrderedDeliveryFence
from odradek.broker.partition import Partition
from odradek.broker.producer_state import ProducerStateError
from odradek.broker.request_authorization import allowed, denied, wire
from odradek.broker.sasl_server_authenticator import illegal_sasl_state
from odradek.broker.session import current_session
from odradek.broker.txn_marker_apis import write_txn_markers
from odradek.common.errors import NotLeaderError
from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.log.errors import CorruptRecordError
from odradek.protocol import controller_api, fast_paths, kio_util
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import parse_request_header
from odradek.protocol.records import TRANSACTIONAL_FLAG, has_keyless_record, iter_batches
from odradek.security.acl import AclOperation, ResourceType

#: the low byte of the first batch's attributes (base offset, length, leader epoch, magic, CRC
#: and the attributes' high byte come before it)
TRANSACTIONAL_ATTRIBUTE_BYTE = 22

log = logging.getLogger("odradek.broker.kafka_apis")

# what the handlers of this module authorize (broker/request_authorization.py)
_PRODUCE = wire(api_keys.PRODUCE)
_WRITE_TRANSACTIONAL_ID = _PRODUCE.check(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID)
_WRITE_TOPIC = _PRODUCE.check(AclOperation.WRITE, ResourceType.TOPIC)
_DESCRIBE_LISTED_TOPIC = wire(api_keys.LIST_OFFSETS).check(AclOperation.DESCRIBE, ResourceType.TOPIC)
_DESCRIBE_EPOCH_TOPIC = wire(api_keys.OFFSET_FOR_LEADER_EPOCH).check(AclOperation.DESCRIBE, ResourceType.TOPIC)
#: the controller's requests and ControlledShutdown: CLUSTER_ACTION on the cluster
_CONTROLLER_CHECKS = {key: wire(key).check(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
                      for key in controller_api.VERSIONS}
# the SASL exchange is the authenticator's, before any principal exists: nothing to check
wire(api_keys.SASL_HANDSHAKE)
wire(api_keys.SASL_AUTHENTICATE)


@_PRODUCE.gate
def _transactional_produce_denied(ctx: BrokerContext, req: Any, _version: int) -> ErrorCode | None:
    """Kafka's handleProduceRequest: records of a transaction need WRITE on its transactional id
    (records claiming one without a transactional id are denied too)."""
    for topic in req.topic_data:
        for pdata in topic.partition_data:
            records = pdata.records
            if records and len(records) > TRANSACTIONAL_ATTRIBUTE_BYTE \
                    and records[TRANSACTIONAL_ATTRIBUTE_BYTE] & TRANSACTIONAL_FLAG:
                if req.transactional_id is None or not allowed(ctx, _WRITE_TRANSACTIONAL_ID, req.transactional_id):
                    return _WRITE_TRANSACTIONAL_ID.error
                return None
    return None


class KafkaApis:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.ordered_delivery_fence = OrderedDeliveryFence(ctx.metadata.ordered_partition_counts)
        # UpdateMetadata's brokers are known by this listener's addresses (the inter-broker
        # clients of transaction markers and KIP-890's checks connect there)
        self._inter_broker_listener = ctx.config.listeners().inter_broker.name
        fetch = FetchHandler(ctx)
        self._routes = {
            api_keys.PRODUCE: self.produce,
            api_keys.FETCH: fetch,
            api_keys.LIST_OFFSETS: self.list_offsets,
            api_keys.METADATA: metadata_apis.metadata,
            api_keys.API_VERSIONS: metadata_apis.api_versions,
            api_keys.CREATE_TOPICS: create_topics,
            api_keys.DELETE_TOPICS: delete_topics,
            api_keys.CREATE_PARTITIONS: create_partitions,
            api_keys.DELETE_RECORDS: delete_records,
            api_keys.INIT_PRODUCER_ID: init_producer_id,
            api_keys.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            api_keys.DESCRIBE_CONFIGS: config_helper.describe_configs,
            api_keys.DESCRIBE_LOG_DIRS: describe_log_dirs,
            api_keys.ALTER_CONFIGS: zk_admin_manager.alter_configs,
            api_keys.INCREMENTAL_ALTER_CONFIGS: zk_admin_manager.incremental_alter_configs,
            api_keys.DESCRIBE_CLUSTER: metadata_apis.describe_cluster,
            api_keys.ELECT_LEADERS: elect_leaders,
            api_keys.ALTER_PARTITION_REASSIGNMENTS: reassignment_apis.alter_partition_reassignments,
            api_keys.LIST_PARTITION_REASSIGNMENTS: reassignment_apis.list_partition_reassignments,
            api_keys.WRITE_TXN_MARKERS: write_txn_markers,
            api_keys.ADD_PARTITIONS_TO_TXN: txn_apis.add_partitions_to_txn,
            api_keys.ADD_OFFSETS_TO_TXN: txn_apis.add_offsets_to_txn,
            api_keys.END_TXN: txn_apis.end_txn,
            api_keys.DESCRIBE_PRODUCERS: txn_admin_apis.describe_producers,
            api_keys.LIST_TRANSACTIONS: txn_admin_apis.list_transactions,
            api_keys.DESCRIBE_TRANSACTIONS: txn_admin_apis.describe_transactions,
            # the SASL exchange itself is the authenticator's; here only where none is expected
            api_keys.SASL_HANDSHAKE: lambda _ctx, header, _req, _version: illegal_sasl_state(header),
            api_keys.SASL_AUTHENTICATE: lambda _ctx, header, _req, _version: illegal_sasl_state(header),
            **group_apis.ROUTES,
            **scram_credential_apis.ROUTES,
            **acl_apis.ROUTES,
            **client_quota_apis.ROUTES,
        }
        # with an authorizer, the hot paths' own entry points, which authorize (the others check
        # inside, after one attribute test)
        self._authorized_routes: dict[int, Any] = {api_keys.PRODUCE: self._produce_authorized,
                                                   api_keys.FETCH: fetch.authorized}

    def __call__(self, frame: memoryview, conn: KafkaConnection) -> bytes | None | Awaitable[bytes | None]:
        started = time.perf_counter()
        # client quotas (client_quotas.py): None unless one is set; then the handler runs as the
        # request's, its time metered, and a throttled response mutes the connection
        quotas = self.ctx.client_quotas
        quota = None if quotas is None else quotas.begin(frame, conn.session)
        if quota is None:
            result = self._handle(frame, conn)
        else:
            if quota.produce_ms:  # known at once: the requests pipelined behind this one wait
                conn.throttle(quota.produce_ms)
            token = client_quotas.enter(quota)
            busy_from = time.perf_counter_ns()
            try:
                result = self._handle(frame, conn)
            finally:
                quota.busy_ns += time.perf_counter_ns() - busy_from
                client_quotas.leave(token)
        metrics = self.ctx.metrics
        if metrics is None and quota is None:
            return result
        api_key, version = struct.unpack_from(">hh", frame, 0)  # _handle checked the length
        if result is None or isinstance(result, (bytes, list)):
            if metrics is not None:
                metrics.request_done(api_key, version, started, result)
            if quota is not None:
                conn.throttle(quota.quotas.finish(quota, result))
            return result
        return self._timed(result, metrics, api_key, version, started, quota, conn)

    async def _timed(self, pending: Awaitable[bytes | None], metrics: BrokerMetrics | None, api_key: int,
                     version: int, started: float, quota: client_quotas.RequestQuota | None = None,
                     conn: KafkaConnection | None = None) -> bytes | None:
        """A response given later: its time (metrics) and, with client quotas, the handler's
        steps metered as the request's (it sees the request's quota in this task), then the
        connection throttled once the response is there."""
        response = None
        try:
            if quota is None:
                response = await pending
            else:
                token = client_quotas.enter(quota)
                try:
                    response = await client_quotas.metered(pending, quota)
                finally:
                    client_quotas.leave(token)
            return response
        finally:
            if metrics is not None:
                metrics.request_done(api_key, version, started, response)
            if quota is not None and conn is not None:
                conn.throttle(quota.quotas.finish(quota, response))

    def _handle(self, frame: memoryview, conn: KafkaConnection) -> bytes | None | Awaitable[bytes | None]:
        if len(frame) < 8:
            raise CloseConnection("request shorter than a request header")
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        if api_key in controller_api.VERSIONS:
            return self._controller_request(frame, api_key, version, correlation_id)
        if api_key in api_keys.ORDERED_DELIVERY_VERSIONS:  # KIP-253's own APIs: kio has no schema for them
            return ordered_delivery_apis.handle(self.ctx, frame)
        if api_key == api_keys.API_VERSIONS and not api_keys.supported(api_key, version):
            return metadata_apis.unsupported_api_versions(correlation_id)
        if not api_keys.supported(api_key, version):
            raise CloseConnection(f"unsupported API key {api_key} version {version}")
        try:
            header, request = kio_util.decode_request(frame)
        except Exception as exc:
            raise CloseConnection(f"malformed request (key {api_key} v{version}): {exc!r}") from None
        try:
            if self.ctx.authorizer is not None:  # authorizer.class.name: Kafka's checks first
                result = self._handle_authorized(api_key, version, header, request, conn)
            elif api_key == api_keys.JOIN_GROUP:  # the one API that records who asked (DescribeGroups' client host)
                result = group_apis.join_group(self.ctx, header, request, version, conn.peer)
            else:
                result = self._routes[api_key](self.ctx, header, request, version)
        except CloseConnection:
            raise
        except Exception as exc:  # noqa: BLE001 - answered, as Kafka's KafkaApis.handleError answers
            return self._failed(api_key, version, header, request, exc, conn)
        if result is None or isinstance(result, (bytes, list)):
            return result
        return self._answered_if_failed(result, api_key, version, header, request, conn)

    def _handle_authorized(self, api_key: int, version: int, header: Any, request: Any,
                           conn: KafkaConnection) -> bytes | None | Awaitable[bytes | None]:
        """_handle's dispatch with an authorizer: the API's request-wide checks (a denial is the
        answer), then its handler, which makes the per-resource ones (request_authorization.py)."""
        refused = request_authorization.check_request(self.ctx, api_key, version, header.correlation_id, request)
        if refused is not None:
            return refused
        if api_key == api_keys.JOIN_GROUP:
            return group_apis.join_group(self.ctx, header, request, version, conn.peer)
        route = self._authorized_routes.get(api_key) or self._routes[api_key]
        return route(self.ctx, header, request, version)

    async def _answered_if_failed(self, pending: Awaitable[bytes | None], api_key: int, version: int, header: Any,
                                  request: Any, conn: KafkaConnection) -> bytes | None:
        try:
            return await pending
        except CloseConnection:
            raise
        except Exception as exc:  # noqa: BLE001 - as in _handle
            return self._failed(api_key, version, header, request, exc, conn)

    def _failed(self, api_key: int, version: int, header: Any, request: Any, exc: Exception,
                conn: KafkaConnection) -> bytes:
        """UNKNOWN_SERVER_ERROR for the one request whose handler failed, and the connection goes
        on (error_responses.py says why)."""
        log.error("request %s v%d from %s failed; answered UNKNOWN_SERVER_ERROR", REQUEST_NAMES.get(api_key, api_key), version,
                  conn.peer, exc_info=exc)
        response = error_responses.error_response(api_key, version, header.correlation_id, request,
                                                  ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
        if response is None:
            raise CloseConnection(f"handler failed and the response has no place for an error: {exc!r}") from exc
        response.handler_failure = "".join(traceback.format_exception(exc))
        return response

    def _controller_request(self, frame: memoryview, api_key: int, version: int, correlation_id: int) -> Any:
        if version != controller_api.VERSIONS[api_key]:
            raise CloseConnection(f"unsupported controller API {api_key} v{version}")
        try:
            header_end = parse_request_header(frame)[4]
            request = controller_api.decode_request(api_key, version, frame[header_end:], self._inter_broker_listener)
        except Exception as exc:
            raise CloseConnection(f"malformed controller request {api_key}: {exc!r}") from None
        if self.ctx.authorizer is not None and not allowed(self.ctx, _CONTROLLER_CHECKS[api_key]):
            return _controller_denied(api_key, version, correlation_id, request)
        return self.ctx.controller_requests(api_key, version, correlation_id, request)

    # -- Produce -------------------------------------------------------------------------------

    def produce(self, ctx: BrokerContext, header: Any, req: Any,
                version: int) -> bytes | None | Awaitable[bytes | None]:
        checks = self._transactions_to_verify(req)
        if checks:
            return self._produce_verified(header, req, version, checks, {})
        return self._produce(header, req, version, {})

    def _produce_authorized(self, ctx: BrokerContext, header: Any, req: Any,
                            version: int) -> bytes | None | Awaitable[bytes | None]:
        """Produce with an authorizer (its transactional id was checked by the gate above): each
        partition of a topic the principal may not WRITE answers TOPIC_AUTHORIZATION_FAILED and
        is neither verified nor appended; the rest goes as `produce`."""
        names = denied(ctx, _WRITE_TOPIC, (t.name for t in req.topic_data))
        if not names:
            return self.produce(ctx, header, req, version)
        refused = {TopicPartition(t.name, p.index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                   for t in req.topic_data if t.name in names for p in t.partition_data}
        checks = {tp: c for tp, c in self._transactions_to_verify(req).items() if tp not in refused}
        if checks:
            return self._produce_verified(header, req, version, checks, refused)
        return self._produce(header, req, version, refused)

    def _transactions_to_verify(self, req: Any) -> dict[TopicPartition, tuple[Partition, int, int]]:
        """The partitions whose batch opens a transaction here: KIP-890's check first (the
        common case, a batch of a transaction already open here, needs none); and those where
        an earlier request of the producer still waits on its check: this one goes after it."""
        checks: dict[TopicPartition, tuple[Partition, int, int]] = {}
        for topic in req.topic_data:
            for pdata in topic.partition_data:
                records = pdata.records
                if not records or len(records) <= TRANSACTIONAL_ATTRIBUTE_BYTE \
                        or not records[TRANSACTIONAL_ATTRIBUTE_BYTE] & TRANSACTIONAL_FLAG:
                    continue
                tp = TopicPartition(topic.name, pdata.index)
                partition = self.ctx.replica_manager.get(tp)
                if partition is None or not partition.is_leader:
                    continue  # refused as any produce to a non-leader
                try:
                    h = next(iter_batches(records))
                except (StopIteration, CorruptRecordError):
                    continue  # refused as corrupt by the append
                if partition.needs_verification(h.producer_id, h.producer_epoch) \
                        or partition.verifications.waiting(h.producer_id, h.producer_epoch):
                    checks[tp] = (partition, h.producer_id, h.producer_epoch)
        return checks

    async def _produce_verified(self, header: Any, req: Any, version: int,
                                checks: dict[TopicPartition, tuple[Partition, int, int]],
                                refused: dict[TopicPartition, ErrorCode]) -> bytes | None:
        """Produce once the transaction coordinator confirmed that each transaction these
        batches would open is open and names their partitions (txn_verification.py); behind
        the producer's earlier requests to the same partitions that wait on such a check, so
        its batches are appended in the order they came (verification_state.py)."""
        turns = {tp: partition.verifications.take_turn(pid, epoch) for tp, (partition, pid, epoch) in checks.items()}
        verdicts: dict[TopicPartition, ErrorCode] = {}
        try:
            await self._verify(req, checks, turns, verdicts)
            response = self._produce(header, req, version, {**refused, **{tp: e for tp, e in verdicts.items() if e}})
        finally:
            for tp, (partition, pid, epoch) in checks.items():
                partition.verifications.turn_done(pid, epoch, turns[tp][1], verdicts.get(tp, ErrorCode.NOT_ENOUGH_REPLICAS))
        if response is None or isinstance(response, bytes):
            return response  # None: acks=0, no answer at all
        return await response

    async def _verify(self, req: Any, checks: dict[TopicPartition, tuple[Partition, int, int]],
                      turns: dict[TopicPartition, tuple[asyncio.Future[ErrorCode] | None, asyncio.Future[ErrorCode]]],
                      verdicts: dict[TopicPartition, ErrorCode]) -> None:
        """Fill ``verdicts`` (NONE: append). A partition behind an earlier request of the
        producer takes that request's refusal, or needs no check once its batch opened the
        transaction here."""
        if req.transactional_id is None:
            verdicts.update(dict.fromkeys(checks, ErrorCode.INVALID_TXN_STATE))  # transactional batches need an id
            return
        waiting = {tp: previous for tp, (previous, _mine) in turns.items() if previous is not None}
        if waiting:
            for tp, verdict in zip(waiting, await asyncio.gather(*waiting.values()), strict=True):
                partition, pid, epoch = checks[tp]
                if verdict != ErrorCode.NONE:
                    verdicts[tp] = verdict
                elif not partition.needs_verification(pid, epoch):
                    verdicts[tp] = ErrorCode.NONE
        to_check = {tp: check for tp, check in checks.items() if tp not in verdicts}
        guards = {tp: partition.verifications.start(pid) for tp, (partition, pid, _epoch) in to_check.items()}
        by_producer: dict[tuple[int, int], list[TopicPartition]] = {}
        for tp, (_partition, pid, epoch) in to_check.items():
            by_producer.setdefault((pid, epoch), []).append(tp)
        answers: dict[TopicPartition, ErrorCode] = {}
        for answer in await asyncio.gather(*(self.ctx.txn_verifier.verify(req.transactional_id, pid, epoch, tps)
                                             for (pid, epoch), tps in by_producer.items())):
            answers.update(answer)
        for tp, (partition, pid, _epoch) in to_check.items():
            error = answers.get(tp, ErrorCode.INVALID_TXN_STATE)
            if error == ErrorCode.NONE and not partition.verifications.holds(pid, guards[tp]):
                error = ErrorCode.INVALID_TXN_STATE  # its transaction ended while it was checked
            if error != ErrorCode.NONE:
                log.info("%s: rejected a transactional batch of producer %d: %s", tp, pid, error.name)
            verdicts[tp] = error

    def _produce(self, header: Any, req: Any, version: int,
                 refused: dict[TopicPartition, ErrorCode]) -> bytes | None | Awaitable[bytes]:
        """``refused``: partitions answered with that error, nothing appended (KIP-890)."""
        acks = req.acks
        # per topic: [partition, error_code, base_offset, log_start_offset], filled in as we go
        results: dict[str, list[list[int]]] = {}
        messages: dict[tuple[str, int], str] = {}  # the error message of a refused partition, if any
        waits: list[tuple[list[int], Partition, int]] = []
        for topic in req.topic_data:
            out = results.setdefault(topic.name, [])
            for pdata in topic.partition_data:
                entry = [pdata.index, 0, -1, -1]
                out.append(entry)
                if acks not in (0, 1, -1):
                    entry[1] = ErrorCode.INVALID_REQUIRED_ACKS
                    continue
                tp = TopicPartition(topic.name, pdata.index)
                if tp in refused:
                    entry[1] = refused[tp]
                    continue
                partition, error, last = self._append(tp, pdata.records, acks, entry, header.client_id, messages)
                if error is not None:
                    entry[1] = error
                elif acks == -1 and partition is not None:
                    waits.append((entry, partition, last))
        if acks == 0:
            self._count_errors(results)
            return None
        if waits:
            return self._await_acks(header.correlation_id, version, results, waits, req.timeout.total_seconds(),
                                    messages)
        self._count_errors(results)
        return _produce_response(header.correlation_id, version, results, messages)

    def _count_errors(self, results: dict[str, list[list[int]]]) -> None:
        """Produce's ErrorsPerSec from the results at hand (metrics.py reads other responses)."""
        if self.ctx.metrics is not None:
            self.ctx.metrics.count_errors(api_keys.PRODUCE, [e[1] for entries in results.values() for e in entries])

    def _append(self, tp: TopicPartition, records: bytes | None, acks: int, entry: list[int],
                client_id: str | None, messages: dict[tuple[str, int], str]
                ) -> tuple[Partition | None, ErrorCode | None, int]:
        """Append as leader; fills entry's base and log start offsets, returns the last offset
        (and puts the words of a refusal that needs them into ``messages``)."""
        partition = self.ctx.replica_manager.get(tp)
        if partition is None or not partition.is_leader:
            return None, self.ctx.metadata.not_served_error(tp), -1
        if tp.topic == OFFSETS_TOPIC:  # written by group coordinators only, as in Kafka
            return None, ErrorCode.INVALID_TOPIC_EXCEPTION, -1
        if not records:
            return None, ErrorCode.CORRUPT_MESSAGE, -1
        if len(records) > partition.log.config.max_message_bytes:  # the topic's max.message.bytes
            return None, ErrorCode.MESSAGE_TOO_LARGE, -1
        if partition.log.config.compact and has_keyless_record(records):
            log.info("%s: rejected produce: a record without a key for a compacted topic", tp)
            return None, ErrorCode.INVALID_RECORD, -1
        refused = self.ordered_delivery_fence.check(tp, records, client_id)  # KIP-253
        # a retry of batches already written is answered as one (their first offsets), whatever
        # the count now: refused, the producer would send them again, and they would be there twice
        if refused is not None and not partition.is_duplicate(records):
            log.info("%s: rejected produce from %r: %s", tp, client_id, refused[1])
            messages[tp.topic, tp.partition] = refused[1]
            return None, refused[0], -1
        if acks == -1 and len(partition.isr) < partition.min_insync_replicas:
            return None, ErrorCode.NOT_ENOUGH_REPLICAS, -1
        try:
            first, last = partition.append_as_leader(records)
        except CorruptRecordError as exc:
            log.info("%s: rejected produce: %s", tp, exc)
            return None, ErrorCode.CORRUPT_MESSAGE, -1
        except ProducerStateError as exc:  # a sequence gap, a fenced epoch: nothing was written
            log.info("%s: rejected produce: %s", tp, exc)
            return None, exc.error, -1
        entry[2] = first
        if self.ctx.metrics is not None:
            self.ctx.metrics.bytes_in[tp.topic] += len(records)
            self.ctx.metrics.messages_in[tp.topic] += last - first + 1
        entry[3] = partition.log.log_start_offset
        return partition, None, last

    async def _await_acks(self, correlation_id: int, version: int, results: dict[str, list[list[int]]],
                          waits: list[tuple[list[int], Partition, int]], timeout_s: float,
                          messages: dict[tuple[str, int], str]) -> bytes:
        futures = [p.wait_for_high_watermark(last) for _, p, last in waits]
        await asyncio.wait(futures, timeout=max(timeout_s, 0.001))
        for (entry, partition, _last), fut in zip(waits, futures):
            if not fut.done():
                fut.cancel()
                entry[1] = ErrorCode.REQUEST_TIMED_OUT
            elif isinstance(fut.exception(), NotLeaderError):
                entry[1] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif len(partition.isr) < partition.min_insync_replicas:
                # committed by a shrunken ISR: written, but not as durable as asked (Kafka's rule)
                entry[1] = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        self._count_errors(results)
        return _produce_response(correlation_id, version, results, messages)

    # -- ListOffsets and OffsetForLeaderEpoch ---------------------------------------------------

    def list_offsets(self, ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
        topics = []
        committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
        refused = denied(ctx, _DESCRIBE_LISTED_TOPIC, (t.name for t in req.topics))
        for topic in req.topics:
            parts = []
            for p in topic.partitions:
                entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": 0,
                                         "timestamp": -1, "offset": -1, "leader_epoch": -1}
                if refused and topic.name in refused:
                    entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    parts.append(entry)
                    continue
                partition, error = leader_for(self.ctx, TopicPartition(topic.name, p.partition_index),
                                                    getattr(p, "current_leader_epoch", -1))
                if error is not None:
                    entry["error_code"] = error
                else:
                    assert partition is not None
                    offset = _offset_for(partition, p.timestamp, committed)
                    if offset is None:
                        entry["error_code"] = ErrorCode.OFFSET_NOT_AVAILABLE
                    else:
                        entry.update(leader_epoch=partition.leader_epoch, offset=offset)
                parts.append(entry)
            topics.append({"name": topic.name, "partitions": parts})
        return kio_util.encode_response(api_keys.LIST_OFFSETS, version, header.correlation_id,
                                        {"throttle_time": 0, "topics": topics})

    def offset_for_leader_epoch(self, ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
        topics = []
        # Kafka (KIP-320): CLUSTER_ACTION on the cluster (a follower) or DESCRIBE on each topic
        refused = denied(ctx, _DESCRIBE_EPOCH_TOPIC, (t.topic for t in req.topics))
        for topic in req.topics:
            parts = []
            for p in topic.partitions:
                entry: dict[str, Any] = {"partition": p.partition, "error_code": 0, "leader_epoch": -1,
                                         "end_offset": -1}
                if refused and topic.topic in refused:
                    entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    parts.append(entry)
                    continue
                partition, error = leader_for(self.ctx, TopicPartition(topic.topic, p.partition),
                                                    p.current_leader_epoch)
                if error is not None:
                    entry["error_code"] = error
                else:
                    assert partition is not None
                    epoch, end = partition.log.end_offset_for(p.leader_epoch)
                    if epoch < 0 and 0 <= p.leader_epoch <= partition.leader_epoch:
                        # no record at this epoch or any later one (Kafka's leader records its
                        # epoch's start offset on becoming leader; our cache only on append):
                        # every record lies before it, so it ends at the log end offset. A
                        # KIP-253 barrier on a partition written nothing since is found, not -1
                        epoch, end = p.leader_epoch, partition.log_end_offset
                    if epoch == partition.leader_epoch or end > partition.log_end_offset:
                        end = partition.log_end_offset
                    entry.update(leader_epoch=epoch, end_offset=end)
                parts.append(entry)
            topics.append({"topic": topic.topic, "partitions": parts})
        return kio_util.encode_response(api_keys.OFFSET_FOR_LEADER_EPOCH, version, header.correlation_id,
                                        {"throttle_time": 0, "topics": topics})


def _controller_denied(api_key: int, version: int, correlation_id: int, request: Any) -> bytes:
    """A controller request (or ControlledShutdown) from a principal without CLUSTER_ACTION on
    the cluster: CLUSTER_AUTHORIZATION_FAILED at the top and, where the response lists
    partitions, for each partition the request named (Kafka's getErrorResponse)."""
    error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    response: controller_api.Response
    if api_key == controller_api.API_CONTROLLED_SHUTDOWN:
        response = controller_api.ControlledShutdownResponse(error)
    elif api_key == controller_api.API_LEADER_AND_ISR:
        response = controller_api.ControllerResponse(error, {st.tp: error for st in request.partition_states})
    elif api_key == controller_api.API_STOP_REPLICA:
        response = controller_api.ControllerResponse(error, dict.fromkeys(request.partitions, error))
    else:
        response = controller_api.ControllerResponse(error)
    log.warning("refused controller request %d: the principal %s lacks CLUSTER_ACTION on the cluster", api_key,
                current_session().principal)
    return controller_api.encode_response(api_key, version, correlation_id, response)


def _offset_for(partition: Partition, timestamp: int, committed: bool) -> int | None:
    """None: OFFSET_NOT_AVAILABLE (retriable), as Kafka's Partition.fetchOffsetForTimestamp
    answers "latest", or a time past the last fetchable record, while a new leader's high
    watermark has not reached the offset its epoch began at. Answered with the lagging high
    watermark instead, a consumer whose committed offset lies between the two takes it for
    out of range and resets to auto.offset.reset: the fault runs saw a group read whole
    partitions again from offset 0 after a leader moved."""
    if timestamp == -2:  # EARLIEST
        return partition.log.log_start_offset
    lagging = partition.high_watermark_lags_election
    # what a consumer of this isolation level can read: up to the high watermark, or for
    # read_committed the last stable offset (Kafka's ListOffsets isolation_level)
    end = partition.last_stable_offset if committed else partition.high_watermark
    if timestamp == -1:  # LATEST
        return None if lagging else end
    found = partition.log.offset_for_timestamp(timestamp)
    if found is not None and found < end:
        return found
    return None if lagging else -1


def _produce_response(correlation_id: int, version: int, results: dict[str, list[list[int]]],
                      messages: dict[tuple[str, int], str]) -> bytes:
    return fast_paths.produce_response(version, correlation_id,
                                       [(t, [tuple(e) for e in ps]) for t, ps in results.items()],  # type: ignore[misc]
                                       messages, throttle_time_ms=client_quotas.throttle_time_ms())
