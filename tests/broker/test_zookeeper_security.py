"""Where the broker's ZooKeeper login comes from (broker/zookeeper_security.py): the JAAS
file's Client section, and Kafka's refusals when zookeeper.set.acl has nothing to log in with
or the settings contradict each other."""
from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.zookeeper_security import ZooKeeperSecurityError, zookeeper_credentials
from odradek.common.errors import StartupRefusedError
from odradek.zk.sasl import ZkSaslCredentials

CLIENT = 'Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" password="pw"; };\n'
KAFKA_SERVER = ('KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required '
                'username="admin" password="a" user_admin="a"; };\n')


def config(tmp_path: Path, jaas: str | None = None, **settings: object) -> BrokerConfig:
    security = {}
    if jaas is not None:
        (tmp_path / "jaas.conf").write_text(jaas)
        security["java.security.auth.login.config"] = str(tmp_path / "jaas.conf")
    return BrokerConfig(broker_id=1, host="127.0.0.1", port=9092, zookeeper="127.0.0.1:2181",
                        data_dir=tmp_path, security=security, **settings)  # type: ignore[arg-type]


def refused(cfg: BrokerConfig) -> str:
    with pytest.raises(ZooKeeperSecurityError) as caught:
        zookeeper_credentials(cfg)
    assert isinstance(caught.value, StartupRefusedError)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_no_jaas_file_no_login(tmp_path: Path) -> None:
    assert zookeeper_credentials(config(tmp_path)) is None
    assert zookeeper_credentials(config(tmp_path, KAFKA_SERVER)) is None  # no Client section


def test_client_section_logs_in(tmp_path: Path) -> None:
    expected = ZkSaslCredentials("kafka", "pw")
    assert zookeeper_credentials(config(tmp_path, KAFKA_SERVER + CLIENT)) == expected
    assert zookeeper_credentials(config(tmp_path, CLIENT, zookeeper_set_acl=True)) == expected
    assert "pw" not in repr(expected)
    other = CLIENT.replace("Client", "ZkClient", 1)
    assert zookeeper_credentials(config(tmp_path, other, zookeeper_sasl_clientconfig="ZkClient")) == expected
    assert zookeeper_credentials(config(tmp_path, other)) is None


def test_set_acl_without_credentials_is_refused_as_kafka_refuses(tmp_path: Path) -> None:
    message = refused(config(tmp_path, zookeeper_set_acl=True))
    assert message.startswith("zookeeper.set.acl is true, but the verification of the JAAS login file failed "
                              "(no java.security.auth.login.config is set) [java.security.auth.login.config=None, "
                              "zookeeper.sasl.client=true, zookeeper.sasl.clientconfig=Client]")
    assert "has no Client section" in refused(config(tmp_path, KAFKA_SERVER, zookeeper_set_acl=True))


def test_sasl_client_false_with_a_client_section_is_refused(tmp_path: Path) -> None:
    assert "zookeeper.sasl.client is false" in refused(config(tmp_path, CLIENT, zookeeper_sasl_client=False))
    assert zookeeper_credentials(config(tmp_path, KAFKA_SERVER, zookeeper_sasl_client=False)) is None


def test_unusable_jaas_files(tmp_path: Path) -> None:
    assert "line 1: control flag 'needed'" in refused(config(tmp_path, CLIENT.replace("required", "needed")))
    krb = "Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };"
    assert "section Client: only org.apache.zookeeper.server.auth.DigestLoginModule" in refused(config(tmp_path, krb))
    missing = config(tmp_path)
    missing.security["java.security.auth.login.config"] = str(tmp_path / "absent.conf")
    assert "absent.conf: cannot read it: No such file or directory" in refused(missing)


def test_server_properties_keys(tmp_path: Path) -> None:
    (tmp_path / "jaas.conf").write_text(CLIENT)
    props = tmp_path / "server.properties"
    props.write_text(f"broker.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092\nzookeeper.connect=z:2181\n"
                     f"log.dirs={tmp_path}\nzookeeper.set.acl=true\nzookeeper.sasl.client=true\n"
                     f"zookeeper.sasl.clientconfig=Client\njava.security.auth.login.config={tmp_path / 'jaas.conf'}\n")
    cfg = BrokerConfig.from_file(props, warn=pytest.fail)
    assert cfg.zookeeper_set_acl and cfg.zookeeper_sasl_client and cfg.zookeeper_sasl_clientconfig == "Client"
    assert zookeeper_credentials(cfg) == ZkSaslCredentials("kafka", "pw")
