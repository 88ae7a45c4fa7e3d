"""SCRAM credentials and exchanges: both sides agree for both mechanisms, a failure says nothing about why, the keys
an AlterUserScramCredentials client's salted password gives are the ones a password gives, and kafka-python's own
SCRAM client logs in to our server."""

from __future__ import annotations

import hashlib
import warnings

import pytest

from orchestrator.errors import (
    IllegalSaslState,
    SaslAuthenticationFailed,
    SaslExchangeFailed,
    UnacceptableCredential,
    UnsupportedSaslMechanism,
)
from orchestrator.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramClientExchange,
    ScramCredential,
    ScramMechanism,
    ScramServerExchange,
    credential_from_password,
    credential_from_salted_password,
    salted_password,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

pytestmark = pytest.mark.unit

MECHANISMS = [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512]
SALT = b"0123456789abcdefghij"


def _store(mechanism: ScramMechanism, **passwords: str) -> dict[str, ScramCredential]:
    return {user: credential_from_password(mechanism, pw, salt=SALT) for user, pw in passwords.items()}


def _login(mechanism: ScramMechanism, users: dict[str, ScramCredential], username: str, password: str) -> str | None:
    """A full exchange between our client and our server; the server's user name, or the server's error raised."""
    server = ScramServerExchange(mechanism, users.get)
    client = ScramClientExchange(mechanism, username, password)
    client_final = client.step(server.step(client.first()))
    client.finish(server.step(client_final))
    assert server.done and client.done
    return server.username


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: m.mechanism_name)
def test_our_client_logs_in_to_our_server_and_checks_the_servers_signature(mechanism: ScramMechanism) -> None:
    assert _login(mechanism, _store(mechanism, alice="s3cret"), "alice", "s3cret") == "alice"


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: m.mechanism_name)
def test_a_user_name_with_comma_and_equals_is_escaped_on_the_wire_and_plain_on_the_server(
    mechanism: ScramMechanism,
) -> None:
    users = _store(mechanism, **{"a,b=c": "pw"})
    client = ScramClientExchange(mechanism, "a,b=c", "pw")
    first = client.first()
    assert b"n=a=2Cb=3Dc," in first
    server = ScramServerExchange(mechanism, users.get)
    client.finish(server.step(client.step(server.step(first))))
    assert server.username == "a,b=c"


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: m.mechanism_name)
def test_a_wrong_password_and_an_unknown_user_fail_alike_in_the_same_round(mechanism: ScramMechanism) -> None:
    users = _store(mechanism, alice="s3cret")
    failures = []
    for username, password in (("alice", "wrong"), ("mallory", "s3cret")):
        server = ScramServerExchange(mechanism, users.get)
        client = ScramClientExchange(mechanism, username, password)
        server_first = server.step(client.first())  # the first round succeeds for both
        assert b",s=" in server_first and server_first.endswith(b",i=4096")
        with pytest.raises(SaslAuthenticationFailed) as caught:
            server.step(client.step(server_first))
        failures.append(str(caught.value))
        assert not server.done and server.username is None
        with pytest.raises(IllegalSaslState):
            server.step(b"c=biws,r=x,p=eA==")
    assert failures[0] == failures[1]
    assert failures[0].endswith(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        + mechanism.mechanism_name
    )


def test_an_unknown_user_gets_the_same_decoy_salt_each_time_and_a_different_one_per_user() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256

    def salt_for(username: str) -> bytes:
        server = ScramServerExchange(mechanism, lambda _name: None)
        first = server.step(ScramClientExchange(mechanism, username, "pw").first())
        return dict(part.split(b"=", 1) for part in first.split(b","))[b"s"]

    assert salt_for("mallory") == salt_for("mallory") != salt_for("eve")


def test_a_malformed_client_message_fails_like_a_wrong_password_and_the_reason_stays_on_the_server() -> None:
    server = ScramServerExchange(ScramMechanism.SCRAM_SHA_256, lambda _name: None)
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        server.step(b"\xff\xfe not utf-8")
    assert server.failure_reason == "the client's message is not UTF-8"


def test_our_client_refuses_a_server_that_does_not_hold_the_credential() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    impostor = ScramServerExchange(mechanism, _store(mechanism, alice="other").get)
    client = ScramClientExchange(mechanism, "alice", "s3cret")
    client_final = client.step(impostor.step(client.first()))
    with pytest.raises(SaslAuthenticationFailed):
        impostor.step(client_final)  # the impostor cannot check the proof ...
    with pytest.raises(SaslExchangeFailed, match="server-final"):
        client.finish(b"v=" + b"A" * 44)  # ... and a signature it makes up is refused


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: m.mechanism_name)
@pytest.mark.parametrize("iterations", [MIN_ITERATIONS, 8192, MAX_ITERATIONS])
def test_the_credential_from_a_salted_password_is_the_one_the_password_gives(
    mechanism: ScramMechanism, iterations: int
) -> None:
    from_password = credential_from_password(mechanism, "pässword", iterations, salt=SALT)
    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, "pässword".encode(), SALT, iterations)
    assert salted_password(mechanism, "pässword", SALT, iterations) == salted
    assert credential_from_salted_password(mechanism, SALT, salted, iterations) == from_password


@pytest.mark.parametrize("iterations", [0, MIN_ITERATIONS - 1, MAX_ITERATIONS + 1])
def test_iterations_outside_kafkas_range_are_unacceptable(iterations: int) -> None:
    mechanism = ScramMechanism.SCRAM_SHA_256
    with pytest.raises(UnacceptableCredential, match="iterations"):
        credential_from_password(mechanism, "pw", iterations)
    with pytest.raises(UnacceptableCredential, match="iterations"):
        credential_from_salted_password(mechanism, SALT, b"\x00" * 32, iterations)


def test_a_short_salt_a_salted_password_of_the_wrong_size_and_an_unknown_mechanism_are_refused() -> None:
    sha256 = ScramMechanism.SCRAM_SHA_256
    with pytest.raises(UnacceptableCredential, match="salt"):
        credential_from_salted_password(sha256, b"short", b"\x00" * 32, 4096)
    with pytest.raises(UnacceptableCredential, match="32"):
        credential_from_salted_password(sha256, SALT, b"\x00" * 64, 4096)
    with pytest.raises(UnsupportedSaslMechanism):
        credential_from_salted_password(ScramMechanism.UNKNOWN, SALT, b"\x00" * 32, 4096)
    with pytest.raises(UnsupportedSaslMechanism):
        ScramServerExchange(ScramMechanism.UNKNOWN, lambda _name: None)


def test_mechanism_names_and_kafkas_codes() -> None:
    assert [(m.mechanism_name, int(m)) for m in MECHANISMS] == [("SCRAM-SHA-256", 1), ("SCRAM-SHA-512", 2)]
    assert ScramMechanism.from_name("SCRAM-SHA-512") is ScramMechanism.SCRAM_SHA_512
    assert ScramMechanism.from_code(7) is ScramMechanism.UNKNOWN
    with pytest.raises(UnsupportedSaslMechanism):
        ScramMechanism.from_name("PLAIN")


def test_a_credentials_repr_shows_no_salt_or_key() -> None:
    credential = credential_from_password(ScramMechanism.SCRAM_SHA_256, "pw", salt=SALT)
    text = repr(credential)
    assert "iterations=4096" in text
    for secret in (credential.salt, credential.stored_key, credential.server_key):
        assert secret.hex() not in text and repr(secret) not in text


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: m.mechanism_name)
def test_kafka_pythons_scram_client_logs_in_to_our_server(mechanism: ScramMechanism) -> None:
    users = _store(mechanism, alice="s3cret")
    server = ScramServerExchange(mechanism, users.get)
    client = KafkaPythonScramClient("alice", "s3cret", mechanism.mechanism_name)
    client.process_server_first_message(server.step(client.first_message()))
    client.process_server_final_message(server.step(client.final_message()))  # raises on a wrong signature
    assert server.username == "alice"


def test_kafka_pythons_scram_client_with_a_wrong_password_is_refused() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    server = ScramServerExchange(mechanism, _store(mechanism, alice="s3cret").get)
    client = KafkaPythonScramClient("alice", "guess", mechanism.mechanism_name)
    client.process_server_first_message(server.step(client.first_message()))
    with pytest.raises(SaslAuthenticationFailed):
        server.step(client.final_message())
