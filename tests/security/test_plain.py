"""SASL/PLAIN (security/plain.py): Kafka's PlainSaslServer's checks, an unknown user failing
exactly like a wrong password, and malformed tokens ending in SaslAuthenticationError."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.security.plain import BAD_PASSWORD, PlainSaslServer, plain_token
from odradek.security.sasl import OTHER_AUTHZID, SaslAuthenticationError

PASSWORDS = {"alice": "secret", "bob": "pässwörd"}


def server() -> PlainSaslServer:
    return PlainSaslServer(PASSWORDS.get)


def refused(srv: PlainSaslServer, token: bytes) -> SaslAuthenticationError:
    with pytest.raises(SaslAuthenticationError) as caught:
        srv.evaluate(token)
    assert not srv.complete and srv.authorization_id is None
    return caught.value


@pytest.mark.parametrize(("username", "authzid"), [("alice", ""), ("alice", "alice"), ("bob", "")])
def test_good_password(username: str, authzid: str) -> None:
    srv = server()
    assert not srv.complete
    assert srv.evaluate(plain_token(username, PASSWORDS[username], authzid)) == b""
    assert srv.complete and srv.authorization_id == username and srv.mechanism == "PLAIN"


def test_wrong_password_and_unknown_user_fail_alike() -> None:
    wrong = refused(server(), plain_token("alice", "guess"))
    unknown = refused(server(), plain_token("mallory", "secret"))
    prefix = refused(server(), plain_token("alice", "secre"))
    assert type(wrong) is type(unknown) is type(prefix)
    assert (wrong.message, wrong.reason) == (unknown.message, unknown.reason) == (prefix.message, prefix.reason)
    assert wrong.message == BAD_PASSWORD


def test_authzid_of_another_user_is_refused() -> None:
    assert refused(server(), plain_token("alice", "secret", authzid="bob")).message == OTHER_AUTHZID


def test_authzid_of_another_user_with_a_wrong_password_says_only_the_password_is_wrong() -> None:
    assert refused(server(), plain_token("alice", "guess", authzid="bob")).message == BAD_PASSWORD


@pytest.mark.parametrize("token", [
    b"", b"alice", b"alice\0secret", b"\0alice\0secret\0", b"\0\0secret", b"\0alice\0", b"\0\0",
    b"\0alice\0secr\xffet", b"\xff\0alice\0secret",
])
def test_malformed_tokens_are_refused(token: bytes) -> None:
    error = refused(server(), token)
    assert error.message == "Authentication failed during authentication due to invalid credentials " \
                            "with SASL mechanism PLAIN"


def test_a_failing_lookup_is_an_authentication_failure() -> None:
    def broken(username: str) -> str | None:
        raise OSError("password store is away")

    error = refused(PlainSaslServer(broken), plain_token("alice", "secret"))
    assert "could not be verified" in error.message and "password store" in error.reason


def test_a_second_message_is_refused_and_changes_nothing() -> None:
    srv = server()
    srv.evaluate(plain_token("alice", "secret"))
    with pytest.raises(SaslAuthenticationError, match="the exchange is complete"):
        srv.evaluate(plain_token("bob", PASSWORDS["bob"]))
    assert srv.complete and srv.authorization_id == "alice"
    failed = server()
    refused(failed, b"garbage")
    refused(failed, plain_token("alice", "secret"))


@settings(max_examples=150, deadline=None)
@given(token=st.one_of(st.binary(max_size=100),
                       st.lists(st.sampled_from(["", "alice", "secret", "bob", "\xe9", "\x00"]), max_size=6)
                       .map(lambda parts: "".join(parts).encode())))
def test_arbitrary_bytes_only_ever_raise_sasl_authentication_error(token: bytes) -> None:
    srv = server()
    try:
        assert srv.evaluate(token) == b""
    except SaslAuthenticationError:
        assert not srv.complete
    else:
        assert token in (plain_token("alice", "secret"), plain_token("alice", "secret", "alice"))
