"""Authentication and authorization: SASL mechanisms, credentials, ACLs (Kafka's security package)."""
