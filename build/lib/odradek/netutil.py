"""Small socket helpers shared by the launchers and the tests."""
from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the kernel just handed out on `host`.

    The port is released before returning, so another process could take it in between; that
    window is accepted because ZooKeeper and brokers fail loudly on a taken port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
