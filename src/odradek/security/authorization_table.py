"""Which operation on which resource each API asks the authorizer for, and what a denial answers:
the checks of Kafka 3.x's request handlers (kafka.server.KafkaApis, AclApis for the ACL APIs,
AuthHelper for the shared parts), written down as data.

The broker's request handlers follow this table when they authorize, so that a principal allowed
or denied on Apache Kafka is allowed or denied the same on odradek, with the same error code in
the same place of the answer. Each row names the Kafka handler it was read from. Request fields
are named as in Kafka's JSON message schemas ("TopicData[].Name"; kio spells it topic_data[].name).

Kafka's handlers authorize in three ways, the row's Scope:

- REQUEST: one check for the whole request (authorizeClusterOperation, the group of JoinGroup);
  denied, the request answers the error everywhere it has an error code;
- EACH: one check per resource the request names (AuthHelper.filterByAuthorized); a denied one
  answers the error, the others go on;
- HIDDEN: one check per resource the answer would show; a denied one is left out, without error
  (ListGroups, ListTransactions, Metadata for all topics).

A check with `unless` is skipped when the principal has any of those permissions (CreateTopics
checks CREATE on each topic only without CREATE on the cluster); a check with `when` applies only
in that case. APIs with no check (ApiVersions, the SASL exchange) have an empty tuple.

API keys are Kafka's numbers (and odradek's own above 10000); the security package does not import
the broker's api_keys module, tests check that every key it serves is here.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from odradek.protocol.errors import ErrorCode
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType


class Scope(Enum):
    REQUEST = "request"
    EACH = "each"
    HIDDEN = "hidden"


@dataclass(frozen=True, slots=True)
class Permission:
    """An operation on a resource: its type and where its name comes from (CLUSTER_NAME for the
    cluster, else the request or response field). ``any_resource``: the question is
    authorize_by_resource_type's, the operation on at least one resource of the type."""

    operation: AclOperation
    resource_type: ResourceType
    resource: str
    any_resource: bool = False


@dataclass(frozen=True, slots=True)
class Check:
    """One authorization a handler makes and what it answers when denied (None: left out)."""

    permission: Permission
    error: ErrorCode | None
    scope: Scope
    when: str = ""
    unless: tuple[Permission, ...] = ()


@dataclass(frozen=True, slots=True)
class ApiAuthorization:
    api_key: int
    name: str
    #: the Kafka 3.x handler the checks are read from (KafkaApis' unless another class is named)
    handler: str
    checks: tuple[Check, ...]
    note: str = ""


_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
_CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
_ALL_TOPICS = "every topic the answer would list"


def _cluster(operation: AclOperation) -> Permission:
    return Permission(operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _topic(operation: AclOperation, field: str) -> Permission:
    return Permission(operation, ResourceType.TOPIC, field)


def _group(operation: AclOperation, field: str = "GroupId") -> Permission:
    return Permission(operation, ResourceType.GROUP, field)


def _txn(operation: AclOperation, field: str = "TransactionalId") -> Permission:
    return Permission(operation, ResourceType.TRANSACTIONAL_ID, field)


def _cluster_request(operation: AclOperation, when: str = "") -> Check:
    """AuthHelper.authorizeClusterOperation: the whole request, CLUSTER_AUTHORIZATION_FAILED."""
    return Check(_cluster(operation), _CLUSTER_DENIED, Scope.REQUEST, when)


def _group_request(operation: AclOperation, field: str = "GroupId") -> Check:
    return Check(_group(operation, field), _GROUP_DENIED, Scope.REQUEST)


def _txn_request(when: str = "") -> Check:
    return Check(_txn(AclOperation.WRITE), _TXN_DENIED, Scope.REQUEST, when)


def _each_topic(operation: AclOperation, field: str, when: str = "", unless: tuple[Permission, ...] = ()) -> Check:
    return Check(_topic(operation, field), _TOPIC_DENIED, Scope.EACH, when, unless)


_READ, _WRITE, _DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
_CLUSTER_ACTION = AclOperation.CLUSTER_ACTION

_ROWS: tuple[ApiAuthorization, ...] = (
    ApiAuthorization(0, "Produce", "handleProduceRequest", (
        _txn_request("the records are transactional (without a TransactionalId they are denied too)"),
        _each_topic(_WRITE, "TopicData[].Name"),
    ), "an idempotent, non-transactional Produce needs no more than WRITE on its topics"),
    ApiAuthorization(1, "Fetch", "handleFetchRequest", (
        Check(_cluster(_CLUSTER_ACTION), _TOPIC_DENIED, Scope.EACH, "from a follower (ReplicaId >= 0)"),
        _each_topic(_READ, "Topics[].Topic", "from a consumer (ReplicaId < 0)"),
    ), "a follower without CLUSTER_ACTION gets TOPIC_AUTHORIZATION_FAILED on every partition"),
    ApiAuthorization(2, "ListOffsets", "handleListOffsetRequest", (
        _each_topic(_DESCRIBE, "Topics[].Name"),
    )),
    ApiAuthorization(3, "Metadata", "handleTopicMetadataRequest", (
        _each_topic(_DESCRIBE, "Topics[].Name", "topics are named"),
        Check(_topic(_DESCRIBE, _ALL_TOPICS), None, Scope.HIDDEN, "all topics are asked for (Topics null)"),
        _each_topic(AclOperation.CREATE, "Topics[].Name",
                    "a described topic does not exist, AllowAutoTopicCreation and auto.create.topics.enable",
                    (_cluster(AclOperation.CREATE),)),
    ), "IncludeClusterAuthorizedOperations: DESCRIBE on CLUSTER, else 0; IncludeTopicAuthorizedOperations: "
       "each supported operation authorize allows, as a bit field (AuthHelper.authorizedOperations)"),
    ApiAuthorization(4, "LeaderAndIsr", "handleLeaderAndIsrRequest", (_cluster_request(_CLUSTER_ACTION),)),
    ApiAuthorization(5, "StopReplica", "handleStopReplicaRequest", (_cluster_request(_CLUSTER_ACTION),)),
    ApiAuthorization(6, "UpdateMetadata", "handleUpdateMetadataRequest", (_cluster_request(_CLUSTER_ACTION),)),
    ApiAuthorization(7, "ControlledShutdown", "handleControlledShutdownRequest", (_cluster_request(_CLUSTER_ACTION),)),
    ApiAuthorization(8, "OffsetCommit", "handleOffsetCommitRequest", (
        _group_request(_READ),
        _each_topic(_READ, "Topics[].Name"),
    )),
    ApiAuthorization(9, "OffsetFetch", "handleOffsetFetchRequest", (
        _group_request(_DESCRIBE, "GroupId (v8+: Groups[].GroupId, each group denied on its own)"),
        _each_topic(_DESCRIBE, "Topics[].Name", "topics are named"),
        Check(_topic(_DESCRIBE, "every topic the group has offsets for"), None, Scope.HIDDEN,
              "all the group's offsets are asked for (Topics null)"),
    )),
    ApiAuthorization(10, "FindCoordinator", "handleFindCoordinatorRequest", (
        Check(_group(_DESCRIBE, "Key (v4+: CoordinatorKeys[])"), _GROUP_DENIED, Scope.EACH, "KeyType 0 (group)"),
        Check(_txn(_DESCRIBE, "Key (v4+: CoordinatorKeys[])"), _TXN_DENIED, Scope.EACH, "KeyType 1 (transaction)"),
    ), "v0-3 name one key, so a denial answers the whole request"),
    ApiAuthorization(11, "JoinGroup", "handleJoinGroupRequest", (_group_request(_READ),)),
    ApiAuthorization(12, "Heartbeat", "handleHeartbeatRequest", (_group_request(_READ),)),
    ApiAuthorization(13, "LeaveGroup", "handleLeaveGroupRequest", (_group_request(_READ),)),
    ApiAuthorization(14, "SyncGroup", "handleSyncGroupRequest", (_group_request(_READ),)),
    ApiAuthorization(15, "DescribeGroups", "handleDescribeGroupsRequest", (
        Check(_group(_DESCRIBE, "Groups[]"), _GROUP_DENIED, Scope.EACH),
    ), "IncludeAuthorizedOperations: each supported GROUP operation authorize allows, as a bit field"),
    ApiAuthorization(16, "ListGroups", "handleListGroupsRequest", (
        Check(_group(_DESCRIBE, "every group the answer would list"), None, Scope.HIDDEN,
              unless=(_cluster(_DESCRIBE),)),
    )),
    ApiAuthorization(17, "SaslHandshake", "handleSaslHandshakeRequest", (),
                     "before authentication: SaslServerAuthenticator answers it, KafkaApis only after it"),
    ApiAuthorization(18, "ApiVersions", "handleApiVersionsRequest", ()),
    ApiAuthorization(19, "CreateTopics", "handleCreateTopicsRequest", (
        _each_topic(AclOperation.CREATE, "Topics[].Name", unless=(_cluster(AclOperation.CREATE),)),
        _each_topic(AclOperation.DESCRIBE_CONFIGS, "Topics[].Name", "the topic may be created"),
    ), "a DESCRIBE_CONFIGS denial does not stop the creation: it answers TopicConfigErrorCode (v5+) "
       "instead of the topic's configs"),
    ApiAuthorization(20, "DeleteTopics", "handleDeleteTopicsRequest", (
        _each_topic(_DESCRIBE, "Topics[].TopicId's topic", "the topic is named by id (v6+); denied, the name "
                                                          "is withheld from the answer"),
        _each_topic(AclOperation.DELETE, "TopicNames[] (v6+: Topics[].Name or the TopicId's topic)"),
    )),
    ApiAuthorization(21, "DeleteRecords", "handleDeleteRecordsRequest", (
        _each_topic(AclOperation.DELETE, "Topics[].Name"),
    )),
    ApiAuthorization(22, "InitProducerId", "handleInitProducerIdRequest", (
        _txn_request("TransactionalId is not null"),
        Check(_cluster(AclOperation.IDEMPOTENT_WRITE), _CLUSTER_DENIED, Scope.REQUEST, "TransactionalId is null",
              (Permission(_WRITE, ResourceType.TOPIC, "any topic", any_resource=True),)),
    ), "KIP-679: WRITE on any topic (AclAuthorizer.authorizeByResourceType) is enough for an idempotent producer"),
    ApiAuthorization(23, "OffsetForLeaderEpoch", "handleOffsetForLeaderEpochRequest", (
        _each_topic(_DESCRIBE, "Topics[].Topic", unless=(_cluster(_CLUSTER_ACTION),)),
    )),
    ApiAuthorization(24, "AddPartitionsToTxn", "handleAddPartitionsToTxnRequest", (
        Check(_txn(_WRITE, "V3AndBelowTransactionalId"), _TXN_DENIED, Scope.REQUEST, "v0-3 (from a producer)"),
        _each_topic(_WRITE, "V3AndBelowTopics[].Name", "v0-3"),
        _cluster_request(_CLUSTER_ACTION, "v4+ (from a partition leader, KIP-890)"),
    ), "v0-3: internal topics are always denied, and while any partition is, the others answer "
       "OPERATION_NOT_ATTEMPTED"),
    ApiAuthorization(25, "AddOffsetsToTxn", "handleAddOffsetsToTxnRequest", (
        _txn_request(),
        _group_request(_READ),
    )),
    ApiAuthorization(26, "EndTxn", "handleEndTxnRequest", (_txn_request(),)),
    ApiAuthorization(27, "WriteTxnMarkers", "handleWriteTxnMarkersRequest", (_cluster_request(_CLUSTER_ACTION),)),
    ApiAuthorization(28, "TxnOffsetCommit", "handleTxnOffsetCommitRequest", (
        _txn_request(),
        _group_request(_READ),
        _each_topic(_READ, "Topics[].Name"),
    )),
    ApiAuthorization(29, "DescribeAcls", "AclApis.handleDescribeAcls", (_cluster_request(_DESCRIBE),)),
    ApiAuthorization(30, "CreateAcls", "AclApis.handleCreateAcls", (_cluster_request(AclOperation.ALTER),)),
    ApiAuthorization(31, "DeleteAcls", "AclApis.handleDeleteAcls", (_cluster_request(AclOperation.ALTER),)),
    ApiAuthorization(32, "DescribeConfigs", "handleDescribeConfigsRequest (ConfigHelper)", (
        Check(_cluster(AclOperation.DESCRIBE_CONFIGS), _CLUSTER_DENIED, Scope.EACH,
              "a BROKER or BROKER_LOGGER resource"),
        _each_topic(AclOperation.DESCRIBE_CONFIGS, "Resources[].ResourceName", "a TOPIC resource"),
    )),
    ApiAuthorization(33, "AlterConfigs", "handleAlterConfigsRequest (processLegacyAlterConfigsRequest)", (
        Check(_cluster(AclOperation.ALTER_CONFIGS), _CLUSTER_DENIED, Scope.EACH, "a BROKER resource"),
        _each_topic(AclOperation.ALTER_CONFIGS, "Resources[].ResourceName", "a TOPIC resource"),
    )),
    ApiAuthorization(35, "DescribeLogDirs", "handleDescribeLogDirsRequest", (_cluster_request(_DESCRIBE),),
                     "the answer's ErrorCode exists from v3; older versions answer no log dirs"),
    ApiAuthorization(36, "SaslAuthenticate", "handleSaslAuthenticateRequest", (),
                     "before authentication: SaslServerAuthenticator answers it, KafkaApis only after it"),
    ApiAuthorization(37, "CreatePartitions", "handleCreatePartitionsRequest", (
        _each_topic(AclOperation.ALTER, "Topics[].Name"),
    )),
    ApiAuthorization(42, "DeleteGroups", "handleDeleteGroupsRequest", (
        Check(_group(AclOperation.DELETE, "GroupsNames[]"), _GROUP_DENIED, Scope.EACH),
    )),
    ApiAuthorization(43, "ElectLeaders", "handleElectLeaders", (_cluster_request(AclOperation.ALTER),),
                     "denied, every named partition answers the error too"),
    ApiAuthorization(44, "IncrementalAlterConfigs", "handleIncrementalAlterConfigsRequest", (
        Check(_cluster(AclOperation.ALTER_CONFIGS), _CLUSTER_DENIED, Scope.EACH,
              "a BROKER or BROKER_LOGGER resource"),
        _each_topic(AclOperation.ALTER_CONFIGS, "Resources[].ResourceName", "a TOPIC resource"),
    )),
    ApiAuthorization(45, "AlterPartitionReassignments", "handleAlterPartitionReassignmentsRequest",
                     (_cluster_request(AclOperation.ALTER),)),
    ApiAuthorization(46, "ListPartitionReassignments", "handleListPartitionReassignmentsRequest",
                     (_cluster_request(_DESCRIBE),)),
    ApiAuthorization(47, "OffsetDelete", "handleOffsetDeleteRequest", (
        _group_request(AclOperation.DELETE),
        _each_topic(_READ, "Topics[].Name"),
    )),
    ApiAuthorization(48, "DescribeClientQuotas", "handleDescribeClientQuotasRequest",
                     (_cluster_request(AclOperation.DESCRIBE_CONFIGS),)),
    ApiAuthorization(49, "AlterClientQuotas", "handleAlterClientQuotasRequest",
                     (_cluster_request(AclOperation.ALTER_CONFIGS),), "denied, every entity named answers the error"),
    ApiAuthorization(50, "DescribeUserScramCredentials", "handleDescribeUserScramCredentialsRequest",
                     (_cluster_request(_DESCRIBE),), "denied, every named user answers the error too"),
    ApiAuthorization(51, "AlterUserScramCredentials", "handleAlterUserScramCredentialsRequest",
                     (_cluster_request(AclOperation.ALTER),),
                     "a broker that is not the controller answers NOT_CONTROLLER before it checks"),
    ApiAuthorization(60, "DescribeCluster", "handleDescribeCluster (AuthHelper.computeDescribeClusterResponse)", (
        Check(_cluster(_DESCRIBE), None, Scope.HIDDEN, "IncludeClusterAuthorizedOperations"),
    ), "never denied: without DESCRIBE on CLUSTER, ClusterAuthorizedOperations is 0"),
    ApiAuthorization(61, "DescribeProducers", "handleDescribeProducersRequest", (
        _each_topic(_READ, "Topics[].Name"),
    )),
    ApiAuthorization(65, "DescribeTransactions", "handleDescribeTransactionsRequest", (
        Check(_txn(_DESCRIBE, "TransactionalIds[]"), _TXN_DENIED, Scope.EACH),
        Check(_topic(_DESCRIBE, "each transaction's Topics[].Topic"), None, Scope.HIDDEN),
    )),
    ApiAuthorization(66, "ListTransactions", "handleListTransactionsRequest", (
        Check(_txn(_DESCRIBE, "every transaction the answer would list"), None, Scope.HIDDEN),
    )),
    # odradek's own APIs (KIP-253's ordered delivery): no Kafka handler; each follows the Kafka API it resembles
    ApiAuthorization(10000, "ConsumerGroupPosition", "none: odradek's, as handleHeartbeatRequest", (
        _group_request(_READ),
    ), "a group member's periodic report next to its Heartbeat"),
    ApiAuthorization(10001, "PartitionLeaderEpochsForPartitions",
                     "none: odradek's, as handleOffsetForLeaderEpochRequest for a client", (
                         _each_topic(_DESCRIBE, "Topics[].Name"),
                     ), "leader epochs of named partitions, which Metadata shows to whoever may DESCRIBE them"),
    ApiAuthorization(10002, "DescribeOrderedGroups", "none: odradek's, as handleDescribeGroupsRequest", (
        Check(_group(_DESCRIBE, "Groups[]"), _GROUP_DENIED, Scope.EACH),
    )),
)

#: API key -> what it authorizes
API_AUTHORIZATION: dict[int, ApiAuthorization] = {row.api_key: row for row in _ROWS}
