"""SCRAM-SHA-256/512 (security/scram.py): RFC 7677's test vector on both sides, full exchanges,
Kafka's credential string, and every way an exchange can go wrong ending in the one
SaslAuthenticationError, an unknown user exactly like a wrong password."""
from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.security.sasl import OTHER_AUTHZID, SCRAM_SHA_256, SCRAM_SHA_512, SaslAuthenticationError
from odradek.security.scram import (
    MIN_ITERATIONS,
    ScramCredential,
    ScramSaslClient,
    ScramSaslServer,
    credential_from_string,
    credential_to_string,
    generate_credential,
    sasl_name,
    username_of,
)

# RFC 7677 section 3
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

CREDENTIALS = {mechanism: {"alice": generate_credential(mechanism, "secret"),
                           "a,b=c": generate_credential(mechanism, "odd name")}
               for mechanism in (SCRAM_SHA_256, SCRAM_SHA_512)}


def server(mechanism: str = SCRAM_SHA_256) -> ScramSaslServer:
    return ScramSaslServer(mechanism, CREDENTIALS[mechanism].get)


def exchange(client: ScramSaslClient, srv: ScramSaslServer) -> None:
    """Runs client and server against each other to the end (or the first error)."""
    challenge = b""
    while not client.complete:
        response = client.evaluate(challenge)
        if client.complete:
            break
        challenge = srv.evaluate(response)


def failure(action: Callable[[], object]) -> SaslAuthenticationError:
    with pytest.raises(SaslAuthenticationError) as caught:
        action()
    return caught.value


def rfc_server() -> ScramSaslServer:
    credential = generate_credential(SCRAM_SHA_256, "pencil", 4096, salt=RFC_SALT)
    return ScramSaslServer(SCRAM_SHA_256, {"user": credential}.get, server_nonce=RFC_SERVER_NONCE)


def test_rfc7677_vector_server_side() -> None:
    srv = rfc_server()
    assert srv.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not srv.complete and srv.authorization_id is None
    assert srv.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert srv.complete and srv.authorization_id == "user"


def test_rfc7677_vector_client_side() -> None:
    client = ScramSaslClient(SCRAM_SHA_256, "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    assert client.evaluate(b"") == RFC_CLIENT_FIRST
    assert client.evaluate(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.evaluate(RFC_SERVER_FINAL) == b""
    assert client.complete


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
@pytest.mark.parametrize(("username", "password"), [("alice", "secret"), ("a,b=c", "odd name")])
def test_round_trip(mechanism: str, username: str, password: str) -> None:
    client, srv = ScramSaslClient(mechanism, username, password), server(mechanism)
    exchange(client, srv)
    assert client.complete and srv.complete and srv.authorization_id == username


def test_authzid_of_the_user_itself_is_accepted() -> None:
    client, srv = ScramSaslClient(SCRAM_SHA_256, "alice", "secret", authzid="alice"), server()
    exchange(client, srv)
    assert srv.authorization_id == "alice"


def test_authzid_of_another_user_is_refused_with_kafkas_message() -> None:
    client, srv = ScramSaslClient(SCRAM_SHA_256, "alice", "secret", authzid="bob"), server()
    assert failure(lambda: exchange(client, srv)).message == OTHER_AUTHZID


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_unknown_user_and_wrong_password_fail_alike(mechanism: str) -> None:
    wrong = failure(lambda: exchange(ScramSaslClient(mechanism, "alice", "guess"), server(mechanism)))
    unknown = failure(lambda: exchange(ScramSaslClient(mechanism, "mallory", "secret"), server(mechanism)))
    assert type(wrong) is type(unknown)
    assert (wrong.message, wrong.reason) == (unknown.message, unknown.reason)
    assert wrong.message == ("Authentication failed during authentication due to invalid credentials "
                             f"with SASL mechanism {mechanism}")


def test_unknown_user_gets_a_server_first_with_the_same_made_up_salt_each_time() -> None:
    first = [server().evaluate(b"n,,n=mallory,r=abc").decode().split(",") for _ in range(2)]
    assert first[0][1] == first[1][1] and first[0][2] == "i=4096"
    assert first[0][1] != server().evaluate(b"n,,n=eve,r=abc").decode().split(",")[1]
    real = server().evaluate(b"n,,n=alice,r=abc").decode().split(",")
    for salt in (first[0][1], real[1]):  # both in Kafka's shape: up to 26 base-36 digits
        raw = base64.b64decode(salt.removeprefix("s="))
        assert raw.isalnum() and raw.islower() | raw.isdigit() and len(raw) <= 26


def run_to_client_final(srv: ScramSaslServer, password: str = "secret") -> bytes:
    """A correct client-final for alice against ``srv``."""
    client = ScramSaslClient(SCRAM_SHA_256, "alice", password)
    return client.evaluate(srv.evaluate(client.evaluate(b"")))


def tampered_proof(final: bytes) -> bytes:
    head, _, proof = final.rpartition(b",p=")
    raw = bytearray(base64.b64decode(proof))
    raw[0] ^= 1
    return head + b",p=" + base64.b64encode(bytes(raw))


@pytest.mark.parametrize("tamper", [
    tampered_proof,
    lambda final: final.replace(b",r=", b",r=X", 1),
    lambda final: final.replace(b"c=biws", b"c=eSws", 1),
    lambda final: final.replace(b",p=", b",x=1,p=", 1).rpartition(b",p=")[0] + b",p=AAAA",
    lambda final: final.rpartition(b",p=")[0],
    lambda final: final[:-5],
    lambda final: final + b"\xff",
    lambda final: final.replace(b"c=biws,", b"", 1),
], ids=["proof", "nonce", "channel-binding", "short-proof", "no-proof", "truncated", "not-utf8", "no-c"])
def test_tampered_client_final_is_refused(tamper: Callable[[bytes], bytes]) -> None:
    srv = server()
    final = run_to_client_final(srv)
    error = failure(lambda: srv.evaluate(tamper(final)))
    assert error.message.endswith("with SASL mechanism SCRAM-SHA-256")
    assert not srv.complete and srv.authorization_id is None


@pytest.mark.parametrize("client_first", [
    b"", b"\xff\xfe", b"n,,n=alice,r=abc\x00", b"n,,", b"n,,n=alice", b"n,,r=abc,n=alice",
    b"p=tls-unique,,n=alice,r=abc", b"x,,n=alice,r=abc", b"n,,m=ext,n=alice,r=abc", b"n,,n=al=41ce,r=abc",
    b"n,,n=,r=abc", b"n,,n=alice,r=", b"n,,n=alice,r=a b", b"n,,n=alice,r=abc,tokenauth=true",
    b"n,,n=alice,r=abc,=x", b"n,a=,n=alice,r=abc", b"n,,n=alice,r=abc,m=1",
], ids=lambda raw: raw.decode(errors="replace") or "empty")
def test_malformed_client_first_is_refused(client_first: bytes) -> None:
    srv = server()
    assert failure(lambda: srv.evaluate(client_first)).message.endswith("SCRAM-SHA-256")
    assert failure(lambda: srv.evaluate(RFC_CLIENT_FIRST))  # failed for good


def test_unknown_extensions_are_ignored_and_y_flag_accepted() -> None:
    assert server().evaluate(b"n,,n=alice,r=abc,x=1,foo=bar").startswith(b"r=abc")
    assert server().evaluate(b"y,,n=alice,r=abc").startswith(b"r=abc")


def test_out_of_order_messages_are_refused() -> None:
    srv = server()
    failure(lambda: srv.evaluate(RFC_CLIENT_FINAL))  # client-final first: not a client-first
    srv = server()
    client = ScramSaslClient(SCRAM_SHA_256, "alice", "secret")
    first = client.evaluate(b"")
    final = client.evaluate(srv.evaluate(first))
    srv.evaluate(final)
    assert srv.complete
    for again in (first, final, b""):
        assert "the exchange is complete" in failure(lambda: srv.evaluate(again)).message  # noqa: B023
    assert srv.complete and srv.authorization_id == "alice"


def test_client_first_twice_is_refused() -> None:
    srv = server()
    srv.evaluate(b"n,,n=alice,r=abc")
    failure(lambda: srv.evaluate(b"n,,n=alice,r=abc"))


def test_lookup_errors_and_unusable_credentials_are_authentication_failures() -> None:
    def broken(username: str) -> ScramCredential | None:
        raise OSError("zookeeper is away")

    assert "could not be obtained" in failure(lambda: ScramSaslServer(SCRAM_SHA_256, broken).evaluate(
        RFC_CLIENT_FIRST)).reason
    weak = generate_credential(SCRAM_SHA_256, "pencil")
    weak = ScramCredential(weak.salt, weak.stored_key, weak.server_key, MIN_ITERATIONS - 1)
    assert "minimum" in failure(lambda: ScramSaslServer(SCRAM_SHA_256, {"user": weak}.get).evaluate(
        RFC_CLIENT_FIRST)).reason
    other = generate_credential(SCRAM_SHA_512, "pencil")
    failure(lambda: ScramSaslServer(SCRAM_SHA_256, {"user": other}.get).evaluate(RFC_CLIENT_FIRST))


@pytest.mark.parametrize(("server_message", "reason"), [
    (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
    (b"r=other%hvYDpWUa2RaTCAfuxFIlj,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", "iterations"),
    (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=!!,i=4096", "base64"),
    (b"e=invalid-proof", "invalid server-first"),
    (b"\xff", "UTF-8"),
])
def test_client_refuses_bad_server_first(server_message: bytes, reason: str) -> None:
    client = ScramSaslClient(SCRAM_SHA_256, "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    client.evaluate(b"")
    assert reason in failure(lambda: client.evaluate(server_message)).message


@pytest.mark.parametrize("server_final", [b"v=" + base64.b64encode(bytes(32)), b"e=other-error", b"", b"x=1"])
def test_client_refuses_bad_server_final(server_final: bytes) -> None:
    client = ScramSaslClient(SCRAM_SHA_256, "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    client.evaluate(b"")
    client.evaluate(RFC_SERVER_FIRST)
    failure(lambda: client.evaluate(server_final))
    assert not client.complete


def test_client_refuses_a_challenge_before_its_first_message_and_after_completion() -> None:
    failure(lambda: ScramSaslClient(SCRAM_SHA_256, "user", "pencil").evaluate(b"r=x,s=eA==,i=4096"))
    client = ScramSaslClient(SCRAM_SHA_256, "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    for challenge in (b"", RFC_SERVER_FIRST, RFC_SERVER_FINAL):
        client.evaluate(challenge)
    failure(lambda: client.evaluate(RFC_SERVER_FINAL))


def test_sasl_names() -> None:
    assert sasl_name("a,b=c") == "a=2Cb=3Dc"
    assert username_of("a=2Cb=3Dc") == "a,b=c"
    assert username_of("=3D2C") == "=2C"
    for bad in ("a=2", "a=41", "=", "a,b", ""):
        with pytest.raises(ValueError):
            username_of(bad)


def test_credential_string_round_trip() -> None:
    credential = generate_credential(SCRAM_SHA_512, "secret", 8192)
    text = credential_to_string(credential)
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert [part.partition("=")[0] for part in text.split(",")] == ["salt", "stored_key", "server_key", "iterations"]
    assert credential_from_string(text) == credential


def test_credential_string_of_rfc_vector() -> None:
    credential = generate_credential(SCRAM_SHA_256, "pencil", 4096, salt=RFC_SALT)
    assert credential_to_string(credential) == (
        "salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
        "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096")


GOOD = "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096"


@pytest.mark.parametrize("text", [
    "", "salt", GOOD.replace(",iterations=4096", ""), GOOD + ",iterations=4096", GOOD + ",extra=1",
    GOOD.replace("iterations=4096", "iterations=4k"), GOOD.replace("iterations=4096", "iterations=0"),
    GOOD.replace("iterations=4096", "iterations=-1"), GOOD.replace("iterations=4096", "iterations= 4096"),
    GOOD.replace("c2FsdA==", "c2FsdA"), GOOD.replace("c2FsdA==", "c2F$dA=="), GOOD.replace("c2FsdA==", ""),
    GOOD.replace("salt=", "=", 1), GOOD.replace("server_key", "serverkey"), GOOD.replace(",", ";"),
    GOOD.replace("iterations=4096", "iterations=\u0664\u0660\u0669\u0666"),
])
def test_malformed_credential_strings_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="SCRAM credential"):
        credential_from_string(text)


def test_iterations_outside_kafkas_bounds_are_refused() -> None:
    for iterations in (MIN_ITERATIONS - 1, 0, 16385):
        with pytest.raises(ValueError, match="iterations"):
            generate_credential(SCRAM_SHA_256, "secret", iterations)
    assert generate_credential(SCRAM_SHA_256, "secret", 16384).iterations == 16384


def test_unknown_mechanism_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="not a SCRAM mechanism"):
        ScramSaslServer("SCRAM-SHA-1", CREDENTIALS[SCRAM_SHA_256].get)


def completed_server() -> ScramSaslServer:
    srv = rfc_server()
    srv.evaluate(RFC_CLIENT_FIRST)
    srv.evaluate(RFC_CLIENT_FINAL)
    return srv


def server_awaiting_client_final() -> ScramSaslServer:
    srv = rfc_server()
    srv.evaluate(RFC_CLIENT_FIRST)
    return srv


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step=st.sampled_from([rfc_server, server_awaiting_client_final, completed_server]),
       garbage=st.one_of(st.binary(max_size=200),
                         st.text(alphabet="nyp=,arcisv\x00\u00e9biws=2C3D0123", max_size=60).map(str.encode)))
def test_arbitrary_bytes_only_ever_raise_sasl_authentication_error(step: Callable[[], ScramSaslServer],
                                                                   garbage: bytes) -> None:
    srv = step()
    try:
        challenge = srv.evaluate(garbage)
    except SaslAuthenticationError:
        assert not srv.complete or step is completed_server
    else:  # only a well-formed client-first can pass, and then the exchange goes on
        assert step is rfc_server and challenge.startswith(b"r=") and not srv.complete
