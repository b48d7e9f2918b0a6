"""TLS contexts from Kafka's ``ssl.*`` configs: Kafka's DefaultSslEngineFactory (keystore,
truststore, protocols, cipher suites, client authentication, endpoint identification) for Python's
ssl module, and the checks SslFactory makes before a listener's certificates are replaced while it
runs. A listener's config, as the broker's config layer hands it over (a plain mapping of the
effective values, missing keys at Kafka's defaults), becomes an SslEngineFactory: the loaded
keystore and truststore and the ``ssl.SSLContext`` to wrap sockets with.

    keystore    ssl.keystore.type=PEM and ssl.keystore.location (private key and certificate chain
                in one file), or inline ssl.keystore.key + ssl.keystore.certificate.chain;
                ssl.key.password for an encrypted key. ssl.keystore.type=PKCS12 with
                ssl.keystore.location and ssl.keystore.password.
    truststore  ssl.truststore.type=PEM and ssl.truststore.location, or inline
                ssl.truststore.certificates; PKCS12 with ssl.truststore.location (and password).
    protocols   ssl.enabled.protocols (TLSv1.2,TLSv1.3) -> minimum_version/maximum_version;
                ssl.protocol=TLSv1.2 keeps a client at TLS 1.2, as it does a Java client.
    ciphers     ssl.cipher.suites: IANA names (Kafka's, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) or
                OpenSSL ones (ECDHE-RSA-AES128-GCM-SHA256).
    server      ssl.client.auth none|requested|required -> CERT_NONE|CERT_OPTIONAL|CERT_REQUIRED.
    client      ssl.endpoint.identification.algorithm https (default) -> check_hostname; empty -> off.

Every fault in the config is one SslConfigError, its message one line that starts with the key to
fix. reconfigure() is SslFactory.reconfigure: a new factory when the config or a store file changed,
refused when the new keystore names another subject or drops a subject alternative name
(validate_keystore_update, SslFactory.CertificateEntries.ensureCompatible) unless
ssl.allow.dn.changes / ssl.allow.san.changes allow it, and, for the inter-broker listener, when the
old and new stores cannot complete a handshake with each other (SslEngineValidator).

Where this differs from Kafka: JKS keystores are refused (PEM and PKCS12 are read, the latter with
one password for store and key, ssl.keystore.password); TLS 1.0 and 1.1 are refused rather than
left to the JVM's disabled list; an unknown ssl.client.auth is an error, not a warning and NONE.
Python's ssl module cannot choose among TLS 1.3 suites, so ssl.cipher.suites decides only whether
TLS 1.3 is used at all (a list without a TLS 1.3 suite means TLS 1.2 only, as in Java) and which
TLS 1.2 suites are. With no truststore the system's CAs are trusted (Java: its cacerts).
ssl.provider and ssl.engine.factory.class are refused when set; the key and trust manager
algorithms and ssl.secure.random.implementation have no Python counterpart and are ignored.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from odradek.security.ssl_principal_mapper import rfc2253_name

Side = Literal["server", "client"]
SERVER: Side = "server"
CLIENT: Side = "client"

PROTOCOL = "ssl.protocol"
ENABLED_PROTOCOLS = "ssl.enabled.protocols"
CIPHER_SUITES = "ssl.cipher.suites"
KEYSTORE_TYPE = "ssl.keystore.type"
KEYSTORE_LOCATION = "ssl.keystore.location"
KEYSTORE_PASSWORD = "ssl.keystore.password"
KEYSTORE_KEY = "ssl.keystore.key"
KEYSTORE_CHAIN = "ssl.keystore.certificate.chain"
KEY_PASSWORD = "ssl.key.password"
TRUSTSTORE_TYPE = "ssl.truststore.type"
TRUSTSTORE_LOCATION = "ssl.truststore.location"
TRUSTSTORE_PASSWORD = "ssl.truststore.password"
TRUSTSTORE_CERTIFICATES = "ssl.truststore.certificates"
CLIENT_AUTH = "ssl.client.auth"
ENDPOINT_IDENTIFICATION = "ssl.endpoint.identification.algorithm"
ALLOW_DN_CHANGES = "ssl.allow.dn.changes"
ALLOW_SAN_CHANGES = "ssl.allow.san.changes"
_UNSUPPORTED = ("ssl.provider", "ssl.engine.factory.class")

#: Kafka's defaults (SslConfigs, BrokerSecurityConfigs) of the keys read here
DEFAULTS: Mapping[str, str] = {
    PROTOCOL: "TLSv1.3",
    ENABLED_PROTOCOLS: "TLSv1.2,TLSv1.3",
    KEYSTORE_TYPE: "JKS",
    TRUSTSTORE_TYPE: "JKS",
    CLIENT_AUTH: "none",
    ENDPOINT_IDENTIFICATION: "https",
    ALLOW_DN_CHANGES: "false",
    ALLOW_SAN_CHANGES: "false",
}

PEM = "PEM"
PKCS12 = "PKCS12"

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_DISABLED_VERSIONS = frozenset({"TLSv1", "TLSv1.1", "SSLv3", "SSLv2", "SSLv2Hello"})
#: ssl.protocol values: SSLContext.getInstance's names for "any TLS", and the versions
_CONTEXT_PROTOCOLS = frozenset({"TLS", "SSL", "TLSv1.2", "TLSv1.3"})
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                           "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
# IANA's TLS 1.2 suite names, the parts OpenSSL spells otherwise: TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 is
# ECDHE-RSA-AES128-GCM-SHA256, TLS_RSA_WITH_AES_256_CBC_SHA is AES256-SHA, the ChaCha suites drop their hash.
_IANA_SUITE = re.compile(r"TLS_(ECDHE_ECDSA|ECDHE_RSA|DHE_RSA|RSA)_WITH_"
                         r"(AES_128_GCM|AES_256_GCM|AES_128_CBC|AES_256_CBC|AES_128_CCM|AES_256_CCM|CHACHA20_POLY1305)"
                         r"_(SHA|SHA256|SHA384)")
_OPENSSL_KEY_EXCHANGE = {"ECDHE_ECDSA": "ECDHE-ECDSA-", "ECDHE_RSA": "ECDHE-RSA-", "DHE_RSA": "DHE-RSA-", "RSA": ""}
_OPENSSL_CIPHER = {"AES_128_GCM": "AES128-GCM", "AES_256_GCM": "AES256-GCM", "AES_128_CBC": "AES128",
                   "AES_256_CBC": "AES256", "AES_128_CCM": "AES128-CCM", "AES_256_CCM": "AES256-CCM",
                   "CHACHA20_POLY1305": "CHACHA20-POLY1305"}
_PRIVATE_KEY_BLOCK = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_CERTIFICATE_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----")


class SslConfigError(ValueError):
    """A listener's ssl.* config cannot make a TLS context; ``key`` is the config key to fix and
    the message one line starting with it."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Keystore:
    """A private key and its certificate chain, the listener's own first."""

    key: PrivateKeyTypes
    chain: tuple[x509.Certificate, ...]
    source: str  # where it was read, for messages: "ssl.keystore.location=/path" or "ssl.keystore.key"

    @property
    def certificate(self) -> x509.Certificate:
        return self.chain[0]

    @property
    def not_after(self) -> datetime:
        """When the listener's certificate expires (UTC), for a warning before it does."""
        return self.certificate.not_valid_after_utc


@dataclass(frozen=True, slots=True, eq=False)
class SslEngineFactory:
    """One side's TLS setup from one config (DefaultSslEngineFactory): the context to wrap
    connections with, the stores it was made from, and the store files' modification times, which
    tell reconfigure() a file was replaced although the config still names it."""

    side: Side
    config: Mapping[str, str]
    keystore: Keystore | None
    truststore: tuple[x509.Certificate, ...] | None
    context: ssl.SSLContext
    files: tuple[tuple[str, int | None], ...] = field(default=())


# --- config values ------------------------------------------------------------------------------

def _value(config: Mapping[str, str], key: str) -> str | None:
    """The config's value of ``key``, else Kafka's default; None for unset or empty."""
    value = config.get(key, DEFAULTS.get(key))
    return value if value else None


def _list(config: Mapping[str, str], key: str) -> list[str]:
    return [item.strip() for item in (_value(config, key) or "").split(",") if item.strip()]


def _bool(config: Mapping[str, str], key: str) -> bool:
    value = (_value(config, key) or "false").strip().lower()
    if value not in ("true", "false"):
        raise SslConfigError(key, f"expected true or false, not {value!r}")
    return value == "true"


def _protocol_versions(config: Mapping[str, str], side: Side) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """The lowest and highest TLS version of ssl.enabled.protocols; without any, the version
    ssl.protocol names (both for TLS). ssl.protocol=TLSv1.2 also caps a client, as Java's
    SSLContext.getInstance("TLSv1.2") does."""
    protocol = _value(config, PROTOCOL) or "TLS"
    if protocol not in _CONTEXT_PROTOCOLS:
        reason = "is disabled as insecure" if protocol in _DISABLED_VERSIONS else "is not a known protocol"
        raise SslConfigError(PROTOCOL, f"{protocol!r} {reason} (TLSv1.2, TLSv1.3 or TLS)")
    names = _list(config, ENABLED_PROTOCOLS) or ([protocol] if protocol in _VERSIONS else list(_VERSIONS))
    for name in names:
        if name not in _VERSIONS:
            reason = "is disabled as insecure" if name in _DISABLED_VERSIONS else "is not a known protocol"
            raise SslConfigError(ENABLED_PROTOCOLS, f"{name!r} {reason} (TLSv1.2 and TLSv1.3 can be enabled)")
    versions = sorted(_VERSIONS[name] for name in names)
    highest = versions[-1]
    if side == CLIENT and protocol == "TLSv1.2":
        highest = ssl.TLSVersion.TLSv1_2
    if highest < versions[0]:
        raise SslConfigError(PROTOCOL, f"{protocol} leaves a client none of ssl.enabled.protocols {', '.join(names)}")
    return versions[0], highest


def openssl_cipher_name(name: str) -> str:
    """OpenSSL's name of a TLS 1.2 cipher suite given by its IANA name (Kafka's, as Java names
    suites); any other name is returned as it is, for OpenSSL to judge."""
    match = _IANA_SUITE.fullmatch(name)
    if match is None:
        return name
    exchange, cipher, digest = match.groups()
    suffix = "" if cipher == "CHACHA20_POLY1305" or cipher.endswith("CCM") else f"-{digest}"
    return f"{_OPENSSL_KEY_EXCHANGE[exchange]}{_OPENSSL_CIPHER[cipher]}{suffix}"


def _cipher_suites(config: Mapping[str, str]) -> tuple[str | None, bool]:
    """The OpenSSL cipher string of ssl.cipher.suites' TLS 1.2 suites (None: OpenSSL's defaults)
    and whether TLS 1.3 may be used (a list naming no TLS 1.3 suite rules it out, as in Java)."""
    names = _list(config, CIPHER_SUITES)
    if not names:
        return None, True
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls12 = []
    for name in names:
        if name in _TLS13_SUITES:
            continue
        openssl_name = openssl_cipher_name(name)
        try:
            probe.set_ciphers(openssl_name)
        except ssl.SSLError:
            raise SslConfigError(CIPHER_SUITES, f"{name!r} is not a cipher suite OpenSSL offers") from None
        tls12.append(openssl_name)
    return (":".join(tls12) if tls12 else None), len(tls12) < len(names)


def _verify_mode(config: Mapping[str, str]) -> ssl.VerifyMode:
    value = (_value(config, CLIENT_AUTH) or "none").strip().lower()
    if value not in _CLIENT_AUTH:
        raise SslConfigError(CLIENT_AUTH, f"{value!r} is not one of none, requested, required")
    return _CLIENT_AUTH[value]


def _check_hostname(config: Mapping[str, str]) -> bool:
    value = (_value(config, ENDPOINT_IDENTIFICATION) or "").strip()
    if value and value.lower() != "https":
        raise SslConfigError(ENDPOINT_IDENTIFICATION, f"{value!r} is not supported (https, or empty for none)")
    return bool(value)


# --- stores -------------------------------------------------------------------------------------

def _read(key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise SslConfigError(key, f"cannot read {path}: {e.strerror or e}") from None


def _certificates(key: str, where: str, pem: bytes) -> tuple[x509.Certificate, ...]:
    if not _CERTIFICATE_BLOCK.search(pem):
        raise SslConfigError(key, f"{where} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        return tuple(x509.load_pem_x509_certificates(pem))
    except ValueError:
        raise SslConfigError(key, f"{where} holds a PEM certificate that cannot be read") from None


def _private_key(key: str, where: str, pem: bytes, password: str | None) -> PrivateKeyTypes:
    blocks = len(_PRIVATE_KEY_BLOCK.findall(pem))
    if blocks != 1:
        found = "no PEM private key" if not blocks else f"{blocks} private keys"
        raise SslConfigError(key, f"{where} holds {found}, expected one")
    try:
        return serialization.load_pem_private_key(pem, password.encode() if password is not None else None)
    except TypeError:  # cryptography's word for a missing or needless password
        needs = "is encrypted: set ssl.key.password" if password is None else "is not encrypted: unset it"
        raise SslConfigError(KEY_PASSWORD, f"the private key of {where} {needs}") from None
    except ValueError:
        if password is not None and b"ENCRYPTED" in pem:
            raise SslConfigError(KEY_PASSWORD, f"does not decrypt the private key of {where}") from None
        raise SslConfigError(key, f"{where} holds a private key that cannot be read") from None
    except UnsupportedAlgorithm as e:
        raise SslConfigError(key, f"{where}: unsupported private key ({e})") from None


def _key_matches(private_key: PrivateKeyTypes, certificate: x509.Certificate) -> bool:
    der, info = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return private_key.public_key().public_bytes(der, info) == certificate.public_key().public_bytes(der, info)


def _keystore(key_name: str, where: str, private_key: PrivateKeyTypes,
              chain: tuple[x509.Certificate, ...]) -> Keystore:
    """A keystore whose first certificate is the key's (Java's KeyStore.setKeyEntry refuses others)."""
    if not _key_matches(private_key, chain[0]):
        raise SslConfigError(key_name, f"the private key of {where} does not match its certificate "
                                       f"{rfc2253_name(chain[0].subject.public_bytes())}")
    return Keystore(private_key, chain, where)


def _pkcs12(key: str, path: str, password: str | None) -> tuple[PrivateKeyTypes | None, list[x509.Certificate]]:
    data = _read(key, path)
    try:
        private_key, certificate, others = pkcs12.load_key_and_certificates(
            data, password.encode() if password is not None else None)
    except ValueError:
        raise SslConfigError(key, f"{path} is not a PKCS12 store, or its password is wrong") from None
    return private_key, ([certificate] if certificate is not None else []) + list(others)


def _refuse_store_type(key: str, store_type: str) -> None:
    if store_type == "JKS":
        raise SslConfigError(key, "JKS stores cannot be read here: use PEM or PKCS12 "
                                  "(keytool -importkeystore -deststoretype PKCS12 converts one)")
    if store_type not in (PEM, PKCS12):
        raise SslConfigError(key, f"unknown store type {store_type!r} (PEM or PKCS12)")


def load_keystore(config: Mapping[str, str]) -> Keystore | None:
    """The keystore the config names, None without one (a client needs one only for client
    authentication). DefaultSslEngineFactory.createKeystore's rules on which keys go together."""
    store_type = (_value(config, KEYSTORE_TYPE) or "JKS").upper()
    location, password = _value(config, KEYSTORE_LOCATION), _value(config, KEYSTORE_PASSWORD)
    inline_key, inline_chain = _value(config, KEYSTORE_KEY), _value(config, KEYSTORE_CHAIN)
    key_password = config.get(KEY_PASSWORD) or None
    if inline_key is not None or inline_chain is not None:
        if inline_key is None or inline_chain is None:
            missing = KEYSTORE_KEY if inline_key is None else KEYSTORE_CHAIN
            raise SslConfigError(missing, f"must be set with {KEYSTORE_KEY if inline_key else KEYSTORE_CHAIN}")
        if store_type != PEM:
            raise SslConfigError(KEYSTORE_TYPE, f"inline keys need type PEM, not {store_type}")
        if location is not None:
            raise SslConfigError(KEYSTORE_LOCATION, f"cannot be set together with {KEYSTORE_KEY}")
        if password is not None:
            raise SslConfigError(KEYSTORE_PASSWORD, f"is not used with PEM; the key's password is {KEY_PASSWORD}")
        chain = _certificates(KEYSTORE_CHAIN, KEYSTORE_CHAIN, inline_chain.encode())
        private_key = _private_key(KEYSTORE_KEY, KEYSTORE_KEY, inline_key.encode(), key_password)
        return _keystore(KEYSTORE_KEY, KEYSTORE_KEY, private_key, chain)
    if location is None:
        if password is not None:
            raise SslConfigError(KEYSTORE_PASSWORD, f"is set but {KEYSTORE_LOCATION} is not")
        return None
    where = f"{KEYSTORE_LOCATION}={location}"
    if store_type == PEM:
        if password is not None:
            raise SslConfigError(KEYSTORE_PASSWORD, f"is not used with PEM; the key's password is {KEY_PASSWORD}")
        pem = _read(KEYSTORE_LOCATION, location)
        chain = _certificates(KEYSTORE_LOCATION, where, pem)
        return _keystore(KEYSTORE_LOCATION, where, _private_key(KEYSTORE_LOCATION, where, pem, key_password), chain)
    _refuse_store_type(KEYSTORE_TYPE, store_type)
    if password is None:
        raise SslConfigError(KEYSTORE_PASSWORD, f"must be set for the {store_type} store {location}")
    stored_key, certificates = _pkcs12(KEYSTORE_LOCATION, location, password)
    if stored_key is None or not certificates:
        raise SslConfigError(KEYSTORE_LOCATION, f"{location} holds no private key with its certificate")
    return _keystore(KEYSTORE_LOCATION, where, stored_key, tuple(certificates))


def load_truststore(config: Mapping[str, str]) -> tuple[x509.Certificate, ...] | None:
    """The certificates the config trusts, None without a truststore (then the system's CAs are
    trusted). DefaultSslEngineFactory.createTruststore's rules on which keys go together."""
    store_type = (_value(config, TRUSTSTORE_TYPE) or "JKS").upper()
    location, password = _value(config, TRUSTSTORE_LOCATION), _value(config, TRUSTSTORE_PASSWORD)
    inline = _value(config, TRUSTSTORE_CERTIFICATES)
    if inline is not None:
        if store_type != PEM:
            raise SslConfigError(TRUSTSTORE_TYPE, f"inline certificates need type PEM, not {store_type}")
        if location is not None:
            raise SslConfigError(TRUSTSTORE_LOCATION, f"cannot be set together with {TRUSTSTORE_CERTIFICATES}")
        if password is not None:
            raise SslConfigError(TRUSTSTORE_PASSWORD, "is not used with PEM")
        return _certificates(TRUSTSTORE_CERTIFICATES, TRUSTSTORE_CERTIFICATES, inline.encode())
    if location is None:
        if password is not None:
            raise SslConfigError(TRUSTSTORE_PASSWORD, f"is set but {TRUSTSTORE_LOCATION} is not")
        return None
    if store_type == PEM:
        if password is not None:
            raise SslConfigError(TRUSTSTORE_PASSWORD, "is not used with PEM")
        pem = _read(TRUSTSTORE_LOCATION, location)
        return _certificates(TRUSTSTORE_LOCATION, f"{TRUSTSTORE_LOCATION}={location}", pem)
    _refuse_store_type(TRUSTSTORE_TYPE, store_type)
    _, certificates = _pkcs12(TRUSTSTORE_LOCATION, location, password)
    if not certificates:
        raise SslConfigError(TRUSTSTORE_LOCATION, f"{location} holds no certificate")
    return tuple(certificates)


def _pem(certificates: Iterable[x509.Certificate]) -> bytes:
    return b"".join(certificate.public_bytes(serialization.Encoding.PEM) for certificate in certificates)


def _load_keystore(context: ssl.SSLContext, keystore: Keystore) -> None:
    """Hands the key and chain to OpenSSL, which reads them only from a file: a private temporary
    one, the key in it encrypted with a password made for this call, removed at once."""
    password = secrets.token_urlsafe(24).encode()
    key = keystore.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.BestAvailableEncryption(password))
    with tempfile.TemporaryDirectory(prefix="odradek-tls-") as directory:
        path = os.path.join(directory, "keystore.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
            file.write(key + _pem(keystore.chain))
        try:
            context.load_cert_chain(path, password=password)
        except ssl.SSLError as e:
            key_name = KEYSTORE_KEY if keystore.source == KEYSTORE_KEY else KEYSTORE_LOCATION
            raise SslConfigError(key_name, f"OpenSSL refuses the key or certificate of {keystore.source} "
                                           f"({e.reason or e})") from None


# --- contexts -----------------------------------------------------------------------------------

def _context(config: Mapping[str, str], side: Side, keystore: Keystore | None,
             truststore: tuple[x509.Certificate, ...] | None, check_hostname: bool) -> ssl.SSLContext:
    minimum, maximum = _protocol_versions(config, side)
    ciphers, tls13 = _cipher_suites(config)
    if not tls13:
        maximum = min(maximum, ssl.TLSVersion.TLSv1_2)
    if ciphers is None and minimum < ssl.TLSVersion.TLSv1_3 and _list(config, CIPHER_SUITES):
        minimum = ssl.TLSVersion.TLSv1_3  # only TLS 1.3 suites listed
    if minimum > maximum:
        raise SslConfigError(CIPHER_SUITES, "names no suite of the enabled protocols")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if side == SERVER else ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version, context.maximum_version = minimum, maximum
    if ciphers is not None:
        context.set_ciphers(ciphers)
    if side == SERVER:
        context.verify_mode = _verify_mode(config)
    else:
        context.check_hostname = check_hostname
    if truststore is not None:
        context.load_verify_locations(cadata=_pem(truststore).decode("ascii"))
    elif context.verify_mode != ssl.CERT_NONE:
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH if side == SERVER else ssl.Purpose.SERVER_AUTH)
    if keystore is not None:
        _load_keystore(context, keystore)
    return context


def _modification_time(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def create_ssl_factory(config: Mapping[str, str], side: Side) -> SslEngineFactory:
    """The stores and context of one side of a listener (DefaultSslEngineFactory.configure). A
    server needs a keystore; SslConfigError names the first key at fault."""
    for key in _UNSUPPORTED:
        if config.get(key):
            raise SslConfigError(key, "is not supported: odradek builds its contexts with Python's ssl module")
    keystore = load_keystore(config)
    truststore = load_truststore(config)
    if side == SERVER and keystore is None:
        raise SslConfigError(KEYSTORE_LOCATION, f"a server needs a keystore (or {KEYSTORE_CHAIN} and {KEYSTORE_KEY})")
    context = _context(config, side, keystore, truststore, _check_hostname(config))
    files = tuple((path, _modification_time(path)) for path in
                  (_value(config, KEYSTORE_LOCATION), _value(config, TRUSTSTORE_LOCATION)) if path is not None)
    return SslEngineFactory(side, dict(config), keystore, truststore, context, files)


def server_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """A listener's server context (its ssl.* config)."""
    return create_ssl_factory(config, SERVER).context


def client_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """A client's context; wrap sockets with server_hostname set, which the host name check needs."""
    return create_ssl_factory(config, CLIENT).context


# --- certificates and their replacement --------------------------------------------------------

def certificate_fingerprint(certificate: x509.Certificate) -> str:
    """The SHA-256 fingerprint as keytool and openssl show it (AB:CD:...), for logs."""
    digest = hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def subject_dn(certificate: x509.Certificate) -> str:
    """The certificate's subject as Java's X500Principal.getName() writes it."""
    return rfc2253_name(certificate.subject.public_bytes())


def subject_alternative_names(certificate: x509.Certificate) -> frozenset[tuple[str, str]]:
    """(kind, value) of each subject alternative name (X509Certificate.getSubjectAlternativeNames
    as a set): ("DNSName", "localhost"), ("IPAddress", "127.0.0.1"), ..."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    out = set()
    for name in names:
        if isinstance(name, x509.DirectoryName):
            value = rfc2253_name(name.value.public_bytes())
        elif isinstance(name, x509.RegisteredID):
            value = name.value.dotted_string
        elif isinstance(name, x509.OtherName):
            value = f"{name.type_id.dotted_string}:{name.value.hex()}"
        else:
            value = str(name.value)
        out.add((type(name).__name__, value))
    return frozenset(out)


def _canonical_dn(name: str) -> str:
    """Near enough Java's canonical X500 name for a comparison: case and runs of spaces ignored."""
    return re.sub(r"\s+", " ", name).strip().casefold()


def validate_keystore_update(old: Keystore, new: Keystore, *, allow_dn_changes: bool = False,
                             allow_san_changes: bool = False) -> None:
    """SslFactory.CertificateEntries.ensureCompatible: a keystore replacing a running listener's
    must name the same subject (clients and ACLs know the broker by it) and keep every subject
    alternative name of the old certificate (clients reach the broker by them; new ones may be
    added). A renewal (new key, new dates, same names) passes. SslConfigError otherwise."""
    old_dn, new_dn = subject_dn(old.certificate), subject_dn(new.certificate)
    if not allow_dn_changes and _canonical_dn(old_dn) != _canonical_dn(new_dn):
        raise SslConfigError(KEYSTORE_LOCATION, f"the new keystore's DistinguishedName does not match: existing "
                                                f"{old_dn!r}, new {new_dn!r} (set {ALLOW_DN_CHANGES}=true to allow)")
    missing = subject_alternative_names(old.certificate) - subject_alternative_names(new.certificate)
    if not allow_san_changes and missing:
        names = ", ".join(f"{kind}:{value}" for kind, value in sorted(missing))
        raise SslConfigError(KEYSTORE_LOCATION, f"the new keystore's SubjectAltNames lack {names} "
                                                f"(set {ALLOW_SAN_CHANGES}=true to allow)")


def verify_handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str | None = None) -> None:
    """A handshake between the two contexts in memory (SslEngineValidator): ssl.SSLError from the
    side that refuses the other."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    sides = [(client.wrap_bio(client_in, client_out, server_hostname=server_hostname), client_out, server_in),
             (server.wrap_bio(server_in, server_out, server_side=True), server_out, client_in)]
    finished = [False, False]
    for _ in range(8):
        for index, (connection, outgoing, peer_incoming) in enumerate(sides):
            if not finished[index]:
                try:
                    connection.do_handshake()
                    finished[index] = True
                except ssl.SSLWantReadError:
                    pass
            peer_incoming.write(outgoing.read())
        if all(finished):
            return
    raise ssl.SSLError("the handshake did not finish")


def update_context(context: ssl.SSLContext, factory: SslEngineFactory) -> None:
    """Give a running listener's ``context`` the stores of ``factory`` (reconfigure's): OpenSSL
    then presents the new certificate in every handshake that starts after this; connections
    already made keep theirs. The CAs of the new truststore are added to those trusted (an
    SSLContext can trust more CAs, not fewer: a CA dropped from the truststore needs a restart)."""
    if factory.keystore is not None:
        _load_keystore(context, factory.keystore)
    if factory.truststore is not None:
        context.load_verify_locations(cadata=_pem(factory.truststore).decode("ascii"))


def _validation_contexts(factory: SslEngineFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server and a client context from one factory's stores, host names unchecked, as
    SslEngineValidator makes its engines."""
    config, keystore, truststore = factory.config, factory.keystore, factory.truststore
    return _context(config, SERVER, keystore, truststore, False), _context(config, CLIENT, keystore, truststore, False)


def should_be_rebuilt(factory: SslEngineFactory, config: Mapping[str, str]) -> bool:
    """DefaultSslEngineFactory.shouldBeRebuilt: the config changed, or a store file it names was
    replaced (certificates renewed in place)."""
    if dict(config) != dict(factory.config):
        return True
    return any(_modification_time(path) != modified for path, modified in factory.files)


def reconfigure(factory: SslEngineFactory, config: Mapping[str, str], *,
                verify_with_truststore: bool = False) -> SslEngineFactory:
    """The factory for a listener's changed config (SslFactory.reconfigure), ``factory`` itself
    when nothing changed. Refused (SslConfigError) when the keystore would be added or removed, a
    truststore added, the new certificate fails validate_keystore_update, or, with
    ``verify_with_truststore`` (Kafka does it for the inter-broker listener, whose brokers check
    each other with these stores), when old and new stores cannot complete a handshake either way."""
    if not should_be_rebuilt(factory, config):
        return factory
    new = create_ssl_factory(config, factory.side)
    if (factory.keystore is None) != (new.keystore is None):
        change = "add a keystore to" if factory.keystore is None else "remove the keystore of"
        raise SslConfigError(KEYSTORE_LOCATION, f"cannot {change} a running listener")
    if factory.keystore is not None and new.keystore is not None:
        validate_keystore_update(factory.keystore, new.keystore, allow_dn_changes=_bool(config, ALLOW_DN_CHANGES),
                                 allow_san_changes=_bool(config, ALLOW_SAN_CHANGES))
    if factory.truststore is None and new.truststore is not None:
        raise SslConfigError(TRUSTSTORE_LOCATION, "cannot add a truststore to a running listener that has none")
    if verify_with_truststore and (factory.keystore is not None or factory.truststore is not None):
        (old_server, old_client), (new_server, new_client) = _validation_contexts(factory), _validation_contexts(new)
        try:
            verify_handshake(old_server, new_client)
            verify_handshake(new_server, old_client)
        except ssl.SSLError as e:
            raise SslConfigError(KEYSTORE_LOCATION, f"the old and new stores cannot complete a handshake with each "
                                                    f"other ({e.reason or e})") from None
    return new
