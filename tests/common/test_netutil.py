"""Ports for private clusters: free, and never ones the kernel gives outgoing connections."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from odradek.common.netutil import PORT_SHARE_ENV, free_port, free_port_block, port_free


def _ephemeral() -> range:
    low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return range(low, high + 1)


def test_free_ports_are_outside_the_ephemeral_range_and_bindable() -> None:
    ephemeral = _ephemeral()
    for _ in range(50):
        port = free_port()
        assert port not in ephemeral and port >= 10000
        assert port_free("127.0.0.1", port)
    base = free_port_block(3)
    assert all(base + i not in ephemeral and port_free("127.0.0.1", base + i) for i in range(3))


def test_processes_with_different_shares_draw_from_disjoint_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = []
    for share in ("0/2", "1/2"):
        monkeypatch.setenv(PORT_SHARE_ENV, share)
        drawn.append({free_port() for _ in range(300)} | {free_port_block(3) + i for i in range(3)})
    assert not drawn[0] & drawn[1]
    assert min(drawn[1]) > min(drawn[0])


def test_a_listening_port_is_not_free() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        s.listen()
        assert not port_free("127.0.0.1", s.getsockname()[1])
