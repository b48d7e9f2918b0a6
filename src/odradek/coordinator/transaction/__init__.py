"""Transactions (KIP-98): the transaction coordinator and its __transaction_state topic
(Kafka's kafka.coordinator.transaction package). Not built yet: the idempotent producer's
InitProducerId is served by odradek.broker.producer_id_manager. Its TransactionStateManager is
to load, unload and write its partitions through odradek.coordinator.partition_loader, as the
group coordinator's GroupMetadataManager does.
"""
