"""The fault runs' delay proxy (faults/delay_proxy.py): it finds the API key of every request
frame in a byte stream however the stream is cut, and, run as its process in front of a real
server, forwards both ways, holds one connection's requests for the time asked and then
delivers them in order, even after the client closed; and while the server behind it is down
it refuses connections, as the server's own port would."""
from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time

from odradek.common.netutil import free_port
from odradek.faults.delay_proxy import Connection


def frame(api_key: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhi", api_key, 0, 1) + body
    return struct.pack(">i", len(payload)) + payload


def test_request_frames_are_found_however_the_stream_is_cut() -> None:
    stream = frame(0, b"x" * 100) + frame(26) + frame(18, b"y" * 3)
    for cut in (1, 3, 5, 7, 64):
        conn = Connection(1, "client", "broker")
        for i in range(0, len(stream), cut):
            conn.observe(stream[i:i + cut])
        assert conn.api_keys == {0, 26, 18}, cut
    assert conn.describe().endswith("(EndTxn, Produce)")


def test_one_connection_is_held_then_delivered_in_order_even_after_its_client_closed() -> None:
    received: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    upstream_port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            try:
                while data := conn.recv(65536):
                    received.append(data)
                    conn.sendall(b"ok")
            except OSError:   # the proxy closed the connection after the late bytes
                pass
    threading.Thread(target=serve, daemon=True).start()
    port = free_port()
    proxy = subprocess.Popen([sys.executable, "-m", "odradek.faults.delay_proxy",
                              f"127.0.0.1:{port}=127.0.0.1:{upstream_port}"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proxy.stdout is not None and proxy.stdin is not None
        assert proxy.stdout.readline().strip() == "ready"
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(frame(26))
        assert client.recv(2) == b"ok"                     # forwarded both ways
        proxy.stdin.write("delay 1.5 7\n")
        proxy.stdin.flush()
        assert "(EndTxn)" in proxy.stdout.readline()
        held_at = time.monotonic()
        client.sendall(frame(0, b"late"))
        client.close()                                     # the sender gives up
        deadline = time.monotonic() + 10
        while b"".join(received) != frame(26) + frame(0, b"late") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"".join(received) == frame(26) + frame(0, b"late")
        assert time.monotonic() - held_at >= 1.4
    finally:
        proxy.kill()
        proxy.communicate(timeout=10)   # waits, and closes its pipes
        server.close()


def test_a_route_refuses_connections_while_its_server_is_down_and_accepts_once_it_is_back() -> None:
    upstream_port, port = free_port(), free_port()
    proxy = subprocess.Popen([sys.executable, "-m", "odradek.faults.delay_proxy",
                              f"127.0.0.1:{port}=127.0.0.1:{upstream_port}"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    server = None
    try:
        assert proxy.stdout is not None and proxy.stdout.readline().strip() == "ready"
        first = socket.create_connection(("127.0.0.1", port))   # accepted, then closed: nobody behind
        assert first.recv(1) == b""
        first.close()
        deadline = time.monotonic() + 5
        refused = False
        while not refused and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                time.sleep(0.05)
            except ConnectionRefusedError:
                refused = True
        assert refused
        server = socket.create_server(("127.0.0.1", upstream_port))
        deadline = time.monotonic() + 5
        while True:
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the route never came back"
                time.sleep(0.05)
        server.settimeout(5)
        accepted = None
        while accepted is None:   # the proxy's own probe comes first
            conn, _ = server.accept()
            conn.settimeout(2)
            client.sendall(b"hello")
            try:
                if conn.recv(5) == b"hello":
                    accepted = conn
            except (socket.timeout, OSError):
                pass
            if accepted is None:
                conn.close()
        accepted.close()
        client.close()
    finally:
        proxy.kill()
        proxy.communicate(timeout=10)
        if server is not None:
            server.close()
