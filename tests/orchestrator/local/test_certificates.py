"""The local CA and its leaves: a broker and a client holding them complete a real mutual TLS handshake on
loopback, the server reading the client's principal from its certificate; the CA is made once and reused; keys are
the owner's alone; a certificate from another CA is refused."""

from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from orchestrator.errors import InvalidArgument, LocalClusterError
from orchestrator.local.certificates import (
    CA_CERT_FILE,
    CA_KEY_FILE,
    IssuedCertificate,
    issue_local_certificates,
    principal_of_certificate,
)
from orchestrator.security.principals import principal_from_peer_cert

TIMEOUT = 10.0


def _server_context(leaf: IssuedCertificate, *, trust: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(trust))
    ctx.load_cert_chain(leaf.certfile, leaf.keyfile)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    return ctx


def _client_context(leaf: IssuedCertificate, *, trust: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(trust))
    ctx.load_cert_chain(leaf.certfile, leaf.keyfile)
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    return ctx


class _OneConnectionServer:
    """Accepts one TLS connection on 127.0.0.1 (a free port), echoes one line, and keeps what it saw."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(TIMEOUT)
        self.port = self.listener.getsockname()[1]
        self.context = context
        self.peer_cert: dict[str, object] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        try:
            raw, _ = self.listener.accept()
            raw.settimeout(TIMEOUT)
            with self.context.wrap_socket(raw, server_side=True) as tls:
                self.peer_cert = dict(tls.getpeercert() or {})
                tls.sendall(tls.recv(64))
        except (OSError, ssl.SSLError) as exc:
            self.error = exc


@pytest.fixture
def serve() -> Iterator[list[_OneConnectionServer]]:
    servers: list[_OneConnectionServer] = []
    yield servers
    for server in servers:
        server.listener.close()
        server.thread.join(TIMEOUT)


def _start(servers: list[_OneConnectionServer], context: ssl.SSLContext) -> _OneConnectionServer:
    server = _OneConnectionServer(context)
    servers.append(server)
    server.thread.start()
    return server


def _exchange(server: _OneConnectionServer, context: ssl.SSLContext, *, server_hostname: str) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname=server_hostname) as tls,
    ):
        tls.sendall(b"ping\n")
        return tls.recv(64)


@pytest.mark.integration
@pytest.mark.parametrize("server_hostname", ["localhost", "127.0.0.1"])
def test_a_broker_and_a_client_complete_mutual_tls_and_the_broker_sees_the_clients_principal(
    tmp_path: Path, serve: list[_OneConnectionServer], server_hostname: str
) -> None:
    issued = issue_local_certificates(tmp_path / "tls", ["broker-1", "admin"])
    broker, admin = issued["broker-1"], issued["admin"]
    server = _start(serve, _server_context(broker, trust=broker.cafile))

    assert _exchange(server, _client_context(admin, trust=admin.cafile), server_hostname=server_hostname) == b"ping\n"
    server.thread.join(TIMEOUT)

    assert server.error is None
    assert server.peer_cert is not None and server.peer_cert["subject"] == ((("commonName", "admin"),),)
    assert principal_from_peer_cert(server.peer_cert) == "User:admin" == admin.principal


@pytest.mark.unit
def test_each_leaf_names_its_principal_and_hosts_and_serves_both_ends_of_a_connection(tmp_path: Path) -> None:
    now = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    leaf = issue_local_certificates(
        tmp_path, ["controller-0"], hosts=["kafka.internal", "10.0.0.7", "::1"], clock=lambda: now
    )["controller-0"]
    certificate = x509.load_pem_x509_certificate(leaf.certfile.read_bytes())
    ca = x509.load_pem_x509_certificate(leaf.cafile.read_bytes())

    assert principal_of_certificate(leaf.certfile.read_bytes()) == "User:controller-0"
    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "kafka.internal"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "10.0.0.7", "::1"]
    eku = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    assert not certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    certificate.verify_directly_issued_by(ca)
    assert certificate.not_valid_after_utc - now == dt.timedelta(days=825)

    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert ca.not_valid_after_utc - now == dt.timedelta(days=3650)


@pytest.mark.integration
def test_a_second_run_reuses_the_ca_so_earlier_leaves_and_copies_of_ca_pem_stay_valid(
    tmp_path: Path, serve: list[_OneConnectionServer]
) -> None:
    first = issue_local_certificates(tmp_path, ["broker-1"])["broker-1"]
    ca_before = (tmp_path / CA_CERT_FILE).read_bytes(), (tmp_path / CA_KEY_FILE).read_bytes()
    kept_ca = tmp_path / "copy-of-ca.pem"
    kept_ca.write_bytes(ca_before[0])

    second = issue_local_certificates(tmp_path, ["alice"])["alice"]

    assert ((tmp_path / CA_CERT_FILE).read_bytes(), (tmp_path / CA_KEY_FILE).read_bytes()) == ca_before
    assert first.certfile.exists()
    server = _start(serve, _server_context(first, trust=kept_ca))
    assert _exchange(server, _client_context(second, trust=kept_ca), server_hostname="localhost") == b"ping\n"


@pytest.mark.unit
def test_keys_and_certificates_are_0600_in_a_0700_directory_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        issue_local_certificates(tmp_path / "tls", ["broker-1", "admin"])
    finally:
        os.umask(previous)

    directory = tmp_path / "tls"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    files = sorted(p.name for p in directory.iterdir())
    assert files == ["admin-key.pem", "admin.pem", "broker-1-key.pem", "broker-1.pem", "ca-key.pem", "ca.pem"]
    assert {name: stat.S_IMODE((directory / name).stat().st_mode) for name in files} == dict.fromkeys(files, 0o600)


@pytest.mark.integration
def test_a_client_certificate_from_another_ca_is_refused_by_the_broker(
    tmp_path: Path, serve: list[_OneConnectionServer]
) -> None:
    broker = issue_local_certificates(tmp_path / "ours", ["broker-1"])["broker-1"]
    stranger = issue_local_certificates(tmp_path / "theirs", ["mallory"])["mallory"]
    server = _start(serve, _server_context(broker, trust=broker.cafile))

    # The client trusts our CA (it would accept the broker); only its own certificate is foreign.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _exchange(server, _client_context(stranger, trust=broker.cafile), server_hostname="localhost")
    server.thread.join(TIMEOUT)

    assert isinstance(server.error, ssl.SSLError) and "certificate" in str(server.error).lower()
    assert server.peer_cert is None


@pytest.mark.integration
def test_a_broker_certificate_from_another_ca_is_refused_by_the_client(
    tmp_path: Path, serve: list[_OneConnectionServer]
) -> None:
    stranger = issue_local_certificates(tmp_path / "theirs", ["broker-1"])["broker-1"]
    client = issue_local_certificates(tmp_path / "ours", ["admin"])["admin"]
    server = _start(serve, _server_context(stranger, trust=client.cafile))

    with pytest.raises(ssl.SSLCertVerificationError):
        _exchange(server, _client_context(client, trust=client.cafile), server_hostname="localhost")


@pytest.mark.unit
def test_half_a_ca_is_reported_not_replaced(tmp_path: Path) -> None:
    issue_local_certificates(tmp_path, ["broker-1"])
    (tmp_path / CA_KEY_FILE).unlink()
    ca_pem = (tmp_path / CA_CERT_FILE).read_bytes()

    with pytest.raises(LocalClusterError, match=r"without .*ca-key\.pem"):
        issue_local_certificates(tmp_path, ["broker-1"])
    assert (tmp_path / CA_CERT_FILE).read_bytes() == ca_pem


@pytest.mark.unit
def test_a_ca_whose_key_is_not_its_own_is_reported(tmp_path: Path) -> None:
    issue_local_certificates(tmp_path / "a", ["x"])
    issue_local_certificates(tmp_path / "b", ["x"])
    (tmp_path / "a" / CA_KEY_FILE).write_bytes((tmp_path / "b" / CA_KEY_FILE).read_bytes())

    with pytest.raises(LocalClusterError, match="is not the key of"):
        issue_local_certificates(tmp_path / "a", ["x"])


@pytest.mark.unit
def test_an_expired_ca_is_reported_with_what_to_remove(tmp_path: Path) -> None:
    issue_local_certificates(tmp_path, ["x"], clock=lambda: dt.datetime(2020, 1, 1, tzinfo=dt.UTC))

    with pytest.raises(LocalClusterError, match=r"expired on 2029-12-29: remove ca\.pem and ca-key\.pem"):
        issue_local_certificates(tmp_path, ["x"], clock=lambda: dt.datetime(2031, 1, 1, tzinfo=dt.UTC))


@pytest.mark.unit
def test_a_leaf_never_outlives_its_ca(tmp_path: Path) -> None:
    issue_local_certificates(tmp_path, ["x"], clock=lambda: dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    leaf = issue_local_certificates(tmp_path, ["y"], clock=lambda: dt.datetime(2029, 6, 1, tzinfo=dt.UTC))["y"]

    ca = x509.load_pem_x509_certificate(leaf.cafile.read_bytes())
    assert x509.load_pem_x509_certificate(leaf.certfile.read_bytes()).not_valid_after_utc == ca.not_valid_after_utc


@pytest.mark.unit
@pytest.mark.parametrize("name", ["", "-x", "a b", "ca", "broker-key", "x/y", "é"])
def test_a_name_that_cannot_be_a_file_and_a_principal_is_refused_before_anything_is_written(
    tmp_path: Path, name: str
) -> None:
    with pytest.raises(InvalidArgument, match="certificate name"):
        issue_local_certificates(tmp_path / "tls", ["ok", name])
    assert not (tmp_path / "tls").exists()


@pytest.mark.unit
@pytest.mark.parametrize("host", ["", "bad host", "bücher.example"])
def test_a_host_that_is_neither_an_address_nor_a_dns_name_is_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(InvalidArgument, match="neither an IP address nor an ASCII DNS name"):
        issue_local_certificates(tmp_path, ["ok"], hosts=[host])


@pytest.mark.unit
def test_a_certificate_without_a_common_name_has_no_principal() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "no cn here")])
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    builder = x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
    builder = builder.serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    with pytest.raises(InvalidArgument, match="has no common name"):
        principal_of_certificate(pem)
    with pytest.raises(InvalidArgument, match="not a PEM certificate"):
        principal_of_certificate(b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
