"""The Kafka APIs and versions this broker speaks, as advertised in ApiVersions.

Produce stops at v9 and Fetch at v12: later versions name topics by id. Metadata starts low enough
for old clients and goes past v4 so kafka-python recognises a modern broker: it guesses the
broker's age from the advertised versions, and below Metadata v4 falls back to a message format
that Produce v3+ forbids.

VERSIONS are the Kafka APIs (kio decodes them); ORDERED_DELIVERY_VERSIONS odradek's own
(KIP-253, protocol/ordered_delivery_api.py decodes them) in a private key range far above Kafka's;
ApiVersions advertises both (ADVERTISED). Clients ignore keys they do not know, as Kafka's
ApiVersions contract has them do: librdkafka, kafka-python and aiokafka connect and work
against the advertisement (tests/integration/ordered/test_ordered_delivery_apis.py).
"""
from __future__ import annotations

from odradek.protocol import ordered_delivery_api

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
CREATE_PARTITIONS = 37
ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
OFFSET_DELETE = 47
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

VERSIONS: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 9),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 12),
    # the consumer group APIs, as Apache Kafka 3.x offers them (OffsetCommit v0-1 and
    # OffsetFetch v0 predate the clients we serve and lack schemas in kio)
    OFFSET_COMMIT: (2, 8),
    OFFSET_FETCH: (1, 8),
    FIND_COORDINATOR: (0, 4),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 4),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    # transactional offset commits (KIP-98, KIP-447 from v3), as Kafka 3.x before KIP-890's v4;
    # librdkafka 2.x sends up to v3, kafka-python what the broker offers, aiokafka v0
    TXN_OFFSET_COMMIT: (0, 3),
    API_VERSIONS: (0, 3),
    CREATE_TOPICS: (2, 7),
    # topic deletion and partition expansion (broker/delete_topics.py, create_partitions.py): Kafka 3.x offers
    # DeleteTopics 0-6 (v0 predates every client we serve and kio has no schema for it)
    DELETE_TOPICS: (1, 6),
    CREATE_PARTITIONS: (0, 3),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 4),
    # the transaction coordinator's APIs (broker/txn_apis.py), as Kafka 3.x: clients send
    # AddPartitionsToTxn 0-3, partition leaders v4 (verify_only, KIP-890)
    ADD_PARTITIONS_TO_TXN: (0, 4),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 3),
    # inter-broker, from transaction coordinators (broker/txn_marker_apis.py): Kafka 3.x offers
    # 0-1, kio has no v0 schema, and only odradek's own coordinators send it (at v1)
    WRITE_TXN_MARKERS: (1, 1),
    # transactions for operators (KIP-664, broker/txn_admin_apis.py), what kafka-transactions.sh
    # sends: v0 of each as Kafka 3.x; ListTransactions v1 adds KIP-994's duration filter (Kafka
    # 3.8), v2's transactional id pattern (KIP-1152) is Kafka 4.1's
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    DESCRIBE_CONFIGS: (1, 4),
    # per replica log sizes (broker/describe_log_dirs.py); kio has no v0 schema
    DESCRIBE_LOG_DIRS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ELECT_LEADERS: (0, 2),
    # partition reassignment (KIP-455, broker/reassignment_apis.py): v0 is all Kafka has
    ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    DESCRIBE_CLUSTER: (0, 1),
    # the ACL admin APIs (broker/acl_apis.py) as Kafka 3.x, whose v0 (literal patterns only,
    # before KIP-290) kio has no schema for
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    # SCRAM credentials in ZooKeeper (KIP-554, broker/scram_credential_apis.py): v0 is all Kafka has
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # client quotas in ZooKeeper (KIP-546, broker/client_quota_apis.py): v1 is v0 made flexible
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ALTER_CLIENT_QUOTAS: (0, 1),
    # the SASL exchange (broker/sasl_server_authenticator.py) as Kafka 3.x: SaslHandshake v0 is
    # followed by bare tokens, v1 by SaslAuthenticate; SaslAuthenticate v1 adds KIP-368's session lifetime
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
}

CONSUMER_GROUP_POSITION = ordered_delivery_api.API_CONSUMER_GROUP_POSITION  # 10000
PARTITION_LEADER_EPOCHS_FOR_PARTITIONS = ordered_delivery_api.API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS  # 10001
DESCRIBE_ORDERED_GROUPS = ordered_delivery_api.API_DESCRIBE_ORDERED_GROUPS  # 10002
ORDERED_DELIVERY_VERSIONS: dict[int, tuple[int, int]] = dict(ordered_delivery_api.VERSIONS)
#: what ApiVersions answers: Kafka's APIs and odradek's own
ADVERTISED: dict[int, tuple[int, int]] = {**VERSIONS, **ORDERED_DELIVERY_VERSIONS}


def supported(api_key: int, version: int) -> bool:
    """A Kafka API and version this broker decodes with kio (not the ordered delivery APIs)."""
    lo_hi = VERSIONS.get(api_key)
    return lo_hi is not None and lo_hi[0] <= version <= lo_hi[1]
