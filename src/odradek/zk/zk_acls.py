"""The ACL of every znode a broker creates: Kafka's ZkData.defaultAcls(isSecure, path).

With zookeeper.set.acl=false (not secure) every znode is open to all (world:anyone, ALL), as
ZooKeeper's OPEN_ACL_UNSAFE. With zookeeper.set.acl=true:

- the creator, the broker's SASL user, may do everything (Kafka's CREATOR_ALL_ACL, which
  ZooKeeper stores as ``sasl:<username>``; written here as that Id, so what is sent is what is
  stored and every broker, authenticating as the same user, keeps full access);
- everyone else may read (READ_ACL_UNSAFE), so that tools and clients reading the cluster's
  layout keep working,
- except under the sensitive paths (ZkData.SensitiveRootPaths), which nobody else may even
  read: /config/users (SCRAM credentials), /config/brokers (dynamic broker configs, passwords
  among them) and /delegation_token/tokens. Kafka tests a path with ``startsWith``, so the
  roots and everything below them are sensitive (and, as in Kafka, so is any path that merely
  begins with one of those strings).
- /consumers (the old consumers' tree, where they write themselves) stays open, as in Kafka.

ACLs are set when a znode is created and never change afterwards: znodes created before
zookeeper.set.acl became true keep their open ACL (Kafka's zookeeper-security-migration tool
rewrites them; odradek has no such tool).
"""
from __future__ import annotations

from kazoo.security import ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Id, Permissions

#: Kafka's ZkData.SensitiveRootPaths
SENSITIVE_ROOT_PATHS: tuple[str, ...] = ("/config/users", "/config/brokers", "/delegation_token/tokens",
                                         "/odradek/scram_unknown_user_key")
#: Kafka's ConsumerPathZNode: open whatever zookeeper.set.acl says
CONSUMERS_PATH = "/consumers"
#: the SASL scheme's Id for an authenticated user (ZooKeeper's SASLAuthenticationProvider)
SASL_SCHEME = "sasl"


def sensitive_path(path: str) -> bool:
    """Kafka's ZkData.sensitivePath: nobody but the creator may read it when secure."""
    return path.startswith(SENSITIVE_ROOT_PATHS)


def creator_all(username: str) -> ACL:
    """ALL for the SASL user ``username`` (what ZooKeeper makes of CREATOR_ALL_ACL for a
    connection authenticated as that user)."""
    return ACL(Permissions.ALL, Id(SASL_SCHEME, username))


def default_acls(path: str, secure: bool, username: str | None = None) -> list[ACL]:
    """The ACL a broker gives znode ``path`` (relative to the chroot, as Kafka's paths are)
    when it creates it; ``secure`` is zookeeper.set.acl, ``username`` the SASL user the broker
    authenticates as (required when secure)."""
    if not secure or path == CONSUMERS_PATH:
        return list(OPEN_ACL_UNSAFE)
    if not username:
        raise ValueError("zookeeper.set.acl needs the SASL user the broker authenticates to ZooKeeper as")
    if sensitive_path(path):
        return [creator_all(username)]
    return [creator_all(username), *READ_ACL_UNSAFE]
