"""What every part of odradek shares and that imports nothing else of it (Kafka's
org.apache.kafka.common and kafka.utils): the metadata value types (TopicPartition,
LeaderAndIsr, BrokerInfo, ...), port and address helpers, and probing a process by pid.
"""
