"""What `odradek up --secure` makes so that a local cluster can run on a network that is not
trusted, all under DATA_DIR/security:

    ca.pem, ca-key.pem          a certificate authority of the cluster's own (security/local_ca.py)
    broker.keystore.pem         the brokers' key and certificate, for every name the host has
    secrets.json (0600)         the generated passwords: the SCRAM user admin, the ZooKeeper user
    broker_jaas.conf (0600)     the brokers' JAAS file: KafkaServer (their SCRAM login to each
                                other, as admin) and Client (their DIGEST-MD5 login to ZooKeeper)
    admin.properties (0600)     the admin user's client settings, in librdkafka's keys, which every
                                odradek command given --data-dir uses by itself

The cluster it makes: one SASL_SSL listener per broker (SCRAM-SHA-256 and SCRAM-SHA-512), admin a
super user of Kafka's ACL authorizer (any other user needs ACLs: `odradek acls add`), a ZooKeeper
that serves only clients logged in with SASL, and znodes created with Kafka's ACLs
(zookeeper.set.acl). The passwords are made once and kept: a later `up` on the same data dir
reuses them, and the CA, so clients given ca.pem before keep working.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from odradek.client import client_config
from odradek.security import local_ca
from odradek.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential_to_string, generate_credential
from odradek.zk.sasl import ZkSaslCredentials

SECURITY_DIR = "security"
ADMIN_USER = "admin"
ZOOKEEPER_USER = "odradek"
LISTENER = "SASL_SSL"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_DIGEST_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"


@dataclass(frozen=True)
class SecureCluster:
    """The security material of one data dir's cluster (made by ``prepare``)."""

    directory: Path
    admin_password: str
    zookeeper_password: str

    @property
    def ca_file(self) -> Path:
        return self.directory / local_ca.CA_FILE

    @property
    def admin_properties(self) -> Path:
        return self.directory / "admin.properties"

    @property
    def jaas_file(self) -> Path:
        return self.directory / "broker_jaas.conf"

    @property
    def keystore(self) -> Path:
        return self.directory / "broker.keystore.pem"

    def zookeeper_users(self) -> dict[str, str]:
        return {ZOOKEEPER_USER: self.zookeeper_password}

    def zookeeper_credentials(self) -> ZkSaslCredentials:
        return ZkSaslCredentials(ZOOKEEPER_USER, self.zookeeper_password)

    def admin_settings(self) -> dict[str, str]:
        """The admin user's librdkafka settings (what admin.properties holds)."""
        return {"security.protocol": LISTENER, "sasl.mechanism": SCRAM_SHA_512, "sasl.username": ADMIN_USER,
                "sasl.password": self.admin_password, "ssl.ca.location": str(self.ca_file)}

    def broker_settings(self, host: str) -> dict[str, str]:
        """Every broker's security settings, Kafka's keys ({port}: the broker's own)."""
        return {
            "listeners": f"{LISTENER}://{host}:{{port}}",
            "listener.security.protocol.map": f"{LISTENER}:{LISTENER}",
            "sasl.enabled.mechanisms": f"{SCRAM_SHA_256},{SCRAM_SHA_512}",
            "sasl.mechanism.inter.broker.protocol": SCRAM_SHA_512,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file),
            "java.security.auth.login.config": str(self.jaas_file),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": f"User:{ADMIN_USER}",
            "zookeeper.set.acl": "true",
        }

    def admin_credentials(self) -> dict[str, str]:
        """/config/users/admin's SCRAM credentials, in Kafka's stored form."""
        return {mechanism: credential_to_string(generate_credential(mechanism, self.admin_password))
                for mechanism in (SCRAM_SHA_256, SCRAM_SHA_512)}

    def use_admin_settings(self) -> None:
        """Make the admin's settings this process's client settings (client_config)."""
        client_config.use(self.admin_settings())


def hosts_of(host: str) -> list[str]:
    """The names the broker certificate is for: the listener's host, this machine's names and
    the loopback addresses (clients check the name they dialled against it)."""
    names = [host, socket.gethostname(), socket.getfqdn(), *local_ca.DEFAULT_HOSTS]
    return list(dict.fromkeys(n for n in names if n))


def load(data_dir: Path) -> SecureCluster | None:
    """The security material of ``data_dir``'s cluster, None when it has none."""
    directory = data_dir / SECURITY_DIR
    try:
        stored = json.loads((directory / "secrets.json").read_text())
    except FileNotFoundError:
        return None
    return SecureCluster(directory, stored["admin_password"], stored["zookeeper_password"])


def prepare(data_dir: Path, host: str) -> SecureCluster:
    """The security material of ``data_dir``'s cluster, made where missing (see the module doc)."""
    directory = data_dir / SECURITY_DIR
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    cluster = load(data_dir)
    if cluster is None:
        cluster = SecureCluster(directory, secrets.token_urlsafe(18), secrets.token_urlsafe(18))
        local_ca.write_pem(directory / "secrets.json", json.dumps(
            {"admin_password": cluster.admin_password, "zookeeper_password": cluster.zookeeper_password}).encode(),
            private=True)
    if not cluster.keystore.exists():
        ca = local_ca.load_or_create_ca(directory)
        issued = local_ca.issue(ca, "broker", hosts_of(host))
        local_ca.write_pem(cluster.keystore, issued.keystore_pem(), private=True)
    local_ca.write_pem(cluster.jaas_file, (
        "KafkaServer {\n"
        f'  {_SCRAM_MODULE} required username="{ADMIN_USER}" password="{cluster.admin_password}";\n'
        "};\n"
        "Client {\n"
        f'  {_DIGEST_MODULE} required username="{ZOOKEEPER_USER}" password="{cluster.zookeeper_password}";\n'
        "};\n").encode(), private=True)
    local_ca.write_pem(cluster.admin_properties,
                       "".join(f"{k}={v}\n" for k, v in cluster.admin_settings().items()).encode(), private=True)
    return cluster


def paste_settings(cluster: SecureCluster, bootstrap: str) -> str:
    """How a client connects as admin, to paste: confluent-kafka, kafka-python, kcat."""
    s = cluster.admin_settings()
    return (
        f"admin settings (mode 0600): {cluster.admin_properties}\n"
        "confluent-kafka:\n"
        f"  {{'bootstrap.servers': '{bootstrap}', 'security.protocol': 'SASL_SSL', "
        f"'sasl.mechanism': 'SCRAM-SHA-512',\n   'sasl.username': '{ADMIN_USER}', "
        f"'sasl.password': '{s['sasl.password']}', 'ssl.ca.location': '{s['ssl.ca.location']}'}}\n"
        "kafka-python:\n"
        f"  KafkaProducer(bootstrap_servers='{bootstrap}', security_protocol='SASL_SSL', "
        f"sasl_mechanism='SCRAM-SHA-512',\n    sasl_plain_username='{ADMIN_USER}', "
        f"sasl_plain_password='{s['sasl.password']}', ssl_cafile='{s['ssl.ca.location']}')\n"
        "kcat:\n"
        f"  kcat -b {bootstrap} -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512 "
        f"-X sasl.username={ADMIN_USER} -X sasl.password={s['sasl.password']} "
        f"-X ssl.ca.location={s['ssl.ca.location']} -L\n"
        f"odradek commands: --data-dir {cluster.directory.parent} (or --command-config {cluster.admin_properties})")
