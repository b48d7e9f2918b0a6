"""The security settings of this process's tools, as Kafka's tools take them with
``--command-config FILE``: every client the odradek command line, the cluster tooling and the
dashboard make (librdkafka's admin clients, producers and consumers, and odradek's own
connections) connects with them.

A tool serves one user against one cluster, so the settings are the process's: the command line
reads the file once (`use`) and each client adds them to its own configuration. The file is a
properties file of librdkafka's keys (what ``odradek up --secure`` writes to
DATA_DIR/security/admin.properties) or of the Java client's; the Java client's TLS and SASL keys
are translated for librdkafka (ssl.truststore.location of a PEM truststore is ssl.ca.location,
sasl.jaas.config's username and password are sasl.username and sasl.password).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from odradek.security import jaas
from odradek.security.client_security import PLAINTEXT, ClientSecurity, SecurityConfigError, from_settings

#: the security keys librdkafka takes as they are
_LIBRDKAFKA_KEYS = ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
                    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
                    "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification")

_settings: dict[str, str] = {}
_security: ClientSecurity = PLAINTEXT


def read_properties(path: Path) -> dict[str, str]:
    """key=value lines (# and ! comments), as Kafka's tools read --command-config; ValueError
    naming the line of one without '='."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}: line {lineno}: {line!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def use(settings: dict[str, str]) -> None:
    """Make ``settings`` the process's client settings; SecurityConfigError when they cannot
    be used (a missing CA file, an unknown protocol)."""
    global _settings, _security
    security = from_settings(settings)
    _settings, _security = dict(settings), security


def settings() -> dict[str, str]:
    """The process's client settings as given to ``use`` (empty: none), for a child process
    that must connect as this one does."""
    return dict(_settings)


def security() -> ClientSecurity:
    """How odradek's own connections reach brokers (TLS, SASL), PLAINTEXT by default."""
    return _security


def librdkafka(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with the process's security settings in librdkafka's keys."""
    if not _settings:
        return conf
    return {**conf, **librdkafka_settings(_settings)}


def librdkafka_settings(settings: dict[str, str]) -> dict[str, str]:
    """The librdkafka keys of ``settings``, the Java client's ones translated."""
    out = {k: v for k, v in settings.items() if k in _LIBRDKAFKA_KEYS}
    location = settings.get("ssl.truststore.location")
    if location and settings.get("ssl.truststore.type", "PEM").upper() == "PEM" and "ssl.ca.location" not in out:
        out["ssl.ca.location"] = location
    keystore = settings.get("ssl.keystore.location")
    if keystore and settings.get("ssl.keystore.type", "PEM").upper() == "PEM":
        out.setdefault("ssl.certificate.location", keystore)
        out.setdefault("ssl.key.location", keystore)
    if settings.get("sasl.jaas.config") and "sasl.username" not in out:
        try:
            options = jaas.parse_jaas_config_property(settings["sasl.jaas.config"]).options
        except ValueError as exc:
            raise SecurityConfigError(f"sasl.jaas.config: {exc}") from None
        out.update({"sasl.username": options.get("username", ""), "sasl.password": options.get("password", "")})
    if out.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out
