"""Principals: a verified peer certificate's first CN is ``User:<CN>``; text naming a principal is ``User:<name>``,
and anything else is refused with what to write instead."""

from __future__ import annotations

import pytest

from orchestrator.security.principals import ANONYMOUS, parse_principal, principal_from_peer_cert

pytestmark = pytest.mark.unit

# What ssl.SSLSocket.getpeercert() returns for a verified client certificate.
PEER_CERT = {
    "subject": (
        (("countryName", "NL"),),
        (("organizationName", "Example"),),
        (("commonName", "broker-1"),),
    ),
    "issuer": ((("commonName", "tieredctl local cluster CA"),),),
    "version": 3,
    "serialNumber": "0A",
    "notBefore": "Jan  1 00:00:00 2030 GMT",
    "notAfter": "Apr  6 00:00:00 2032 GMT",
    "subjectAltName": (("DNS", "localhost"), ("IP Address", "127.0.0.1")),
}


def test_the_principal_of_a_peer_certificate_is_user_and_its_common_name() -> None:
    assert principal_from_peer_cert(PEER_CERT) == "User:broker-1"


def test_the_first_common_name_wins_also_inside_a_multi_valued_rdn() -> None:
    cert = {"subject": ((("organizationalUnitName", "ops"), ("commonName", "alice")), (("commonName", "bob"),))}
    assert principal_from_peer_cert(cert) == "User:alice"


@pytest.mark.parametrize(
    "cert",
    [
        None,  # no certificate at all
        {},  # CERT_NONE: a certificate was not verified, so getpeercert() tells nothing
        {"subject": ()},
        {"subject": ((("organizationName", "Example"),),)},
        {"subject": ((("commonName", ""),),)},
        {"issuer": ((("commonName", "a CA"),),)},  # the issuer's CN is not the peer's
    ],
)
def test_a_peer_without_a_verified_common_name_has_no_principal(cert: dict[str, object] | None) -> None:
    assert principal_from_peer_cert(cert) is None


def test_the_anonymous_principal_is_kafkas() -> None:
    assert ANONYMOUS == "User:ANONYMOUS" == parse_principal(ANONYMOUS)


@pytest.mark.parametrize(
    "text,principal",
    [
        ("User:alice", "User:alice"),
        ("  User:broker-1 ", "User:broker-1"),
        ("User:*", "User:*"),
        ("User:a:b", "User:a:b"),
    ],
)
def test_a_user_principal_is_accepted_as_written(text: str, principal: str) -> None:
    assert parse_principal(text) == principal


@pytest.mark.parametrize(
    "text,message",
    [
        ("alice", "is not Type:name .*did you mean 'User:alice'"),
        ("", "is not Type:name"),
        ("user:alice", "spelt 'User' .*write 'User:alice'"),
        ("Group:admins", "type 'Group' is not served; the only principal type is 'User'"),
        ("User:", "has no name after 'User:'"),
        ("User: alice", "spaces around it; write 'User:alice'"),
    ],
)
def test_anything_but_a_user_principal_is_refused_with_what_to_write(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_principal(text)
