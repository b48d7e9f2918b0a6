"""What request handlers need from the broker, in one object passed to each handler."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from odradek.broker.acl_manager import AclManager
from odradek.broker.client_quotas import ClientQuotas
from odradek.broker.config import BrokerConfig
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.metrics import BrokerMetrics
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replication_quota import ReplicationQuotas
from odradek.broker.txn_verification import TransactionVerifier
from odradek.controller.events import ControllerEvent
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from odradek.security.acl_authorizer import AclAuthorizer


@dataclass(slots=True)
class BrokerContext:
    config: BrokerConfig
    cluster_id: str
    replica_manager: ReplicaManager
    metadata: MetadataCache
    zk: Any  # odradek.zk.client.KafkaZkClient; blocking, so handlers call it through asyncio.to_thread
    # (api_key, version, correlation_id, request) -> encoded response, for the controller's requests
    controller_requests: Callable[[int, int, int, Any], bytes | Awaitable[bytes]]
    next_producer_id: Callable[[], Awaitable[int]]
    # puts an API event (built around the callback it is given) on the controller's event
    # thread and awaits its outcome (ControllerService.ask): ElectLeaders, the reassignment APIs
    ask_controller: Callable[[Callable[[Callable[[object], None]], ControllerEvent]], Awaitable[object]]
    group_coordinator: GroupCoordinator
    transaction_coordinator: TransactionCoordinator
    txn_verifier: TransactionVerifier  # KIP-890's check of a transaction's first batch at a leader
    metrics: BrokerMetrics | None = None  # None when metrics.port is 0
    replication_quotas: ReplicationQuotas | None = None  # the leader side is the fetch handler's
    # Kafka's authorizer.class.name: None (the default, empty) allows every request; else the
    # ACLs (security/acl_authorizer.py) that broker/request_authorization.py asks
    authorizer: AclAuthorizer | None = None
    # with an authorizer: the ACLs in ZooKeeper that CreateAcls and DeleteAcls change and that
    # keep the authorizer current (broker/acl_manager.py)
    acl_manager: AclManager | None = None
    # client quotas (broker/client_quotas.py): KafkaApis meters each request against them
    client_quotas: ClientQuotas | None = None
