"""A certificate authority of one's own for a local cluster (``odradek up --secure``): its key and
self-signed certificate, and broker and client certificates it signs, written as PEM files that
Kafka's PEM keystore and truststore configs, librdkafka (ssl.ca.location, ssl.certificate.location,
ssl.key.location) and Python's ssl module all read.

Kafka has no such code: its documentation ("Encryption and Authentication using SSL") does the
same by hand with keytool and openssl. The choices made here:

- EC P-256 keys and ECDSA-SHA256 signatures: quick to make, accepted by every TLS 1.2 and 1.3 peer.
- Keys in PKCS#8, the only form Kafka's PEM keystore reads, in files of mode 0600.
- Subjects "CN=<name>,O=odradek" in RFC 2253 order, which is what ssl.principal.mapping.rules see.
- Leaf certificates name every host they serve as subject alternative names, DNS names and IP
  addresses apart (a client checks the address it dialled against the IP names); they are usable
  for both server and client authentication, so one certificate serves a broker's listener and
  its inter-broker connections.
- Validity starts a few minutes back (clocks differ a little) and no leaf outlives its CA.

Tests need certificates that must fail: expired_certificate() and wrong_san_certificate().
"""
from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORGANIZATION = "odradek"
CA_COMMON_NAME = "odradek local CA"
#: what a local cluster is reached by unless told more (the machine's host name is added by the caller)
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
CA_DAYS = 3650
LEAF_DAYS = 825  # the longest validity browsers and Apple's TLS stack still accept
_CLOCK_SKEW = timedelta(minutes=5)

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(timezone.utc)


def _name(common_name: str) -> x509.Name:
    """O first and CN last in the certificate, so the RFC 2253 form reads "CN=<name>,O=odradek"."""
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _certificate_pem(certificates: Iterable[x509.Certificate]) -> bytes:
    return b"".join(certificate.public_bytes(serialization.Encoding.PEM) for certificate in certificates)


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    """A key and the certificate the CA made for it; ``chain`` is the certificate then the CA's."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...]

    def key_pem(self, password: str | None = None) -> bytes:
        """The key in PKCS#8 PEM, encrypted when a password is given (Kafka's ssl.key.password)."""
        return _key_pem(self.key, password)

    def chain_pem(self) -> bytes:
        return _certificate_pem(self.chain)

    def keystore_pem(self, password: str | None = None) -> bytes:
        """Kafka's PEM keystore file (ssl.keystore.type=PEM, ssl.keystore.location): the key, then
        the chain."""
        return self.key_pem(password) + self.chain_pem()


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    def certificate_pem(self) -> bytes:
        """The truststore every broker and client is given (ssl.truststore.location, ssl.ca.location)."""
        return _certificate_pem([self.certificate])


def create_ca(common_name: str = CA_COMMON_NAME, *, days: int = CA_DAYS,
              now: datetime | None = None) -> CertificateAuthority:
    """A new CA: a key and a self-signed certificate allowed to sign leaf certificates only."""
    key = _new_key()
    start = _now(now) - _CLOCK_SKEW
    identifier = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(identifier, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(identifier), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(key, certificate)


def subject_alternative_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    """Host names as DNS names and addresses as IP names ("127.0.0.1", "::1"): a client dialling
    an address checks it against the IP names only."""
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def issue(ca: CertificateAuthority, common_name: str, hosts: Iterable[str] = (), *, days: int = LEAF_DAYS,
          now: datetime | None = None, not_before: datetime | None = None,
          not_after: datetime | None = None) -> IssuedCertificate:
    """A new key and a certificate for it signed by ``ca``, for server and client authentication,
    naming ``hosts`` as subject alternative names. The validity is ``days`` from a few minutes
    ago, cut at the CA's end, unless ``not_before``/``not_after`` are given (tests)."""
    key = _new_key()
    start = not_before if not_before is not None else _now(now) - _CLOCK_SKEW
    end = not_after if not_after is not None else min(start + timedelta(days=days), ca.certificate.not_valid_after_utc)
    ca_identifier = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_identifier), critical=False)
    )
    alternative_names = subject_alternative_names(hosts)
    if alternative_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
    certificate = builder.sign(ca.key, hashes.SHA256())
    return IssuedCertificate(key, certificate, (certificate, ca.certificate))


def expired_certificate(ca: CertificateAuthority, common_name: str, hosts: Iterable[str] = DEFAULT_HOSTS, *,
                        now: datetime | None = None) -> IssuedCertificate:
    """A certificate valid for a month that ended yesterday, otherwise like issue()'s: a peer must
    refuse it."""
    end = _now(now) - timedelta(days=1)
    return issue(ca, common_name, hosts, not_before=end - timedelta(days=30), not_after=end)


def wrong_san_certificate(ca: CertificateAuthority, common_name: str,
                          hosts: Iterable[str] = ("wrong.invalid", "192.0.2.1")) -> IssuedCertificate:
    """A valid certificate naming only hosts a local client never dials (an .invalid name and a
    documentation address): a client checking host names must refuse it."""
    return issue(ca, common_name, hosts)


# --- files --------------------------------------------------------------------------------------

def write_pem(path: Path, data: bytes, *, private: bool) -> Path:
    """Writes ``data`` to ``path`` whole or not at all (a broker re-reading its keystore never sees
    half a file): a temporary file beside it, mode 0600 for a private key and 0644 else, renamed
    over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    try:
        with open(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


@dataclass(frozen=True, slots=True)
class CertificateFiles:
    """Where one issued certificate was written: ``keystore`` for Kafka's PEM keystore (key and
    chain in one file), ``certificate`` and ``key`` for librdkafka and Python clients."""

    keystore: Path
    certificate: Path
    key: Path


def write_ca(ca: CertificateAuthority, directory: Path) -> Path:
    """ca.pem (the truststore) and ca-key.pem (0600); the path of ca.pem."""
    write_pem(directory / CA_KEY_FILE, _key_pem(ca.key), private=True)
    return write_pem(directory / CA_FILE, ca.certificate_pem(), private=False)


def load_ca(directory: Path) -> CertificateAuthority:
    """The CA write_ca() wrote to ``directory``; ValueError if its files do not hold one."""
    key = serialization.load_pem_private_key((directory / CA_KEY_FILE).read_bytes(), None)
    certificate = x509.load_pem_x509_certificate((directory / CA_FILE).read_bytes())
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != certificate.public_key():
        raise ValueError(f"{directory / CA_KEY_FILE} is not the EC key of {directory / CA_FILE}")
    return CertificateAuthority(key, certificate)


def load_or_create_ca(directory: Path) -> CertificateAuthority:
    """The CA kept in ``directory``, made and written there the first time: certificates issued on
    a later run stay trusted by clients given ca.pem before."""
    if (directory / CA_FILE).exists() and (directory / CA_KEY_FILE).exists():
        return load_ca(directory)
    ca = create_ca()
    write_ca(ca, directory)
    return ca


def write_certificate(issued: IssuedCertificate, directory: Path, name: str, *,
                      password: str | None = None) -> CertificateFiles:
    """<name>.keystore.pem (key and chain, 0600), <name>.pem (the chain) and <name>-key.pem (0600);
    the keys encrypted with ``password`` when one is given."""
    return CertificateFiles(
        keystore=write_pem(directory / f"{name}.keystore.pem", issued.keystore_pem(password), private=True),
        certificate=write_pem(directory / f"{name}.pem", issued.chain_pem(), private=False),
        key=write_pem(directory / f"{name}-key.pem", issued.key_pem(password), private=True),
    )


@dataclass(frozen=True, slots=True)
class LocalCertificates:
    """A local cluster's certificate files: the CA's, one for the brokers, one for clients."""

    ca_file: Path
    broker: CertificateFiles
    client: CertificateFiles

    def listener_config(self, client_auth: str = "required") -> dict[str, str]:
        """A broker listener's ssl.* config (Kafka's keys) with these files."""
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.broker.keystore),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file),
                "ssl.client.auth": client_auth}

    def client_config(self) -> dict[str, str]:
        """A Java-style client's ssl.* config with the client certificate."""
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.client.keystore),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file)}

    def librdkafka_config(self) -> Mapping[str, str]:
        """librdkafka's names for the same files (confluent-kafka, kcat)."""
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca_file),
                "ssl.certificate.location": str(self.client.certificate),
                "ssl.key.location": str(self.client.key)}


def create_local_certificates(directory: Path, hosts: Iterable[str] = DEFAULT_HOSTS, *, broker_name: str = "broker",
                              client_name: str = "client", now: datetime | None = None) -> LocalCertificates:
    """The files ``odradek up --secure`` needs in ``directory``: the CA (kept from an earlier run),
    a new broker certificate for ``hosts`` and a new client certificate (CN=<client_name>)."""
    ca = load_or_create_ca(directory)
    return LocalCertificates(
        ca_file=directory / CA_FILE,
        broker=write_certificate(issue(ca, broker_name, hosts, now=now), directory, broker_name),
        client=write_certificate(issue(ca, client_name, now=now), directory, client_name),
    )
