"""TLS contexts from Kafka's ssl.* configs, tried in real handshakes on loopback with certificates
from the local CA: protocols, client authentication and the principal it gives, the client's
checks of the broker's certificate, config faults, and certificate replacement."""
from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import ssl
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from odradek.security import local_ca
from odradek.security import ssl_factory as sf
from odradek.security.ssl_factory import CLIENT, SERVER, SslConfigError
from odradek.security.ssl_principal_mapper import SslPrincipalMapper, certificate_dn, peer_principal

HOSTS = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class Pki:
    """A CA with the certificates the tests need, as files."""

    directory: Path
    ca: local_ca.CertificateAuthority
    ca_file: Path
    broker: local_ca.CertificateFiles
    client: local_ca.CertificateFiles
    expired: local_ca.CertificateFiles
    wrong_san: local_ca.CertificateFiles
    other_ca_file: Path  # a CA nobody trusts
    stranger: local_ca.CertificateFiles  # a broker certificate that CA signed


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = local_ca.create_ca()
    other = local_ca.create_ca("another CA")
    other_dir = directory / "other"

    def write(issued: local_ca.IssuedCertificate, name: str, where: Path = directory) -> local_ca.CertificateFiles:
        return local_ca.write_certificate(issued, where, name)

    return Pki(
        directory=directory,
        ca=ca,
        ca_file=local_ca.write_ca(ca, directory),
        broker=write(local_ca.issue(ca, "broker", HOSTS), "broker"),
        client=write(local_ca.issue(ca, "client"), "client"),
        expired=write(local_ca.expired_certificate(ca, "broker", HOSTS), "expired"),
        wrong_san=write(local_ca.wrong_san_certificate(ca, "broker"), "wrong-san"),
        other_ca_file=local_ca.write_ca(other, other_dir),
        stranger=write(local_ca.issue(other, "broker", HOSTS), "stranger", other_dir),
    )


def server_config(pki: Pki, keystore: Path | None = None, **extra: str) -> dict[str, str]:
    """A listener's config; ``extra`` keys with _ for dots (client_auth=... is ssl.client.auth)."""
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore or pki.broker.keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
            **{"ssl." + key.replace("_", "."): value for key, value in extra.items()}}


def client_config(pki: Pki, keystore: Path | None = None, truststore: Path | None = None,
                  **extra: str) -> dict[str, str]:
    config = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(truststore or pki.ca_file),
              **{"ssl." + key.replace("_", "."): value for key, value in extra.items()}}
    if keystore is not None:
        config.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)})
    return config


@dataclass
class Outcome:
    server_error: OSError | None = None
    client_error: OSError | None = None
    version: str | None = None
    cipher: str | None = None
    principal: str | None = None
    peer_subject: object = None  # the client's view of the broker's subject, getpeercert()'s tuple

    @property
    def ok(self) -> bool:
        return self.server_error is None and self.client_error is None


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, host: str = "localhost",
              mapper: SslPrincipalMapper | None = None) -> Outcome:
    """One connection over loopback TCP, the server in a thread: the server names the client's
    principal and answers "ok", which the client reads (a client certificate refused in TLS 1.3
    shows only then, after the client's side of the handshake finished)."""
    outcome = Outcome()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)

        def serve() -> None:
            try:
                connection, _ = listener.accept()
                connection.settimeout(10)
                with server.wrap_socket(connection, server_side=True) as tls:
                    outcome.principal = peer_principal(tls, mapper or SslPrincipalMapper())
                    tls.sendall(b"ok")
            except OSError as e:
                outcome.server_error = e

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=10) as raw, \
                    client.wrap_socket(raw, server_hostname=host) as tls:
                outcome.version, outcome.cipher = tls.version(), (tls.cipher() or ("",))[0]
                outcome.peer_subject = tls.getpeercert().get("subject") if client.verify_mode else None
                if tls.recv(2) != b"ok":
                    raise ConnectionError("the server closed the connection")
        except OSError as e:
            outcome.client_error = e
        finally:
            thread.join(10)
    return outcome


def contexts(server: Mapping[str, str], client: Mapping[str, str]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    return sf.server_context(server), sf.client_context(client)


# --- protocols ---------------------------------------------------------------------------------

def test_tls13_by_default(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki), client_config(pki)))
    assert outcome.ok and outcome.version == "TLSv1.3"
    assert outcome.principal == "User:ANONYMOUS"  # ssl.client.auth=none by default


def test_tls12_when_the_client_enables_only_it(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki), client_config(pki, enabled_protocols="TLSv1.2")))
    assert outcome.ok and outcome.version == "TLSv1.2"


def test_ssl_protocol_tls12_keeps_a_client_at_tls12(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki), client_config(pki, protocol="TLSv1.2")))
    assert outcome.ok and outcome.version == "TLSv1.2"


def test_a_tls13_only_server_refuses_a_tls12_client(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki, enabled_protocols="TLSv1.3"),
                                  client_config(pki, enabled_protocols="TLSv1.2")))
    assert isinstance(outcome.server_error, ssl.SSLError) and isinstance(outcome.client_error, ssl.SSLError)


def test_a_tls11_client_is_refused(pki: Pki) -> None:
    legacy = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        legacy.minimum_version = ssl.TLSVersion.TLSv1
        legacy.maximum_version = ssl.TLSVersion.TLSv1_1
    legacy.set_ciphers("DEFAULT:@SECLEVEL=0")  # so that it is our server, not the client's OpenSSL, refusing
    legacy.load_verify_locations(pki.ca_file)
    outcome = handshake(sf.server_context(server_config(pki)), legacy)
    assert isinstance(outcome.server_error, ssl.SSLError)
    assert "UNSUPPORTED_PROTOCOL" in str(outcome.server_error)
    assert outcome.client_error is not None


def test_iana_cipher_suite_names(pki: Pki) -> None:
    assert sf.openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256") == "ECDHE-ECDSA-AES128-GCM-SHA256"
    assert sf.openssl_cipher_name("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"
    assert sf.openssl_cipher_name("TLS_RSA_WITH_AES_256_CBC_SHA") == "AES256-SHA"
    assert sf.openssl_cipher_name("TLS_DHE_RSA_WITH_AES_256_CBC_SHA256") == "DHE-RSA-AES256-SHA256"
    assert sf.openssl_cipher_name("ECDHE-RSA-AES128-SHA") == "ECDHE-RSA-AES128-SHA"
    outcome = handshake(*contexts(server_config(pki, cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
                                  client_config(pki)))
    # no TLS 1.3 suite listed: TLS 1.2 only, as in Java
    assert outcome.ok and (outcome.version, outcome.cipher) == ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")


def test_only_tls13_suites_mean_tls13_only(pki: Pki) -> None:
    server = sf.server_context(server_config(pki, cipher_suites="TLS_AES_128_GCM_SHA256"))
    assert handshake(server, sf.client_context(client_config(pki))).version == "TLSv1.3"
    assert not handshake(server, sf.client_context(client_config(pki, enabled_protocols="TLSv1.2"))).ok


# --- client authentication and principals -------------------------------------------------------

def test_client_auth_required_refuses_a_client_without_certificate(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki, client_auth="required"), client_config(pki)))
    assert isinstance(outcome.server_error, ssl.SSLError)
    assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in str(outcome.server_error)
    assert outcome.client_error is not None and outcome.principal is None


def test_client_auth_requested_without_certificate_is_anonymous(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki, client_auth="requested"), client_config(pki)))
    assert outcome.ok and outcome.principal == "User:ANONYMOUS"


@pytest.mark.parametrize("client_auth", ["requested", "required"])
def test_client_certificate_gives_the_principal(pki: Pki, client_auth: str) -> None:
    server, client = contexts(server_config(pki, client_auth=client_auth), client_config(pki, pki.client.keystore))
    assert handshake(server, client).principal == "User:CN=client,O=odradek"
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+),O=odradek$/$1/U,DEFAULT")
    assert handshake(server, client, mapper=mapper).principal == "User:CLIENT"


def test_a_client_certificate_of_an_untrusted_ca_is_refused(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki, client_auth="requested"),
                                  client_config(pki, pki.stranger.keystore)))
    assert isinstance(outcome.server_error, ssl.SSLError) and "certificate verify failed" in str(outcome.server_error)


def test_without_client_auth_a_client_certificate_is_not_asked_for(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki), client_config(pki, pki.client.keystore)))
    assert outcome.ok and outcome.principal == "User:ANONYMOUS"


def test_asyncio_server_and_client(pki: Pki) -> None:
    """The broker's way: asyncio streams, the principal from the transport's ssl_object; the RFC
    2253 name is getpeercert()'s subject tuple read from the end."""
    server = sf.server_context(server_config(pki, client_auth="required"))
    client = sf.client_context(client_config(pki, pki.client.keystore))
    seen: dict[str, object] = {}

    async def run() -> bytes:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen["principal"] = peer_principal(writer.get_extra_info("ssl_object"), SslPrincipalMapper())
            seen["subject"] = writer.get_extra_info("peercert")["subject"]
            writer.write(await reader.readexactly(4))
            await writer.drain()
            writer.close()

        listener = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
        async with listener:
            port = listener.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
            writer.write(b"ping")
            answer = await asyncio.wait_for(reader.readexactly(4), 10)
            writer.close()
            await writer.wait_closed()
            return answer

    assert asyncio.run(run()) == b"ping"
    assert seen["principal"] == "User:CN=client,O=odradek"
    assert seen["subject"] == ((("organizationName", "odradek"),), (("commonName", "client"),))
    der = x509.load_pem_x509_certificate(pki.client.certificate.read_bytes()).public_bytes(serialization.Encoding.DER)
    assert certificate_dn(der) == "CN=client,O=odradek"


# --- the client's checks of the broker's certificate --------------------------------------------

@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_host_names_and_addresses_are_checked_against_the_sans(pki: Pki, host: str) -> None:
    outcome = handshake(*contexts(server_config(pki), client_config(pki)), host=host)
    assert outcome.ok
    assert outcome.peer_subject == ((("organizationName", "odradek"),), (("commonName", "broker"),))


def test_a_wrong_san_is_refused(pki: Pki) -> None:
    server = sf.server_context(server_config(pki, pki.wrong_san.keystore))
    outcome = handshake(server, sf.client_context(client_config(pki)))
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)
    assert "Hostname mismatch" in str(outcome.client_error)
    outcome = handshake(server, sf.client_context(client_config(pki)), host="127.0.0.1")
    assert "IP address mismatch" in str(outcome.client_error)


def test_endpoint_identification_off_accepts_a_wrong_san(pki: Pki) -> None:
    server = sf.server_context(server_config(pki, pki.wrong_san.keystore))
    client = sf.client_context({**client_config(pki), "ssl.endpoint.identification.algorithm": ""})
    assert handshake(server, client).ok


def test_a_broker_of_an_untrusted_ca_is_refused(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki, pki.stranger.keystore), client_config(pki)))
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)
    assert "self-signed certificate in certificate chain" in str(outcome.client_error)  # the chain ends in its CA


def test_an_expired_broker_certificate_is_refused(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki, pki.expired.keystore), client_config(pki)))
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)
    assert "certificate has expired" in str(outcome.client_error)


def test_an_expired_client_certificate_is_refused(pki: Pki) -> None:
    outcome = handshake(*contexts(server_config(pki, client_auth="required"),
                                  client_config(pki, pki.expired.keystore)))
    assert isinstance(outcome.server_error, ssl.SSLError) and "certificate verify failed" in str(outcome.server_error)


# --- other store forms --------------------------------------------------------------------------

def test_inline_pem_stores_and_an_encrypted_key(pki: Pki) -> None:
    issued = local_ca.issue(pki.ca, "broker", HOSTS)
    server = {"ssl.keystore.type": "PEM", "ssl.keystore.key": issued.key_pem("pw").decode(),
              "ssl.keystore.certificate.chain": issued.chain_pem().decode(), "ssl.key.password": "pw",
              "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pki.ca_file.read_text()}
    client = {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": pki.ca_file.read_text()}
    assert handshake(*contexts(server, client)).ok
    files = local_ca.write_certificate(issued, pki.directory / "encrypted", "broker", password="pw")
    assert handshake(*contexts({**server_config(pki, files.keystore), "ssl.key.password": "pw"}, client)).ok


def test_pkcs12_stores(pki: Pki, tmp_path: Path) -> None:
    issued = local_ca.issue(pki.ca, "broker", HOSTS)
    keystore, truststore = tmp_path / "broker.p12", tmp_path / "trust.p12"
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"kafka", issued.key, issued.certificate, [pki.ca.certificate], serialization.BestAvailableEncryption(b"pw")))
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [pki.ca.certificate], serialization.BestAvailableEncryption(b"tpw")))
    server = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore), "ssl.keystore.password": "pw"}
    client = {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(truststore),
              "ssl.truststore.password": "tpw"}
    assert handshake(*contexts(server, client)).ok
    with pytest.raises(SslConfigError, match=r"^ssl.keystore.location: .* or its password is wrong$"):
        sf.server_context({**server, "ssl.keystore.password": "wrong"})


# --- config faults -----------------------------------------------------------------------------

def _garbage(pki: Pki) -> Path:
    path = pki.directory / "garbage.pem"
    path.write_text("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n"
                    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    return path


def _mismatched(pki: Pki) -> Path:
    """The broker's certificate with the client's key."""
    path = pki.directory / "mismatched.pem"
    key = pki.client.key.read_bytes()
    path.write_bytes(key + pki.broker.certificate.read_bytes())
    return path


@pytest.mark.parametrize(("change", "key", "words"), [
    (lambda pki: {"ssl.keystore.location": str(pki.directory / "missing.pem")}, "ssl.keystore.location",
     "cannot read .*missing.pem: No such file or directory"),
    (lambda pki: {"ssl.keystore.location": str(_mismatched(pki))}, "ssl.keystore.location",
     "does not match its certificate CN=broker,O=odradek"),
    (lambda pki: {"ssl.keystore.location": str(_garbage(pki))}, "ssl.keystore.location", "cannot be read"),
    (lambda pki: {"ssl.keystore.location": str(pki.broker.certificate)}, "ssl.keystore.location",
     "holds no PEM private key"),
    (lambda pki: {"ssl.truststore.location": str(pki.broker.key)}, "ssl.truststore.location",
     "holds no PEM certificate"),
    (lambda pki: {"ssl.enabled.protocols": "TLSv1.2,TLSv9"}, "ssl.enabled.protocols", "'TLSv9' is not a known"),
    (lambda pki: {"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols", "disabled as insecure"),
    (lambda pki: {"ssl.protocol": "QUIC"}, "ssl.protocol", "'QUIC' is not a known protocol"),
    (lambda pki: {"ssl.cipher.suites": "TLS_NO_SUCH_SUITE"}, "ssl.cipher.suites", "not a cipher suite"),
    (lambda pki: {"ssl.client.auth": "sometimes"}, "ssl.client.auth", "not one of none, requested, required"),
    (lambda pki: {"ssl.keystore.type": "JKS"}, "ssl.keystore.type", "JKS stores cannot be read here"),
    (lambda pki: {"ssl.keystore.type": "BKS"}, "ssl.keystore.type", "unknown store type"),
    (lambda pki: {"ssl.keystore.password": "x"}, "ssl.keystore.password", "not used with PEM"),
    (lambda pki: {"ssl.key.password": "x"}, "ssl.key.password", "is not encrypted"),
    (lambda pki: {"ssl.keystore.location": ""}, "ssl.keystore.location", "a server needs a keystore"),
    (lambda pki: {"ssl.keystore.key": "x"}, "ssl.keystore.certificate.chain", "must be set with"),
    (lambda pki: {"ssl.provider": "BC"}, "ssl.provider", "not supported"),
])
def test_config_faults_name_the_key(pki: Pki, change: Callable[[Pki], dict[str, str]], key: str, words: str) -> None:
    with pytest.raises(SslConfigError) as caught:
        sf.server_context({**server_config(pki), **change(pki)})
    assert caught.value.key == key
    message = str(caught.value)
    assert message.startswith(f"{key}: ") and "\n" not in message
    assert re.search(words, message), message


def test_encrypted_key_faults(pki: Pki) -> None:
    files = local_ca.write_certificate(local_ca.issue(pki.ca, "broker", HOSTS), pki.directory / "enc", "b",
                                       password="right")
    with pytest.raises(SslConfigError, match="^ssl.key.password: .* is encrypted: set ssl.key.password$"):
        sf.server_context(server_config(pki, files.keystore))
    with pytest.raises(SslConfigError, match="^ssl.key.password: does not decrypt"):
        sf.server_context({**server_config(pki, files.keystore), "ssl.key.password": "wrong"})


def test_endpoint_identification_values(pki: Pki) -> None:
    assert sf.client_context({**client_config(pki), "ssl.endpoint.identification.algorithm": "HTTPS"}).check_hostname
    assert sf.client_context(client_config(pki)).check_hostname
    with pytest.raises(SslConfigError, match="^ssl.endpoint.identification.algorithm: 'ldaps' is not supported"):
        sf.client_context({**client_config(pki), "ssl.endpoint.identification.algorithm": "ldaps"})


def test_context_settings() -> None:
    """What each side's context is set to, without a handshake."""
    ca = local_ca.create_ca()
    issued = local_ca.issue(ca, "broker", HOSTS)
    config = {"ssl.keystore.type": "PEM", "ssl.keystore.key": issued.key_pem().decode(),
              "ssl.keystore.certificate.chain": issued.chain_pem().decode(), "ssl.truststore.type": "PEM",
              "ssl.truststore.certificates": ca.certificate_pem().decode()}
    for client_auth, mode in [("none", ssl.CERT_NONE), ("requested", ssl.CERT_OPTIONAL),
                              ("required", ssl.CERT_REQUIRED)]:
        assert sf.server_context({**config, "ssl.client.auth": client_auth}).verify_mode == mode
    server = sf.create_ssl_factory(config, SERVER)
    assert (server.context.minimum_version, server.context.maximum_version) == (ssl.TLSVersion.TLSv1_2,
                                                                               ssl.TLSVersion.TLSv1_3)
    assert server.keystore is not None and server.keystore.not_after == issued.certificate.not_valid_after_utc
    client = sf.create_ssl_factory({**config, "ssl.client.auth": "required"}, CLIENT)
    assert client.context.verify_mode == ssl.CERT_REQUIRED and client.context.check_hostname


# --- replacing certificates --------------------------------------------------------------------

def test_validate_keystore_update() -> None:
    ca = local_ca.create_ca()

    def keystore(name: str, hosts: tuple[str, ...]) -> sf.Keystore:
        issued = local_ca.issue(ca, name, hosts)
        return sf.Keystore(issued.key, issued.chain, "test")

    old = keystore("broker", HOSTS)
    sf.validate_keystore_update(old, keystore("broker", HOSTS))  # a renewal: new key, same names
    sf.validate_keystore_update(old, keystore("broker", (*HOSTS, "broker.example")))  # a name added
    with pytest.raises(SslConfigError, match=r"DistinguishedName does not match: existing 'CN=broker,O=odradek', "
                                             r"new 'CN=other,O=odradek' \(set ssl.allow.dn.changes=true"):
        sf.validate_keystore_update(old, keystore("other", HOSTS))
    with pytest.raises(SslConfigError, match=r"SubjectAltNames lack IPAddress:127.0.0.1 \(set ssl.allow.san"):
        sf.validate_keystore_update(old, keystore("broker", ("localhost",)))
    sf.validate_keystore_update(old, keystore("other", HOSTS), allow_dn_changes=True)
    sf.validate_keystore_update(old, keystore("broker", ("localhost",)), allow_san_changes=True)
    sf.validate_keystore_update(old, keystore("BROKER", HOSTS))  # names compare without case, as in Kafka


def _rewrite(path: Path, data: bytes) -> None:
    """Replaces a store file so that its modification time surely changes."""
    before = path.stat().st_mtime_ns
    local_ca.write_pem(path, data, private=True)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def test_reconfigure_renews_in_place_and_refuses_another_name(tmp_path: Path) -> None:
    ca = local_ca.create_ca()
    ca_file = local_ca.write_ca(ca, tmp_path)
    files = local_ca.write_certificate(local_ca.issue(ca, "broker", HOSTS), tmp_path, "broker")
    config = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.keystore),
              "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_file)}
    factory = sf.create_ssl_factory(config, SERVER)
    assert sf.reconfigure(factory, dict(config)) is factory  # nothing changed

    renewal = local_ca.issue(ca, "broker", HOSTS)
    _rewrite(files.keystore, renewal.keystore_pem())
    assert sf.should_be_rebuilt(factory, config)
    renewed = sf.reconfigure(factory, config, verify_with_truststore=True)
    assert renewed is not factory and renewed.keystore is not None
    assert sf.certificate_fingerprint(renewed.keystore.certificate) == sf.certificate_fingerprint(renewal.certificate)

    _rewrite(files.keystore, local_ca.issue(ca, "intruder", HOSTS).keystore_pem())
    with pytest.raises(SslConfigError, match="^ssl.keystore.location: the new keystore's DistinguishedName"):
        sf.reconfigure(renewed, config)
    assert sf.reconfigure(renewed, {**config, "ssl.allow.dn.changes": "true"}).keystore is not None


def test_reconfigure_refuses_stores_that_cannot_talk_to_the_old_ones(tmp_path: Path) -> None:
    """The inter-broker listener's check: a certificate of a CA the old truststore does not know
    would cut the brokers that have not been reconfigured yet off."""
    ca, other = local_ca.create_ca(), local_ca.create_ca("another CA")
    ca_file = local_ca.write_ca(ca, tmp_path)
    keystore = local_ca.write_certificate(local_ca.issue(ca, "broker", HOSTS), tmp_path, "broker").keystore
    config = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore), "ssl.truststore.type": "PEM",
              "ssl.truststore.location": str(ca_file), "ssl.client.auth": "required"}
    factory = sf.create_ssl_factory(config, SERVER)
    _rewrite(keystore, local_ca.issue(other, "broker", HOSTS).keystore_pem())
    assert sf.reconfigure(factory, config).keystore is not None  # an ordinary listener takes it
    with pytest.raises(SslConfigError, match="^ssl.keystore.location: the old and new stores cannot complete"):
        sf.reconfigure(factory, config, verify_with_truststore=True)


def test_reconfigure_refuses_adding_or_removing_stores(pki: Pki) -> None:
    client = sf.create_ssl_factory(client_config(pki), CLIENT)
    with pytest.raises(SslConfigError, match="^ssl.keystore.location: cannot add a keystore"):
        sf.reconfigure(client, client_config(pki, pki.client.keystore))
    with_keystore = sf.create_ssl_factory(client_config(pki, pki.client.keystore), CLIENT)
    with pytest.raises(SslConfigError, match="^ssl.keystore.location: cannot remove the keystore"):
        sf.reconfigure(with_keystore, client_config(pki))
    no_truststore = sf.create_ssl_factory({}, CLIENT)
    with pytest.raises(SslConfigError, match="^ssl.truststore.location: cannot add a truststore"):
        sf.reconfigure(no_truststore, client_config(pki))


# --- a real Kafka client ------------------------------------------------------------------------

@dataclass
class Dialled:
    principal: str | None = None
    request: bytes = b""
    server_error: OSError | None = None


def _librdkafka_dials(server: ssl.SSLContext, config: Mapping[str, str]) -> Dialled:
    """librdkafka (confluent-kafka) dialling a bare TLS listener, no broker behind it: the server
    side finishes the handshake and reads the start of the client's first request, which
    librdkafka sends only after it accepted the certificate. The producer is never polled, so its
    connection errors stay in librdkafka."""
    import confluent_kafka

    dialled = Dialled()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        port = listener.getsockname()[1]
        producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{port}", **config,
                                             "logger": logging.getLogger("test-tls-librdkafka")})
        try:
            connection, _ = listener.accept()
            connection.settimeout(10)
            with server.wrap_socket(connection, server_side=True) as tls:
                dialled.principal = peer_principal(tls, SslPrincipalMapper())
                dialled.request = tls.recv(6)
        except OSError as e:
            dialled.server_error = e
        finally:
            del producer
    return dialled


def test_librdkafka_accepts_the_local_ca_certificates(tmp_path: Path) -> None:
    local = local_ca.create_local_certificates(tmp_path, HOSTS)
    dialled = _librdkafka_dials(sf.server_context(local.listener_config(client_auth="required")),
                                local.librdkafka_config())
    assert dialled.server_error is None, dialled.server_error
    assert dialled.principal == "User:CN=client,O=odradek"
    assert dialled.request[4:6] == b"\x00\x12"  # the size, then ApiVersions' api key, 18


def test_librdkafka_refuses_a_wrong_san(pki: Pki) -> None:
    server = sf.server_context(server_config(pki, pki.wrong_san.keystore))
    dialled = _librdkafka_dials(server, {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)})
    assert isinstance(dialled.server_error, ssl.SSLError), dialled
    assert dialled.request == b""
