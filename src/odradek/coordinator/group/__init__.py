"""Consumer groups: the group coordinator (Kafka's kafka.coordinator.group package)."""
