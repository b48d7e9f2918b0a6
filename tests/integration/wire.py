"""Raw Kafka wire access for tests that must send what no well-behaved client would."""
from __future__ import annotations

import socket
import struct
import time
from typing import Any

from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode


class RawConnection:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._corr = 0

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self._corr += 1
        self.send_bytes(kio_util.encode_request(api_key, version, self._corr, "test", body))
        corr, response = kio_util.decode_response(api_key, version, self.read_frame())
        assert corr == self._corr
        return response

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed the connection (reads EOF)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except (TimeoutError, socket.timeout):
            return False

    def close(self) -> None:
        self.sock.close()


def coordinator_connection(host: str, port: int, group: str) -> tuple[RawConnection, int]:
    """A raw connection to the group's coordinator and its broker id, found by asking the
    broker at host:port (FindCoordinator v3, retried while __consumer_offsets is being created)."""
    conn = RawConnection(host, port)
    try:
        deadline = time.monotonic() + 30
        while True:
            found = conn.request(10, 3, {"key": group, "key_type": 0})
            if found.error_code == 0:
                return RawConnection(found.host, found.port), found.node_id
            assert found.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and time.monotonic() < deadline, found
            time.sleep(0.2)
    finally:
        conn.close()
