"""Protocol fuzzing of the broker: mutated, truncated, mis-sized and random Kafka frames for
every API and version it speaks, in-process (volume) and over TCP (a sample), checked for
crashes, hangs, malformed answers and changed data. Entry point: ``python -m odradek.fuzz``."""
