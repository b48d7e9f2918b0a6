"""A Jepsen-style fault-injection suite for a real odradek cluster (python -m odradek.faults)."""
