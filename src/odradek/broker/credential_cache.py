"""Kafka's CredentialCache (with CredentialProvider.updateCredentials): every user's SCRAM
credentials in the broker's memory, for its SASL/SCRAM exchanges.

Why a cache: a SCRAM exchange needs the user's credential at its first message; asking
ZooKeeper there would put a ZooKeeper round trip, and every ZooKeeper outage, into each
connection's authentication. The cache is filled at startup from /config/users (the broker's
DynamicConfigManager calls ``on_user_config`` for every stored user, as Kafka's startup does) and
follows each users/<name> change notification after that (Kafka's UserConfigHandler), so a
credential added, changed or deleted through AlterUserScramCredentials on any broker reaches
every broker's cache without a restart. A connection authenticated before a change keeps its
session, as in Kafka: only later exchanges see the new credential.

Thread-safe: the SASL exchanges read on the event loop, the updates may come from any thread (a
ZooKeeper worker). A lock guards each read and each update; a stored credential is parsed before
the lock is taken, so a reader never waits for parsing.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping

from odradek.broker.dynamic_broker_config import DEFAULT_ENTITY
from odradek.common.sanitizer import desanitize
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from odradek.security.scram import CredentialLookup, ScramCredential, credential_from_string

log = logging.getLogger("odradek.broker.credential_cache")

#: the mechanisms a user's config may hold a credential for, by the key that holds it
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)


class CredentialCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credentials: dict[str, dict[str, ScramCredential]] = {m: {} for m in SCRAM_MECHANISMS}

    def lookup(self, mechanism: str, username: str) -> ScramCredential | None:
        """The user's credential for the mechanism; None for a user without one (or a mechanism
        that is not SCRAM)."""
        with self._lock:
            by_user = self._credentials.get(mechanism)
            return None if by_user is None else by_user.get(username)

    def lookup_for(self, mechanism: str) -> CredentialLookup:
        """``lookup`` for one mechanism: the CredentialLookup a ScramSaslServer takes."""
        return functools.partial(self.lookup, mechanism)

    def users(self, mechanism: str) -> list[str]:
        """The users holding a credential for the mechanism, sorted."""
        with self._lock:
            return sorted(self._credentials.get(mechanism, {}))

    def on_user_config(self, entity: str, config: Mapping[str, str]) -> None:
        """DynamicConfigManager's listener for "users" (Kafka's UserConfigHandler): ``entity`` is
        the name in ZooKeeper (sanitized), ``config`` its whole config. A <user>/clients/<id>
        entity and the <default> user carry quotas only, never credentials."""
        if "/" in entity or entity == DEFAULT_ENTITY:
            return
        try:
            username = desanitize(entity)
        except ValueError:
            log.warning("ignoring /config/users/%s: not a user name Kafka's Sanitizer writes", entity)
            return
        self.update_user(username, config)

    def update_user(self, username: str, config: Mapping[str, str]) -> None:
        """Make the user's credentials those of ``config`` (Kafka's updateCredentials): each
        mechanism's key holds the credential's string form, and a mechanism without one is
        removed. A stored value that cannot be read removes that mechanism too (logged, without
        the value): a credential no one can read must not leave an older one usable."""
        parsed: dict[str, ScramCredential | None] = {}
        for mechanism in SCRAM_MECHANISMS:
            text = config.get(mechanism)
            if text is None:
                parsed[mechanism] = None
                continue
            try:
                parsed[mechanism] = credential_from_string(text)
            except ValueError:
                log.warning("the stored %s credential of user %r cannot be read; the user cannot log in with %s",
                            mechanism, username, mechanism)
                parsed[mechanism] = None
        changed = False
        with self._lock:
            for mechanism, credential in parsed.items():
                by_user = self._credentials[mechanism]
                if credential is None:
                    changed |= by_user.pop(username, None) is not None
                elif by_user.get(username) != credential:
                    by_user[username] = credential
                    changed = True
        if changed:
            held = [f"{m} ({c.iterations} iterations)" for m, c in parsed.items() if c is not None]
            log.info("SCRAM credentials of user %r now: %s", username, ", ".join(held) or "none")
