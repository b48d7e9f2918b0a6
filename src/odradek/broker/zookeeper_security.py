"""How a broker logs in to ZooKeeper, and whether it protects its znodes: Kafka's
KafkaServer.initZkClient with JaasUtils.isZkSaslEnabled.

Kafka's ZooKeeper client logs in (SASL) whenever the JAAS file named by the JVM system property
java.security.auth.login.config has the section named by zookeeper.sasl.clientconfig ("Client"),
unless zookeeper.sasl.client is false; Kafka refuses to start when that section exists and
zookeeper.sasl.client is false, and when zookeeper.set.acl is true but there is nothing to log
in with ("zookeeper.set.acl is true, but ... the verification of the JAAS login file failed").
odradek has no JVM system properties: the three are broker config keys of the same names (the
JAAS file is BrokerConfig.jaas_file, whose KafkaServer section the listeners read). The Client
section must hold ZooKeeper's DigestLoginModule with username and password: odradek logs in
with SASL DIGEST-MD5 only (no Kerberos).

    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka" password="kafka-secret";
    };

Every broker of a cluster should log in as the same ZooKeeper user: with zookeeper.set.acl the
znodes a broker creates are writable by their creator's user alone (zk/zk_acls.py).
"""
from __future__ import annotations

import logging
from pathlib import Path

from odradek.broker.config import BrokerConfig
from odradek.broker.listener_config import JAAS_FILE_KEY
from odradek.common.errors import StartupRefusedError
from odradek.security.jaas import digest_client_login, parse_jaas
from odradek.zk.sasl import ZkSaslCredentials

log = logging.getLogger("odradek.broker")


class ZooKeeperSecurityError(StartupRefusedError):
    """The broker's ZooKeeper login settings contradict each other or cannot be used."""


def _settings(config: BrokerConfig) -> str:
    """Kafka's JaasUtils.zkSecuritySysConfigString, for the messages."""
    return (f"[{JAAS_FILE_KEY}={config.jaas_file}, zookeeper.sasl.client={str(config.zookeeper_sasl_client).lower()}, "
            f"zookeeper.sasl.clientconfig={config.zookeeper_sasl_clientconfig}]")


def zookeeper_credentials(config: BrokerConfig) -> ZkSaslCredentials | None:
    """The SASL user the broker logs in to ZooKeeper as, None for no login; ZooKeeperSecurityError
    (one line, for the operator) for a JAAS file that cannot be read or used, or
    zookeeper.set.acl=true without credentials."""
    section = config.zookeeper_sasl_clientconfig
    jaas_file = config.jaas_file
    credentials = None
    problem = f"no {JAAS_FILE_KEY} is set"
    if jaas_file:
        try:
            jaas = parse_jaas(Path(jaas_file).read_text())
        except OSError as exc:
            raise ZooKeeperSecurityError(f"{JAAS_FILE_KEY}={jaas_file}: cannot read it: "
                                         f"{exc.strerror or exc}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise ZooKeeperSecurityError(f"{JAAS_FILE_KEY}={jaas_file}: {exc}") from None
        modules = jaas.get(section)
        problem = f"{jaas_file} has no {section} section"
        if modules is not None and not config.zookeeper_sasl_client:
            raise ZooKeeperSecurityError(
                f"the JAAS file {jaas_file} has a {section} section, but zookeeper.sasl.client is false, "
                f"which disables SASL in the ZooKeeper client {_settings(config)}")
        if modules is not None:
            try:
                credentials = ZkSaslCredentials(*digest_client_login(modules))
            except ValueError as exc:
                raise ZooKeeperSecurityError(f"{JAAS_FILE_KEY}={jaas_file}, section {section}: {exc}") from None
    if config.zookeeper_set_acl and credentials is None:
        raise ZooKeeperSecurityError(f"zookeeper.set.acl is true, but the verification of the JAAS login file "
                                     f"failed ({problem}) {_settings(config)}")
    if credentials is not None:
        log.info("logging in to ZooKeeper as %r (SASL DIGEST-MD5); zookeeper.set.acl=%s", credentials.username,
                 str(config.zookeeper_set_acl).lower())
    return credentials
