"""Transactions (KIP-98): the transaction coordinator and its __transaction_state topic
(Kafka's kafka.coordinator.transaction package). Built so far, the pure core:
transaction_metadata.py (a transactional id's states and their changes, Kafka's
TransactionMetadata) and transaction_log.py (its records in Kafka's format); which partition an
id lives in is odradek.coordinator.partitioning's, shared with groups. The TransactionStateManager and
TransactionCoordinator are not built yet: the idempotent producer's InitProducerId is served by
odradek.broker.producer_id_manager. The manager is to load, unload and write its partitions
through odradek.coordinator.partition_loader, as the group coordinator's GroupMetadataManager
does.
"""
