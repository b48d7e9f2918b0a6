"""The local CA: what it signs, for which hosts and how long, and the files it writes."""
from __future__ import annotations

import ipaddress
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from odradek.security import local_ca
from odradek.security.ssl_factory import certificate_fingerprint, subject_dn


@pytest.fixture(scope="module")
def ca() -> local_ca.CertificateAuthority:
    return local_ca.create_ca()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ca_is_a_self_signed_p256_ca(ca: local_ca.CertificateAuthority) -> None:
    certificate = ca.certificate
    assert isinstance(ca.key, ec.EllipticCurvePrivateKey) and ca.key.curve.name == "secp256r1"
    assert subject_dn(certificate) == "CN=odradek local CA,O=odradek"
    assert certificate.issuer == certificate.subject
    certificate.verify_directly_issued_by(certificate)
    constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert certificate.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert lifetime == timedelta(days=local_ca.CA_DAYS)


def test_issued_certificate_names_hosts_as_dns_and_ip(ca: local_ca.CertificateAuthority) -> None:
    issued = local_ca.issue(ca, "broker-1", ["localhost", "127.0.0.1", "::1", "node7.example", "localhost"])
    certificate = issued.certificate
    certificate.verify_directly_issued_by(ca.certificate)
    assert subject_dn(certificate) == "CN=broker-1,O=odradek"
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "node7.example"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"),
                                                         ipaddress.ip_address("::1")]
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert issued.chain == (certificate, ca.certificate)
    assert isinstance(issued.key, ec.EllipticCurvePrivateKey)


def test_issued_certificate_validity(ca: local_ca.CertificateAuthority) -> None:
    now = datetime.now(timezone.utc)
    certificate = local_ca.issue(ca, "broker", now=now).certificate
    assert certificate.not_valid_before_utc < now  # a little in the past, for clocks that differ
    assert certificate.not_valid_after_utc - certificate.not_valid_before_utc == timedelta(days=local_ca.LEAF_DAYS)
    outliving = local_ca.issue(ca, "broker", days=100 * 365).certificate
    assert outliving.not_valid_after_utc == ca.certificate.not_valid_after_utc


def test_certificate_without_hosts_has_no_san(ca: local_ca.CertificateAuthority) -> None:
    with pytest.raises(x509.ExtensionNotFound):
        local_ca.issue(ca, "client").certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_expired_and_wrong_san_certificates(ca: local_ca.CertificateAuthority) -> None:
    now = datetime.now(timezone.utc)
    expired = local_ca.expired_certificate(ca, "broker").certificate
    assert expired.not_valid_after_utc < now
    assert expired.not_valid_before_utc < expired.not_valid_after_utc
    wrong = local_ca.wrong_san_certificate(ca, "broker").certificate
    names = wrong.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" not in names.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") not in names.get_values_for_type(x509.IPAddress)
    assert wrong.not_valid_after_utc > now


def test_written_files_and_modes(ca: local_ca.CertificateAuthority, tmp_path: Path) -> None:
    ca_file = local_ca.write_ca(ca, tmp_path)
    issued = local_ca.issue(ca, "broker", ["localhost"])
    files = local_ca.write_certificate(issued, tmp_path, "broker")
    assert ca_file == tmp_path / "ca.pem" and _mode(ca_file) == 0o644
    assert _mode(tmp_path / "ca-key.pem") == 0o600
    assert (_mode(files.keystore), _mode(files.key), _mode(files.certificate)) == (0o600, 0o600, 0o644)
    keystore = files.keystore.read_bytes()
    assert keystore.index(b"BEGIN PRIVATE KEY") < keystore.index(b"BEGIN CERTIFICATE")  # PKCS#8, Kafka's form
    assert x509.load_pem_x509_certificates(keystore) == list(issued.chain)
    assert x509.load_pem_x509_certificates(files.certificate.read_bytes()) == list(issued.chain)
    key = serialization.load_pem_private_key(files.key.read_bytes(), None)
    assert key.public_key() == issued.certificate.public_key()
    assert not list(tmp_path.glob(".*.tmp"))


def test_rewriting_a_key_file_keeps_it_private(ca: local_ca.CertificateAuthority, tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    path.write_bytes(b"old")
    path.chmod(0o644)
    local_ca.write_pem(path, b"new", private=True)
    assert path.read_bytes() == b"new" and _mode(path) == 0o600


def test_encrypted_key_files(ca: local_ca.CertificateAuthority, tmp_path: Path) -> None:
    files = local_ca.write_certificate(local_ca.issue(ca, "client"), tmp_path, "client", password="s3cret")
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in files.keystore.read_bytes()
    serialization.load_pem_private_key(files.key.read_bytes(), b"s3cret")
    with pytest.raises(TypeError):
        serialization.load_pem_private_key(files.key.read_bytes(), None)


def test_the_ca_is_kept_between_runs(tmp_path: Path) -> None:
    first = local_ca.create_local_certificates(tmp_path, ["localhost", "127.0.0.1", "broker.example"])
    ca_fingerprint = certificate_fingerprint(x509.load_pem_x509_certificate(first.ca_file.read_bytes()))
    second = local_ca.create_local_certificates(tmp_path)
    assert certificate_fingerprint(x509.load_pem_x509_certificate(second.ca_file.read_bytes())) == ca_fingerprint
    ca = local_ca.load_ca(tmp_path)
    for files in (second.broker, second.client):
        x509.load_pem_x509_certificate(files.certificate.read_bytes()).verify_directly_issued_by(ca.certificate)
    assert first.listener_config()["ssl.keystore.location"] == str(tmp_path / "broker.keystore.pem")
    assert first.client_config()["ssl.truststore.location"] == str(tmp_path / "ca.pem")
    assert first.librdkafka_config()["ssl.key.location"] == str(tmp_path / "client-key.pem")


def test_load_ca_refuses_a_key_of_another_certificate(ca: local_ca.CertificateAuthority, tmp_path: Path) -> None:
    local_ca.write_ca(ca, tmp_path)
    other = local_ca.create_ca()
    local_ca.write_pem(tmp_path / local_ca.CA_KEY_FILE, other.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), private=True)
    with pytest.raises(ValueError, match="is not the EC key"):
        local_ca.load_ca(tmp_path)
