"""DescribeUserScramCredentials (API 50) and AlterUserScramCredentials (API 51), KIP-554: the
users' SCRAM credentials, kept in ZooKeeper as Kafka's ZkAdminManager keeps them, so Kafka's
tools and brokers read ours and we read theirs.

Where they live: /config/users/<user> (the user name sanitized, common/sanitizer.py) holds
{"version":1,"config":{"SCRAM-SHA-256":"salt=..,stored_key=..,server_key=..,iterations=4096"}},
a key per mechanism (security/scram.py's credential_to_string). The same node holds the user's
quota configs (producer_byte_rate, ...): an alteration changes only the keys of the mechanisms
it names and keeps every other key. Each changed node is announced with a change notification
(users/<user>) that every broker's DynamicConfigManager follows into its credential cache
(credential_cache.py), which its SASL/SCRAM exchanges read.

What the client sends: the salt and the salted password (RFC 5802's Hi(password, salt, i)),
never the password; the broker derives the stored key and server key from them
(ScramFormatter.generateCredential) and stores only those.

As Kafka's KafkaApis and ZkAdminManager:
- Describe needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED, at the top and for
  each user named). No users (null or empty) is every user holding a credential, sorted; a user
  named without one is RESOURCE_NOT_FOUND, an empty name RESOURCE_NOT_FOUND, a name given twice
  DUPLICATE_RESOURCE; each user is answered once, in request order.
- Alter is the controller's (another broker answers NOT_CONTROLLER for every user; the client
  asks Metadata and sends it again), then needs ALTER on the cluster. Each user is answered once,
  and refused as a whole: an empty name (UNACCEPTABLE_CREDENTIAL), a mechanism other than
  SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2) (UNSUPPORTED_SASL_MECHANISM), iterations outside
  4096..16384 (UNACCEPTABLE_CREDENTIAL), the same user and mechanism twice in the request
  (DUPLICATE_RESOURCE), deleting a credential the user does not have (RESOURCE_NOT_FOUND). A
  refused user's node is not touched; the other users of the request are still altered.

Where this differs from Kafka, and why:
- The accepted users are written in one ZooKeeper multi, each node with its notification
  (zk/admin_zk_client.py), so they are all stored or none is; Kafka writes user after user, each
  node and then its notification, and a failure halfway leaves some written and some not (and a
  crash between a node and its notification leaves brokers on the old credential).
- Alterations on this broker run one at a time (and only the controller takes them), so two
  concurrent requests for one user (SCRAM-SHA-256 in one, SCRAM-SHA-512 in the other) cannot
  lose one of them; Kafka's request threads can interleave their read and write.
- An empty salt, or a salted password that is not the mechanism's hash size (32 or 64 bytes), is
  UNACCEPTABLE_CREDENTIAL: Kafka would store a credential that no client's proof can ever match
  (or, for an empty salt, one that cannot be read back).
- A request whose accepted users would not fit in one ZooKeeper request (zookeeper.jute.maxbuffer,
  thousands of users), which ZooKeeper would answer by dropping the broker's connection, is
  INVALID_REQUEST for each of those users, and nothing is stored.
- Describe of every user names them as users (desanitized); Kafka lists the node names as they
  are ("%2A" for "*"). A stored credential that cannot be read is that user's
  UNKNOWN_SERVER_ERROR without the stored text (Kafka's message quotes it).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import weakref
from typing import Any

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.dynamic_broker_config import DEFAULT_ENTITY
from odradek.broker.request_authorization import allowed, wire
from odradek.common.sanitizer import desanitize, sanitize
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    credential_from_salted_password,
    credential_from_string,
    credential_to_string,
    digest_size,
)
from odradek.zk import admin_zk_client as azk
from odradek.zk import paths
from odradek.zk.request_size import MULTI_OP_OVERHEAD, payload_budget

log = logging.getLogger("odradek.broker.scram_credentials")

#: Kafka's messages (ZkAdminManager), which clients show as they are
EMPTY_USER = "Username must not be empty"
UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"
TOO_FEW_ITERATIONS = "Too few iterations"
TOO_MANY_ITERATIONS = "Too many iterations"
ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
NO_CREDENTIAL_TO_DELETE = "Attempt to delete a user credential that does not exist"
NO_CREDENTIAL_TO_DESCRIBE = "Attempt to describe a user credential that does not exist"
NOT_CONTROLLER = "This is not the correct controller for this cluster."
CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."
UNKNOWN_SERVER_ERROR = "The server experienced an unexpected error when processing the request."

_DESCRIBE_CLUSTER = wire(api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS).check(AclOperation.DESCRIBE, ResourceType.CLUSTER)
_ALTER_CLUSTER = wire(api_keys.ALTER_USER_SCRAM_CREDENTIALS).check(AclOperation.ALTER, ResourceType.CLUSTER)

#: (error code, message) of one user's answer
Outcome = tuple[ErrorCode, str | None]
OK: Outcome = (ErrorCode.NONE, None)


# -- DescribeUserScramCredentials (API 50) -------------------------------------------------------

async def describe_user_scram_credentials(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    names = None if req.users is None else [u.name for u in req.users]
    if not allowed(ctx, _DESCRIBE_CLUSTER):
        body = describe_error(names, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED)
    else:
        configs = await asyncio.to_thread(_read_described, ctx.zk, names or None)
        body = {"error_code": ErrorCode.NONE, "error_message": None, "results": describe_results(names, configs)}
    return kio_util.encode_response(api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS, version, header.correlation_id,
                                    {"throttle_time": 0, **body})


def describe_error(names: list[str] | None, error: int, message: str | None) -> dict[str, Any]:
    """A whole request refused (unauthorized, or failed): the error at the top and for each
    user named, each once."""
    return {"error_code": error, "error_message": message,
            "results": [{"user": n, "error_code": error, "error_message": message, "credential_infos": []}
                        for n in dict.fromkeys(names or ())]}


def _read_described(zk: Any, names: list[str] | None) -> dict[str, dict[str, str]]:
    """On a thread: the configs of the users named (of every user for None), by user name, in
    one batched read (after one listing for every user)."""
    if names is None:
        stored = [n for n in zk.get_entity_names(azk.USERS) if n != DEFAULT_ENTITY]
        users: dict[str, str] = {}
        for name in stored:
            try:
                users[name] = desanitize(name)
            except ValueError:
                log.warning("ignoring /config/users/%s: not a user name Kafka's Sanitizer writes", name)
    else:
        users = {sanitize(n): n for n in dict.fromkeys(names) if n}
    configs = zk.get_entity_configs(azk.USERS, list(users))
    return {users[name]: config for name, config in configs.items()}


def describe_results(names: list[str] | None, configs: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Kafka's describeUserScramCredentials from the users' configs: every user holding a
    credential, sorted, when no user is named (None or []); else each user named, once, in
    request order, with its credentials or why not."""
    if not names:
        return [_described(user, configs[user]) for user in sorted(configs) if _has_credential(configs[user])]
    counts = collections.Counter(names)
    results = []
    for user in dict.fromkeys(names):
        if not user:
            results.append(_user_error(user, ErrorCode.RESOURCE_NOT_FOUND, EMPTY_USER))
        elif counts[user] > 1:
            results.append(_user_error(user, ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials "
                                       f"for the same user twice in a single request: {user}"))
        elif not _has_credential(configs.get(user, {})):
            results.append(_user_error(user, ErrorCode.RESOURCE_NOT_FOUND, f"{NO_CREDENTIAL_TO_DESCRIBE}: {user}"))
        else:
            results.append(_described(user, configs[user]))
    return results


def _has_credential(config: dict[str, str]) -> bool:
    return any(mechanism in config for mechanism in MECHANISM_TYPES.values())


def _described(user: str, config: dict[str, str]) -> dict[str, Any]:
    infos = []
    for number, mechanism in MECHANISM_TYPES.items():
        if mechanism not in config:
            continue
        try:
            iterations = credential_from_string(config[mechanism]).iterations
        except ValueError:
            log.warning("the stored %s credential of user %r cannot be read", mechanism, user)
            return _user_error(user, ErrorCode.UNKNOWN_SERVER_ERROR,
                               f"The stored {mechanism} credential of user {user} cannot be read")
        infos.append({"mechanism": number, "iterations": iterations})
    return {"user": user, "error_code": ErrorCode.NONE, "error_message": None, "credential_infos": infos}


def _user_error(user: str, error: int, message: str | None) -> dict[str, Any]:
    return {"user": user, "error_code": error, "error_message": message, "credential_infos": []}


# -- AlterUserScramCredentials (API 51) ----------------------------------------------------------

#: one lock per event loop (one broker per loop): alterations on this broker run one at a time
_ALTER_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _alter_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _ALTER_LOCKS.get(loop)
    if lock is None:
        lock = _ALTER_LOCKS[loop] = asyncio.Lock()
    return lock


async def alter_user_scram_credentials(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    if ctx.metadata.controller_id != ctx.config.broker_id:
        results = alter_error(req, ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER)
    elif not allowed(ctx, _ALTER_CLUSTER):
        results = alter_error(req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED)
    else:
        async with _alter_lock():
            outcomes = await asyncio.to_thread(_alter, ctx.zk, list(req.upsertions), list(req.deletions),
                                               ctx.config.zookeeper_jute_maxbuffer)
        results = [{"user": user, "error_code": code, "error_message": message}
                   for user, (code, message) in outcomes.items()]
    return kio_util.encode_response(api_keys.ALTER_USER_SCRAM_CREDENTIALS, version, header.correlation_id,
                                    {"throttle_time": 0, "results": results})


def alter_error(req: Any, error: int, message: str | None) -> list[dict[str, Any]]:
    """A whole request refused: each user it names, once, sorted (Kafka's getErrorResponse)."""
    users = sorted({entry.name for entry in (*req.deletions, *req.upsertions)})
    return [{"user": user, "error_code": error, "error_message": message} for user in users]


def _alter(zk: Any, upsertions: list[Any], deletions: list[Any], jute_maxbuffer: int) -> dict[str, Outcome]:
    """On a thread: check, read the users' configs (one batched read), write the accepted ones
    (one multi). Each user's outcome, the refused first."""
    refused, users = check_alteration(upsertions, deletions)
    current = zk.get_entity_configs(azk.USERS, [sanitize(u) for u in users]) if users else {}
    missing, changes = altered_configs(upsertions, deletions, {u: current[sanitize(u)] for u in users})
    refused.update(missing)
    stored = {(azk.USERS, sanitize(user)): config for user, config in changes.items()}
    size = multi_bytes(stored)
    if size > payload_budget(jute_maxbuffer):
        too_large: Outcome = (ErrorCode.INVALID_REQUEST,
                              f"The request's {len(changes)} users take {size} bytes of ZooKeeper data, more than "
                              f"the {payload_budget(jute_maxbuffer)} one transaction may carry; send fewer per request")
        return {**refused, **dict.fromkeys(changes, too_large)}
    if not changes:
        return refused
    try:
        zk.change_entity_configs(stored)
    except Exception:  # noqa: BLE001 - ZooKeeper trouble: these users fail, the refused keep their own error
        log.exception("storing the SCRAM credentials of %s failed", sorted(changes))
        return {**refused, **dict.fromkeys(changes, (ErrorCode.UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR))}
    log.info("SCRAM credentials altered: %s", "; ".join(_summary(user, upsertions, deletions) for user in changes))
    return {**refused, **dict.fromkeys(changes, OK)}


def _summary(user: str, upsertions: list[Any], deletions: list[Any]) -> str:
    done = [f"+{MECHANISM_TYPES[u.mechanism]}" for u in upsertions if u.name == user]
    done += [f"-{MECHANISM_TYPES[d.mechanism]}" for d in deletions if d.name == user]
    return f"{user!r} {' '.join(done)}"


def _upsertion_error(upsertion: Any) -> Outcome | None:
    if not upsertion.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, EMPTY_USER
    mechanism = MECHANISM_TYPES.get(upsertion.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, UNKNOWN_MECHANISM
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, TOO_FEW_ITERATIONS
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, TOO_MANY_ITERATIONS
    if not upsertion.salt:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "The salt must not be empty"
    size = digest_size(mechanism)
    if len(upsertion.salted_password) != size:
        return (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                f"A {mechanism} salted password is {size} bytes, not {len(upsertion.salted_password)}")
    return None


def _deletion_error(deletion: Any) -> Outcome | None:
    if not deletion.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, EMPTY_USER
    if deletion.mechanism not in MECHANISM_TYPES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, UNKNOWN_MECHANISM
    return None


def check_alteration(upsertions: list[Any], deletions: list[Any]) -> tuple[dict[str, Outcome], list[str]]:
    """Kafka's checks that need no stored data, in its order: (the users refused and why, the
    users left to alter, in request order). A user's bad entry refuses the user (an upsertion's
    reason wins over a deletion's, as in Kafka); so does the same mechanism named twice for it."""
    refused: dict[str, Outcome] = {}
    for deletion in deletions:
        if (error := _deletion_error(deletion)) is not None:
            refused[deletion.name] = error
    for upsertion in upsertions:
        if (error := _upsertion_error(upsertion)) is not None:
            refused[upsertion.name] = error
    pairs = [(e.name, int(e.mechanism)) for e in (*upsertions, *deletions) if e.name not in refused]
    for (user, _mechanism), count in collections.Counter(pairs).items():
        if count > 1:
            refused[user] = (ErrorCode.DUPLICATE_RESOURCE, ALTERED_TWICE)
    return refused, list(dict.fromkeys(user for user, _ in pairs if user not in refused))


def altered_configs(upsertions: list[Any], deletions: list[Any], current: dict[str, dict[str, str]]
                    ) -> tuple[dict[str, Outcome], dict[str, dict[str, str]]]:
    """The users' configs after the request (``current`` holds those check_alteration left, by
    user): (the users refused for deleting a credential they do not have, the new configs of the
    others). Keys the request does not name (other mechanisms, quotas) are kept."""
    refused: dict[str, Outcome] = {}
    for deletion in deletions:
        if deletion.name in current and MECHANISM_TYPES[deletion.mechanism] not in current[deletion.name]:
            refused[deletion.name] = (ErrorCode.RESOURCE_NOT_FOUND, NO_CREDENTIAL_TO_DELETE)
    changes = {user: dict(config) for user, config in current.items() if user not in refused}
    for deletion in deletions:
        if deletion.name in changes:
            del changes[deletion.name][MECHANISM_TYPES[deletion.mechanism]]
    for upsertion in upsertions:
        if upsertion.name in changes:
            mechanism = MECHANISM_TYPES[upsertion.mechanism]
            credential = credential_from_salted_password(mechanism, bytes(upsertion.salt),
                                                         bytes(upsertion.salted_password), int(upsertion.iterations))
            changes[upsertion.name][mechanism] = credential_to_string(credential)
    return refused, changes


def multi_bytes(changes: dict[tuple[str, str], dict[str, str]]) -> int:
    """Bytes of paths and data the multi writing ``changes`` carries (each node and its
    notification), to hold against zk/request_size.py's budget."""
    notification = len(f"{paths.CONFIG_CHANGES}/{azk.CONFIG_CHANGE_PREFIX}")
    return sum(2 * MULTI_OP_OVERHEAD + len(azk.entity_path(*key)) + len(paths.encode_topic_config(config))
               + notification + len(azk.encode_notification(*key)) for key, config in changes.items())


ROUTES = {
    api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    api_keys.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
}
