"""A listener's certificate renewed in place, without a restart: the broker notices the replaced
keystore file, checks the new certificate names the same subject and hosts, and presents it in
every new handshake while connections already made go on; a certificate for another subject is
refused and the old one kept."""
from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from cryptography import x509

from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol import kio_util
from odradek.security import local_ca
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

HOSTS = ("127.0.0.1", "localhost")


@pytest.fixture
def tls_broker(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[tuple[LocalCluster, Any, Path, Path]]:
    ca = local_ca.create_ca()
    ca_file = local_ca.write_ca(ca, tmp_path / "ca")
    keystore = local_ca.write_pem(tmp_path / "broker.keystore.pem",
                                  local_ca.issue(ca, "broker", HOSTS).keystore_pem(), private=True)
    cluster = start_cluster(zookeeper, tmp_path / "cluster", 1, ports_per_broker=2,
                            listeners="PLAINTEXT://127.0.0.1:{port},TLS://127.0.0.1:{port+1}",
                            listener_security_protocol_map="PLAINTEXT:PLAINTEXT,TLS:SSL",
                            inter_broker_listener_name="PLAINTEXT",
                            **{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)})
    try:
        yield cluster, ca, ca_file, keystore
    finally:
        cluster.down()


def _context(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


def _serial(cluster: LocalCluster, ca_file: Path) -> int:
    """The serial number of the certificate a new handshake gets."""
    with socket.create_connection(("127.0.0.1", cluster.broker_port(1) + 1), 10) as raw, \
            _context(ca_file).wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _api_versions(sock: ssl.SSLSocket) -> None:
    sock.sendall(kio_util.encode_request(18, 3, 1, "t", {"client_software_name": "t",
                                                          "client_software_version": "1"}))
    head = sock.recv(4)
    assert len(head) == 4, "the connection made before the renewal was closed"
    size = int.from_bytes(head, "big")
    while size:
        size -= len(sock.recv(size))


def test_a_renewed_certificate_is_presented_to_new_connections_without_a_restart(
        tls_broker: tuple[LocalCluster, Any, Path, Path]) -> None:
    cluster, ca, ca_file, keystore = tls_broker
    first = _serial(cluster, ca_file)
    old = _context(ca_file).wrap_socket(socket.create_connection(("127.0.0.1", cluster.broker_port(1) + 1), 10),
                                        server_hostname="127.0.0.1")
    try:
        renewed = local_ca.issue(ca, "broker", HOSTS)
        local_ca.write_pem(keystore, renewed.keystore_pem(), private=True)
        started = time.monotonic()
        while _serial(cluster, ca_file) == first:
            assert time.monotonic() - started < 20, "the renewed certificate was not loaded"
            time.sleep(0.5)
        print(f"renewed certificate presented {time.monotonic() - started:.1f} s after the file was replaced")
        assert _serial(cluster, ca_file) == renewed.certificate.serial_number
        _api_versions(old)  # a connection made before goes on
    finally:
        old.close()

    # another subject: refused, the renewed certificate kept
    local_ca.write_pem(keystore, local_ca.issue(ca, "impostor", HOSTS).keystore_pem(), private=True)
    log = Path(cluster.broker_dir(1)) / "broker.log"
    deadline = time.monotonic() + 20
    while "keeping its certificate" not in log.read_text():
        assert time.monotonic() < deadline, "the refused certificate was not reported"
        time.sleep(0.5)
    assert _serial(cluster, ca_file) == renewed.certificate.serial_number
