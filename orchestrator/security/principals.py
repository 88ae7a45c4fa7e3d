"""Principals: who a connection is, as Kafka names it (``User:<name>``).

A connection's principal comes from how it authenticated: the CN of a verified TLS client certificate
(:func:`principal_from_peer_cert`, fed the dict :meth:`ssl.SSLSocket.getpeercert` returns), a SASL/SCRAM user name,
or nothing at all (:data:`ANONYMOUS`). ACLs name principals as text, which :func:`parse_principal` checks.

Invariants:
* A principal here is always ``User:<name>`` with a non-empty name: this project serves only Kafka's default
  principal builder, whose one type is ``User`` (spelt exactly so, as ``KafkaPrincipal.USER_TYPE``).
* A certificate yields a principal only from its subject's first common name; one without a (non-empty) CN yields
  None, and the caller decides (refuse, or treat as anonymous); nothing here guesses from other fields.
* Pure: no I/O, no ``ssl`` import; the certificate arrives already verified, as the ``ssl`` module decoded it.
"""

from __future__ import annotations

from collections.abc import Mapping

USER_TYPE = "User"
ANONYMOUS = f"{USER_TYPE}:ANONYMOUS"  # Kafka's KafkaPrincipal.ANONYMOUS: a PLAINTEXT or unauthenticated connection

_COMMON_NAME = "commonName"  # the key ssl.getpeercert() uses for OID 2.5.4.3


def principal_from_peer_cert(cert: Mapping[str, object] | None) -> str | None:
    """``User:<CN>`` for a peer certificate as :meth:`ssl.SSLSocket.getpeercert` returns it, or None.

    The subject is a tuple of relative distinguished names, each a tuple of ``(key, value)`` pairs, in the
    certificate's order: ``((("countryName", "NL"),), (("commonName", "broker-1"),))``. The first commonName wins.
    None when there is no certificate (``None``), none was verified (``{}``, as ``CERT_NONE`` gives) or the subject
    has no non-empty CN.
    """
    if not cert:
        return None
    subject = cert.get("subject")
    if not isinstance(subject, tuple):
        return None
    for rdn in subject:
        if not isinstance(rdn, tuple):
            continue
        for attribute in rdn:
            if isinstance(attribute, tuple) and len(attribute) == 2 and attribute[0] == _COMMON_NAME:
                name = attribute[1]
                return f"{USER_TYPE}:{name}" if isinstance(name, str) and name else None
    return None


def parse_principal(text: str) -> str:
    """``text`` checked as a principal, ``Type:name`` with type ``User`` (``User:*`` is the ACL wildcard).

    Surrounding whitespace is dropped; anything else wrong raises :class:`ValueError` saying what to write.
    """
    candidate = text.strip()
    principal_type, sep, name = candidate.partition(":")
    if not sep:
        suggestion = f"; did you mean '{USER_TYPE}:{candidate}'?" if candidate else ""
        raise ValueError(f"principal {text!r} is not Type:name (for example '{USER_TYPE}:alice'){suggestion}")
    if principal_type != USER_TYPE:
        if principal_type.lower() == USER_TYPE.lower():
            raise ValueError(
                f"principal {text!r}: the type is spelt '{USER_TYPE}' (case matters); write '{USER_TYPE}:{name}'"
            )
        raise ValueError(
            f"principal {text!r}: type {principal_type!r} is not served; the only principal type is "
            f"'{USER_TYPE}' (a TLS certificate's CN or a SCRAM user name), as in '{USER_TYPE}:alice'"
        )
    if not name.strip():
        raise ValueError(f"principal {text!r} has no name after '{USER_TYPE}:' (for example '{USER_TYPE}:alice')")
    if name != name.strip():
        raise ValueError(f"principal {text!r}: the name has spaces around it; write '{USER_TYPE}:{name.strip()}'")
    return candidate
