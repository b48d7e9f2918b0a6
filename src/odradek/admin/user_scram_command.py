"""The SCRAM users of kafka-configs.sh --entity-type users (Kafka's ConfigCommand:
--add-config 'SCRAM-SHA-256=[iterations=8192,password=...]', --delete-config SCRAM-SHA-256,
--describe) behind `odradek users add|list|delete`.

Only the Kafka protocol, as Kafka's AdminClient sends it (KIP-554): DescribeUserScramCredentials
to any broker, AlterUserScramCredentials to the controller (found through Metadata, and asked
again while the controller moves: NOT_CONTROLLER, or no answer). So it works against Apache
Kafka 3.x brokers as well.

The password never leaves this process: the command makes a random salt and the salted password
(security/scram.py, PBKDF2 with the credential's iterations) and sends those; the brokers keep
only keys derived from them, in ZooKeeper's /config/users/<user>.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.admin.admin_client import (
    connection_failure,
    format_table,
    metadata_request,
    request_first,
    send_request,
)
from odradek.admin.errors import AdminError
from odradek.protocol.errors import ErrorCode, error_name
from odradek.security.scram import MECHANISM_TYPE_OF, MECHANISM_TYPES, new_salt, salted_password

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
CLIENT_ID = "odradek-users"
RETRY_BACKOFF_S = 0.2


@dataclass(frozen=True)
class Upsertion:
    """A credential to set: the user's password for ``mechanism`` with ``iterations``."""

    user: str
    mechanism: str  # "SCRAM-SHA-256" | "SCRAM-SHA-512"
    iterations: int
    password: str


def mechanism_name(number: int) -> str:
    return MECHANISM_TYPES.get(number, f"unknown mechanism {number}")


def error_text(code: int, message: str | None) -> str:
    """``RESOURCE_NOT_FOUND: Attempt to ...``: Kafka's error name and the broker's words."""
    return f"{error_name(code)}: {message}" if message else error_name(code)


class UserScramAdmin:
    """The requests of one command; each may take ``timeout`` seconds, and an alteration is sent
    again while no controller takes it, until then."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        self.bootstrap, self.timeout = bootstrap, timeout

    def describe(self, users: list[str] | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Every user's credentials (users None), or the users named: ([{"user", "mechanism",
        "iterations"}] sorted by user and mechanism, {user: why not} for each user named that
        the broker could not describe: no credential, RESOURCE_NOT_FOUND). AdminError when the
        whole request is refused (CLUSTER_AUTHORIZATION_FAILED)."""
        body = {"users": None if users is None else [{"name": u} for u in users]}
        response = request_first(self.bootstrap.split(","), self.bootstrap, DESCRIBE_USER_SCRAM_CREDENTIALS, 0, body,
                                 self.timeout, CLIENT_ID)
        if int(response.error_code):
            raise AdminError(f"cannot describe SCRAM users: {error_text(int(response.error_code), response.error_message)}")
        rows: list[dict[str, Any]] = []
        errors: dict[str, str] = {}
        for result in response.results:
            if int(result.error_code):
                errors[result.user] = error_text(int(result.error_code), result.error_message)
                continue
            rows += [{"user": result.user, "mechanism": mechanism_name(int(info.mechanism)),
                      "iterations": int(info.iterations)} for info in result.credential_infos]
        return sorted(rows, key=lambda r: (r["user"], r["mechanism"])), errors

    def alter(self, upsertions: list[Upsertion], deletions: list[tuple[str, str]]) -> dict[str, str | None]:
        """One AlterUserScramCredentials (deletions as (user, mechanism)): each user's error
        text, or None where the broker stored the change."""
        body = {"deletions": [{"name": user, "mechanism": MECHANISM_TYPE_OF[mechanism]} for user, mechanism in deletions],
                "upsertions": [self._upsertion(u) for u in upsertions]}
        results = self._to_controller(body)
        return {user: None if code == ErrorCode.NONE else error_text(code, message)
                for user, (code, message) in results.items()}

    @staticmethod
    def _upsertion(upsertion: Upsertion) -> dict[str, Any]:
        """What the request carries of a password: a new random salt (in the shape Kafka's
        AdminClient makes) and the salted password, never the password."""
        salt = new_salt()
        return {"name": upsertion.user, "mechanism": MECHANISM_TYPE_OF[upsertion.mechanism],
                "iterations": upsertion.iterations, "salt": salt,
                "salted_password": salted_password(upsertion.mechanism, upsertion.password, salt, upsertion.iterations)}

    def _to_controller(self, body: dict[str, Any]) -> dict[str, tuple[int, str | None]]:
        """The controller's answer, {user: (error code, message)}; sent again while the
        controller is unknown, unreachable or answers NOT_CONTROLLER, until the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            md = metadata_request(self.bootstrap, [], self.timeout)
            addresses = {int(b.node_id): f"{b.host}:{b.port}" for b in md.brokers}
            controller = int(md.controller_id)
            why = f"no controller (Metadata names {controller})"
            if controller in addresses:
                try:
                    response = send_request(addresses[controller], ALTER_USER_SCRAM_CREDENTIALS, 0, body,
                                            self.timeout, CLIENT_ID)
                except (OSError, ValueError) as exc:
                    why = f"cannot reach the controller, broker {controller} at {addresses[controller]}: " \
                          f"{connection_failure(exc)}"
                else:
                    results = {r.user: (int(r.error_code), r.error_message) for r in response.results}
                    if not any(code == ErrorCode.NOT_CONTROLLER for code, _ in results.values()):
                        return results
                    why = f"broker {controller} is no longer the controller"
            if time.monotonic() > deadline:
                raise AdminError(f"cannot alter SCRAM credentials: {why}")
            time.sleep(RETRY_BACKOFF_S)

    def add(self, user: str, password: str, mechanism: str, iterations: int) -> None:
        """Set the user's credential for ``mechanism`` (a new user, or a new password)."""
        error = self.alter([Upsertion(user, mechanism, iterations, password)], []).get(user)
        if error is not None:
            raise AdminError(f"cannot set the {mechanism} credential of user {user}: {error}")

    def delete(self, user: str, mechanisms: list[str] | None = None) -> list[str]:
        """Delete the user's credentials for ``mechanisms`` (None: every one it has, as
        DescribeUserScramCredentials names them); the mechanisms deleted."""
        if mechanisms is None:
            rows, errors = self.describe([user])
            if user in errors:
                raise AdminError(f"cannot delete the SCRAM credentials of user {user}: {errors[user]}")
            mechanisms = [r["mechanism"] for r in rows if r["user"] == user and r["mechanism"] in MECHANISM_TYPE_OF]
            if not mechanisms:
                raise AdminError(f"user {user} has no SCRAM credential this command knows")
        error = self.alter([], [(user, m) for m in mechanisms]).get(user)
        if error is not None:
            raise AdminError(f"cannot delete the {', '.join(mechanisms)} credentials of user {user}: {error}")
        return mechanisms


def format_list(rows: list[dict[str, Any]]) -> str:
    """One row per credential: User Mechanism Iterations."""
    if not rows:
        return "no SCRAM credentials"
    return format_table([("User", "Mechanism", "Iterations")]
                        + [(r["user"], r["mechanism"], str(r["iterations"])) for r in rows])


def add_in_zookeeper(connect: str, jaas_file: Path | None, user: str, password: str, mechanism: str,
                     iterations: int) -> None:
    """Write ``user``'s ``mechanism`` credential to /config/users in ZooKeeper directly, with its
    change notification, as kafka-configs.sh --zookeeper does: the one way to create the user
    the brokers log in to each other as before any broker runs. With ``jaas_file`` (the brokers'
    JAAS file) it logs in to ZooKeeper as its Client section says and creates the znode with
    Kafka's ACLs, which only that user may read. The user's other configs are kept."""
    from odradek.common.sanitizer import sanitize
    from odradek.security import jaas
    from odradek.security.scram import credential_to_string, generate_credential
    from odradek.zk.admin_zk_client import USERS
    from odradek.zk.client import KafkaZkClient
    from odradek.zk.sasl import ZkSaslCredentials

    credentials = None
    if jaas_file is not None:
        try:
            section = jaas.parse_jaas(jaas_file.read_text()).section("Client")
            credentials = ZkSaslCredentials(*jaas.digest_client_login(section))
        except OSError as exc:
            raise AdminError(f"--zookeeper-jaas {jaas_file}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise AdminError(f"--zookeeper-jaas {jaas_file}: {exc}") from None
    zk = KafkaZkClient(connect, sasl=credentials, set_acl=credentials is not None)
    try:
        zk.start()
    except Exception as exc:  # noqa: BLE001 - kazoo's timeouts and refusals: one line for the tool
        raise AdminError(f"cannot reach ZooKeeper at {connect} ({type(exc).__name__}: {exc})") from None
    try:
        node = sanitize(user)
        config = dict(zk.get_entity_configs(USERS, [node]).get(node) or {})
        config[mechanism] = credential_to_string(generate_credential(mechanism, password, iterations))
        zk.change_entity_configs({(USERS, node): config})
    finally:
        zk.close()
