"""Small socket helpers shared by the launchers and the tests."""
from __future__ import annotations

import ipaddress
import os
import random
import socket

_outgoing_host: str | None = None


def bind_outgoing_to(listen_host: str) -> None:
    """Make this process's broker-to-broker connections (follower fetches, controller requests,
    ControlledShutdown) leave from its listener's address when that is a loopback address
    other than 127.0.0.1. Brokers on one machine, each on its own loopback address
    (127.0.N.1), then look to each other like separate hosts, so firewall rules can cut one
    broker off from another without cutting it off from clients (the fault-injection suite,
    odradek.faults). On other addresses the kernel picks the source, as Kafka leaves it."""
    global _outgoing_host
    try:
        address = ipaddress.ip_address(listen_host)
    except ValueError:
        return
    if address.is_loopback and str(address) != "127.0.0.1":
        _outgoing_host = str(address)


def outgoing_address() -> tuple[str, int] | None:
    """The source address for broker-to-broker connections (None: the kernel's choice)."""
    return None if _outgoing_host is None else (_outgoing_host, 0)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` now and that the kernel never hands out by itself.

    Ports the kernel picks (bind to port 0) come from its ephemeral range, the same range it
    gives every outgoing connection its local port from: a broker that stops and starts
    again on such a port can find it taken by some client's connection meanwhile. So the
    port is drawn at random from outside that range, and checked free. Another process can
    still take it before we bind it; ZooKeeper and brokers fail loudly on a taken port.
    """
    return free_port_block(1, host)


def free_port_block(count: int, host: str = "127.0.0.1") -> int:
    """The first of `count` consecutive free ports (brokers use base_port + i), outside the
    kernel's ephemeral range (see free_port)."""
    low, high = _ephemeral_range()
    spans = [(start, end) for start, end in map(_own_share, ((_LOWEST, low - 1), (high + 1, 65535)))
             if end - start + 1 >= count]
    for _ in range(200):
        start, end = random.choice(spans)
        base = random.randint(start, end - count + 1)
        if all(port_free(host, base + i) for i in range(count)):
            return base
    raise OSError(f"no block of {count} free ports found on {host} outside the ephemeral "
                  f"range {low}-{high}")


#: below this are the well-known and commonly configured service ports (2181, 9092, ...)
_LOWEST = 10000

#: "K/N": draw ports only from the K-th of N equal slices of each span (K from 0). Processes that
#: pick ports at the same moment with different K never pick the same one: the test suite's
#: parallel workers set it (tests/conftest.py), and the clusters they start inherit it.
PORT_SHARE_ENV = "ODRADEK_PORT_SHARE"


def _own_share(span: tuple[int, int]) -> tuple[int, int]:
    share = os.environ.get(PORT_SHARE_ENV)
    if not share:
        return span
    index, count = (int(v) for v in share.split("/"))
    start, end = span
    size = (end - start + 1) // count
    return start + index * size, start + (index + 1) * size - 1


def _ephemeral_range() -> tuple[int, int]:
    """Linux's ip_local_port_range; its default where that cannot be read."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    if low <= _LOWEST + 100 and high >= 65535 - 100:
        return 65535, 65535  # no room outside it: use anything above the service ports
    return low, high


def port_free(host: str, port: int) -> bool:
    """Bindable the way servers bind (SO_REUSEADDR), so connections of a process that just
    stopped, lingering in TIME_WAIT, do not count as the port being taken."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True
