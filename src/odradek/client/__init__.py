"""odradek's client side: what odradek's own librdkafka clients share (librdkafka_log.py,
their log lines into Python logging), and the home of the ordered-delivery producer and
consumer (KIP-253), which wrap an unmodified Kafka client.
"""
