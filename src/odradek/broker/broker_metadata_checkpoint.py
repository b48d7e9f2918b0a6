"""`meta.properties`: whose data a data directory holds (Kafka's BrokerMetadataCheckpoint).

Written at a broker's first start (version=0, broker.id, cluster.id, as Kafka 2.x writes it) and
checked at every later one, before the broker deletes anything there: a broker whose broker.id
or whose cluster's id (ZooKeeper's /cluster/id) disagrees with the directory's refuses to start.
That is what keeps a broker started on another broker's data directory, or on a directory of
another cluster (a wrong zookeeper.connect), from taking those logs as stray ones and deleting
them. The checks and their words follow Kafka's InconsistentBrokerIdException and
InconsistentClusterIdException.

A directory without the file (a new one, or one written before the file was kept) gets it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from odradek.common.errors import StartupRefusedError
from odradek.log.checkpoint import fsync_dir

META_PROPERTIES = "meta.properties"
VERSION = 0


class InconsistentBrokerMetadataError(StartupRefusedError):
    """The data directory belongs to another broker or another cluster, or its meta.properties
    cannot be read."""


@dataclass(frozen=True)
class BrokerMetadata:
    broker_id: int
    cluster_id: str | None


def read(data_dir: Path) -> BrokerMetadata | None:
    """The identity stored in ``data_dir``, None if it has none yet."""
    path = Path(data_dir) / META_PROPERTIES
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InconsistentBrokerMetadataError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    if props.get("version") != str(VERSION) or not props.get("broker.id", "").lstrip("-").isdigit():
        raise InconsistentBrokerMetadataError(
            f"{path} is not a version {VERSION} meta.properties with a broker.id (it has "
            f"{', '.join(f'{k}={v}' for k, v in sorted(props.items())) or 'nothing'}); move it away if the "
            f"directory's data is this broker's")
    return BrokerMetadata(int(props["broker.id"]), props.get("cluster.id") or None)


def write(data_dir: Path, metadata: BrokerMetadata) -> None:
    """Store ``metadata`` by an fsynced rename, so a crash leaves the old file or the new one."""
    path = Path(data_dir) / META_PROPERTIES
    tmp = path.with_name(META_PROPERTIES + ".tmp")
    lines = ["#", f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}", f"version={VERSION}",
             f"broker.id={metadata.broker_id}"]
    if metadata.cluster_id is not None:
        lines.append(f"cluster.id={metadata.cluster_id}")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def check_broker_id(data_dir: Path, stored: BrokerMetadata | None, broker_id: int) -> None:
    """Refuse a broker.id other than the one the directory's data belongs to."""
    if stored is not None and stored.broker_id != broker_id:
        raise InconsistentBrokerMetadataError(
            f"configured broker.id {broker_id} does not match broker.id {stored.broker_id} stored in "
            f"{Path(data_dir) / META_PROPERTIES}: the directory holds broker {stored.broker_id}'s data (start "
            f"broker {stored.broker_id} on it, or give broker {broker_id} a data dir of its own)")


def check_cluster_id(data_dir: Path, stored: BrokerMetadata | None, cluster_id: str) -> None:
    """Refuse a cluster other than the one the directory's data belongs to."""
    if stored is not None and stored.cluster_id is not None and stored.cluster_id != cluster_id:
        raise InconsistentBrokerMetadataError(
            f"the cluster's id {cluster_id} (ZooKeeper's /cluster/id) does not match cluster.id "
            f"{stored.cluster_id} stored in {Path(data_dir) / META_PROPERTIES}: the broker is trying to join "
            f"another cluster than its data's (is --zookeeper, with its chroot, right?)")
