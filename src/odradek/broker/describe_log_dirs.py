"""DescribeLogDirs (API 35, KIP-113): the log directory of this broker and, per partition replica
it hosts, the size of its log. `odradek reassign --verify` (Kafka's ReassignPartitionsCommand)
reads the bytes still to copy from it: the leader's size against the size of each replica being
added.

Kafka's ReplicaManager.describeLogDirs. A broker has one log dir here (data_dir), so no replica
is ever a future one (is_future_key: AlterReplicaLogDirs moves nothing). A partition's size is
the sum of its segment files (Log.size), and its offset lag is Kafka's getLogEndOffsetLag for a
current log: the high watermark minus the log end offset, floored at 0. The request names topics
and partitions (null: all); those this broker does not host are left out, as Kafka does.

So a follower's offset lag is 0 however far behind its leader it is, as in Kafka: that is the
replica's own high watermark, which a follower never moves past its log end
(Partition.append_as_follower). Kafka measures against the leader only for a future replica
(the current log's end minus the future log's end, during AlterReplicaLogDirs), which odradek
never has. How far a replica being added has got is its size against the leader's, which is
what `odradek reassign --verify` compares (reassign_partitions_command.partition_states).

With an authorizer, DESCRIBE on the cluster is needed, as in Kafka: without it the answer has no
log dirs and (v3+) CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

import shutil
from typing import Any

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.partition import Partition
from odradek.broker.request_authorization import allowed, refusal, wire
from odradek.common.metadata import TopicPartition
from odradek.protocol import kio_util
from odradek.security.acl import AclOperation, ResourceType

_DESCRIBE_CLUSTER = wire(api_keys.DESCRIBE_LOG_DIRS).check(AclOperation.DESCRIBE, ResourceType.CLUSTER)


def describe_log_dirs(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    if not allowed(ctx, _DESCRIBE_CLUSTER):
        return kio_util.encode_response(api_keys.DESCRIBE_LOG_DIRS, version, header.correlation_id, {
            "throttle_time": 0, "error_code": refusal(_DESCRIBE_CLUSTER), "results": []})
    hosted = {p.tp: p for p in ctx.replica_manager.partitions()}
    if req.topics is None:
        chosen = list(hosted.values())
    else:
        chosen = [hosted[tp] for tp in _named(req.topics) if tp in hosted]
    topics: dict[str, list[dict[str, Any]]] = {}
    for partition in sorted(chosen, key=lambda p: (p.tp.topic, p.tp.partition)):
        topics.setdefault(partition.tp.topic, []).append(_describe(partition))
    log_dir = ctx.replica_manager.log_manager.data_dir.resolve()
    try:
        usage = shutil.disk_usage(log_dir)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    result = {"error_code": 0, "log_dir": str(log_dir), "total_bytes": total, "usable_bytes": usable,
              "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    return kio_util.encode_response(api_keys.DESCRIBE_LOG_DIRS, version, header.correlation_id,
                                    {"throttle_time": 0, "error_code": 0, "results": [result]})


def _named(topics: Any) -> list[TopicPartition]:
    return [TopicPartition(t.topic, int(p)) for t in topics for p in t.partitions]


def _describe(partition: Partition) -> dict[str, Any]:
    return {"partition_index": partition.tp.partition, "partition_size": partition.log.size_in_bytes(),
            "offset_lag": max(partition.high_watermark - partition.log_end_offset, 0), "is_future_key": False}
