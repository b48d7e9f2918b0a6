"""The coordinators that run inside a broker on partitions of an internal topic (Kafka's
kafka.coordinator package): group/ for consumer groups on __consumer_offsets, and
transaction/ for transactions on __transaction_state.
"""
