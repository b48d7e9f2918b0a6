"""`odradek up --secure`: a local cluster that can run on a network that is not trusted, driven
only through the command line and reached as a user would from its printed settings.

One SASL_SSL listener per broker, the SCRAM super user admin with a generated password in
DATA_DIR/security/admin.properties (mode 0600) that every odradek command given --data-dir uses,
and a ZooKeeper that serves no client that has not logged in. A second `up` after `down` keeps
the passwords and the CA."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from kazoo.client import KazooClient

from cli_helpers import assert_one_line_error, run
from odradek.common.netutil import free_port, free_port_block
from odradek.zk.server import check_installed

pytestmark = pytest.mark.integration


def _settings(data_dir: Path) -> dict[str, str]:
    text = (data_dir / "security" / "admin.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_a_secured_cluster_serves_logged_in_clients_only_and_keeps_its_secrets(tmp_path: Path) -> None:
    check_installed()
    data_dir = tmp_path / "secure"
    base, zk_port = free_port_block(2), free_port()
    up = run("up", "--brokers", "2", "--data-dir", str(data_dir), "--secure", "--base-port", str(base),
             "--zk-port", str(zk_port), "--metrics-base-port", str(free_port_block(2)), timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        settings = _settings(data_dir)
        assert settings["security.protocol"] == "SASL_SSL" and settings["sasl.username"] == "admin"
        assert settings["sasl.password"] in up.stdout and "kcat -b" in up.stdout  # the settings to paste
        for name in ("admin.properties", "secrets.json", "broker_jaas.conf", "broker.keystore.pem", "ca-key.pem"):
            assert stat.S_IMODE((data_dir / "security" / name).stat().st_mode) == 0o600, name

        # the tools use the data dir's admin settings by themselves
        assert run("topics", "create", "sec", "--partitions", "2", "--replication-factor", "2",
                   "--data-dir", str(data_dir)).returncode == 0
        produced = run("produce", "sec", "--data-dir", str(data_dir), stdin="one\ntwo\n")
        assert produced.returncode == 0, produced.stderr

        # a client with the printed settings reads them
        bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        consumer = Consumer({"bootstrap.servers": bootstrap, **settings, "group.id": "sec",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["sec"])
        got: list[bytes] = []
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
            if len(got) == 2:
                break
        consumer.close()
        assert sorted(got) == [b"one", b"two"]

        # a client without them gets nothing: PLAINTEXT on the TLS port, a wrong password
        assert_one_line_error(run("topics", "list", "--bootstrap-server", bootstrap), 1, "cannot reach")
        errors: list[KafkaError] = []
        wrong = Producer({"bootstrap.servers": bootstrap, **settings, "sasl.password": "guess", "error_cb": errors.append})
        with pytest.raises(KafkaException):
            wrong.list_topics(timeout=5)
        wrong.poll(1)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors

        # ZooKeeper: nothing for a client that has not logged in
        anonymous = KazooClient(f"127.0.0.1:{zk_port}")
        anonymous.start(10)
        try:
            with pytest.raises(Exception):  # the server closes the session of a client without a login
                anonymous.get("/config/users/admin")
        finally:
            anonymous.stop()
            anonymous.close()

        # down and up again: the same password, the same CA
        ca = (data_dir / "security" / "ca.pem").read_bytes()
        assert run("down", "--data-dir", str(data_dir)).returncode == 0
        again = run("up", "--data-dir", str(data_dir), timeout=120)
        assert again.returncode == 0, again.stderr
        assert _settings(data_dir) == settings and (data_dir / "security" / "ca.pem").read_bytes() == ca
        assert json.loads((data_dir / "cluster.json").read_text())["secure"] is True
        assert run("topics", "describe", "sec", "--data-dir", str(data_dir)).returncode == 0
    finally:
        run("down", "--data-dir", str(data_dir))
