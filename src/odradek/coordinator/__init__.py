"""The coordinators that run inside a broker on partitions of an internal topic (Kafka's
kafka.coordinator package): group/ for consumer groups on __consumer_offsets, and
transaction/ for transactions on __transaction_state.

What they share sits here: partition_loader.py (owning the internal topic's partitions: load,
unload, fenced appends), seams.py (what a coordinator needs of a partition, so it never imports
the broker) and scheduler.py (timers and background tasks, handed in from outside).
"""
