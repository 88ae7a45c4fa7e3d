"""The local cluster's certificate authority and one certificate per process or user (``cluster up --tls``).

:func:`issue_local_certificates` makes (or finds) a CA in a directory and issues a leaf certificate per name: the
leaf's subject is ``CN=<name>``, so a connection presenting it is the principal ``User:<name>``
(:func:`orchestrator.security.principals.principal_from_peer_cert`). Every leaf serves and authenticates alike
(extendedKeyUsage serverAuth and clientAuth), and names ``localhost`` and ``127.0.0.1`` plus any extra hosts.

Files, all PEM, in the one directory::

    ca.pem  ca-key.pem                 the CA (10 years)
    <name>.pem  <name>-key.pem         each leaf (825 days, never past the CA's own end)

Keys are EC P-256: generated in a millisecond (an RSA 2048 key takes tens to hundreds), small, and accepted by
OpenSSL, librdkafka and the JVM alike; they are written unencrypted as PKCS#8 (``BEGIN PRIVATE KEY``), the one
PEM key form all three read.

Invariants:
* The CA is made once: when ``ca.pem`` and ``ca-key.pem`` are both there (and match) they are reused, so
  certificates issued earlier, and every copy of ``ca.pem`` handed out, stay valid. One without the other, a pair
  that does not match, or an expired CA is an error saying what to remove; it is never silently replaced.
* Leaves are issued anew on every call (cheap with EC keys), so their hosts always follow the caller's list.
* Every file is written atomically with mode 0600 in a 0700 directory (:mod:`orchestrator.private_files`), the
  keys being the owner's alone from the moment they exist.
* Certificates carry what strict verifiers (OpenSSL's ``X509_V_FLAG_X509_STRICT``, Python 3.13's default) demand:
  critical basicConstraints and keyUsage, subject and authority key identifiers.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from orchestrator.errors import InvalidArgument, LocalClusterError
from orchestrator.private_files import private_dir, write_private

CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
CA_COMMON_NAME = "tieredctl local cluster CA"

CA_VALIDITY = dt.timedelta(days=3650)  # 10 years: a local cluster directory lives as long as someone keeps it
LEAF_VALIDITY = dt.timedelta(days=825)  # the CA/Browser Forum's former ceiling; clients refuse longer-lived leaves
BACKDATE = dt.timedelta(minutes=5)  # notBefore slightly in the past, against clocks a little behind this one
DEFAULT_HOSTS = ("localhost", "127.0.0.1")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a CN that is also a file name and a principal name


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    """One leaf's files: its certificate, its key and the CA that signed it (all PEM)."""

    name: str
    certfile: Path
    keyfile: Path
    cafile: Path

    @property
    def principal(self) -> str:
        """The principal a connection presenting this certificate is: ``User:<name>``."""
        return f"User:{self.name}"


@dataclass(frozen=True, slots=True)
class _Authority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def issue_local_certificates(
    directory: Path,
    names: Iterable[str],
    *,
    hosts: Sequence[str] = (),
    clock: Callable[[], dt.datetime] = _utcnow,
) -> dict[str, IssuedCertificate]:
    """Make (or reuse) the CA in ``directory`` and issue a leaf for each of ``names``, in their order.

    Each leaf names ``localhost``, ``127.0.0.1`` and ``hosts`` (DNS names or IP addresses). Raises
    :class:`~orchestrator.errors.InvalidArgument` for a name or host that cannot be used (before writing anything)
    and :class:`~orchestrator.errors.LocalClusterError` for a CA in the directory that cannot be reused.
    """
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        _check_name(name)
    alt_names = _subject_alt_names([*DEFAULT_HOSTS, *hosts])
    now = clock()
    directory = private_dir(directory)
    authority = _load_or_create_authority(directory, now=now)
    issued: dict[str, IssuedCertificate] = {}
    for name in wanted:
        issued[name] = _issue_leaf(directory, authority, name, alt_names, now=now)
    return issued


def principal_of_certificate(pem: bytes) -> str:
    """``User:<CN>`` of a PEM certificate's subject (its first CN); :class:`InvalidArgument` when it has none."""
    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise InvalidArgument(f"not a PEM certificate: {exc}") from exc
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else ""
    common_name = value.decode() if isinstance(value, bytes) else value
    if not common_name:
        raise InvalidArgument(f"certificate subject {certificate.subject.rfc4514_string()!r} has no common name (CN)")
    return f"User:{common_name}"


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"certificate name {name!r}: use letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    # "<name>.pem" and "<name>-key.pem" must not land on the CA's files or on another leaf's key.
    if name == "ca" or name.endswith("-key"):
        raise InvalidArgument(f"certificate name {name!r} is reserved: its files would clash with a CA or key file")


def _subject_alt_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    alt_names: list[x509.GeneralName] = []
    for host in dict.fromkeys(h.strip() for h in hosts):
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
            continue
        except ValueError:
            pass
        if not host or not host.isascii() or any(c.isspace() for c in host):
            raise InvalidArgument(f"host {host!r} is neither an IP address nor an ASCII DNS name (use its A-label)")
        alt_names.append(x509.DNSName(host))
    return alt_names


def _load_or_create_authority(directory: Path, *, now: dt.datetime) -> _Authority:
    cert_path, key_path = directory / CA_CERT_FILE, directory / CA_KEY_FILE
    present = [p for p in (cert_path, key_path) if p.exists()]
    if not present:
        return _create_authority(cert_path, key_path, now=now)
    if len(present) == 1:
        missing = key_path if present[0] == cert_path else cert_path
        raise LocalClusterError(
            f"{present[0]} is there without {missing}: restore {missing.name}, or remove {present[0].name} to make "
            "a new CA (every certificate it signed must then be issued again)"
        )
    return _load_authority(cert_path, key_path, now=now)


def _create_authority(cert_path: Path, key_path: Path, *, now: dt.datetime) -> _Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME)])
    public_key = key.public_key()
    ski = x509.SubjectKeyIdentifier.from_public_key(public_key)
    ca_usage = x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(ca_usage, critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    )
    certificate = builder.sign(key, hashes.SHA256())
    # The key first: a run stopped in between leaves a key without a certificate, which the next run reports.
    write_private(key_path, _key_pem(key))
    write_private(cert_path, certificate.public_bytes(serialization.Encoding.PEM))
    return _Authority(certificate, key)


def _load_authority(cert_path: Path, key_path: Path, *, now: dt.datetime) -> _Authority:
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise LocalClusterError(
            f"the CA in {cert_path.parent} cannot be read ({exc}): remove {CA_CERT_FILE} and {CA_KEY_FILE} to make a "
            "new one"
        ) from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != certificate.public_key():
        raise LocalClusterError(
            f"{key_path} is not the key of {cert_path}: remove both to make a new CA, or restore the matching pair"
        )
    try:
        certificate.verify_directly_issued_by(certificate)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise LocalClusterError(f"{cert_path} is not a self-signed CA certificate: remove it and {key_path}") from exc
    if certificate.not_valid_after_utc <= now:
        raise LocalClusterError(
            f"the CA {cert_path} expired on {certificate.not_valid_after_utc:%Y-%m-%d}: remove {CA_CERT_FILE} and "
            f"{CA_KEY_FILE} to make a new one (every certificate is then issued again)"
        )
    return _Authority(certificate, key)


def _issue_leaf(
    directory: Path, authority: _Authority, name: str, alt_names: list[x509.GeneralName], *, now: dt.datetime
) -> IssuedCertificate:
    key = ec.generate_private_key(ec.SECP256R1())
    public_key = key.public_key()
    ca_ski = authority.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    leaf_usage = x509.KeyUsage(
        digital_signature=True,  # ECDHE-ECDSA handshakes: the leaf signs
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    not_after = min(now + LEAF_VALIDITY, authority.certificate.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(authority.certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(leaf_usage, critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    )
    certificate = builder.sign(authority.key, hashes.SHA256())
    certfile, keyfile = directory / f"{name}.pem", directory / f"{name}-key.pem"
    write_private(keyfile, _key_pem(key))
    write_private(certfile, certificate.public_bytes(serialization.Encoding.PEM))
    return IssuedCertificate(name=name, certfile=certfile, keyfile=keyfile, cafile=directory / CA_CERT_FILE)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
