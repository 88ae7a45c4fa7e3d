"""A local cluster's security (``cluster up --tls --sasl --acls``): the files it needs and the settings each
process gets.

* ``--tls``: a CA and one certificate per process (``CN=controller-<id>``, ``CN=broker-<id>``) and one for the
  operator (``CN=admin``) under ``DIR/security/tls/``; every port speaks TLS, asks for a client certificate and
  takes the principal of a verified one. The processes know each other by their certificates.
* ``--sasl``: every port asks for a SCRAM-SHA-256/512 login from a connection without a certificate. The operator's
  user ``admin`` (and, without ``--tls``, one user per process) gets a random password in
  ``DIR/security/passwords/``; their credentials (salted and hashed) are written into the empty metadata log
  before the first controller starts (:mod:`orchestrator.controller.bootstrap`).
* ``--acls``: the authorizer is on and ``User:admin`` is its only super user: everyone else needs ACLs
  (``tieredctl acls add``).
* With any of them, only the processes' own principals may register, heartbeat, forward and send
  DisableRemoteTopic.
* With ``--tls`` or ``--sasl``, the other two ports of the cluster require authentication too: the embedded S3
  serves only requests signed with a random key pair kept in ``DIR/security/s3-credentials`` (:mod:`.s3_keys`),
  and each controller's and broker's ``/metrics`` is HTTPS with its certificate and requires a client certificate
  signed by the cluster's CA (``--sasl`` alone makes the CA and certificates for this). The operator's certificate
  (``CN=admin``) is the one a Prometheus scrape uses.

``DIR/client.properties`` says how the operator connects (the CLI reads it when it falls back to the local
cluster; Kafka clients take it as it is). Every file here is 0600 in 0700 directories.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.controller.bootstrap import bootstrap_scram_users
from orchestrator.local.certificates import CA_CERT_FILE, issue_local_certificates
from orchestrator.local.s3_keys import S3_CREDENTIALS_FILE, KeyPair, write_key_pair
from orchestrator.local.settings_files import Tables
from orchestrator.local.state import CLIENT_PROPERTIES
from orchestrator.metadata.store import MetadataStore
from orchestrator.net.client_properties import write_client_properties
from orchestrator.net.client_security import PLAINTEXT, ClientSecurity, SaslCredentials
from orchestrator.private_files import private_dir, write_private
from orchestrator.security.scram import ScramMechanism, credential_from_password
from orchestrator.settings import SCRAM_MECHANISMS

ADMIN = "admin"
CLIENT_MECHANISM = "SCRAM-SHA-512"
TLS_DIR = "security/tls"
PASSWORD_DIR = "security/passwords"


@dataclass(frozen=True)
class LocalSecurity:
    tls: bool = False
    sasl: bool = False
    acls: bool = False

    @property
    def on(self) -> bool:
        return self.tls or self.sasl or self.acls


def node_name(role: str, node: int) -> str:
    return f"{role}-{node}"


@dataclass(frozen=True)
class OperatorCertificate:
    """The operator's certificate (``CN=admin``), its key and the cluster's CA: what a Prometheus scrape of a
    secured cluster's ``/metrics`` presents (``tls_config``: ``cert_file``, ``key_file``, ``ca_file``)."""

    cafile: Path
    certfile: Path
    keyfile: Path

    @classmethod
    def of(cls, directory: Path) -> OperatorCertificate:
        tls = directory / TLS_DIR
        return cls(tls / CA_CERT_FILE, tls / f"{ADMIN}.pem", tls / f"{ADMIN}-key.pem")


def prepare(
    directory: Path, security: LocalSecurity, nodes: list[tuple[str, int]], *, s3_key_pair: bool = False
) -> tuple[dict[str, Tables], ClientSecurity]:
    """Create the files of a new cluster's ``security`` and return each node's settings tables (by
    :func:`node_name`) and the operator's connection; writes ``client.properties``. With ``s3_key_pair``, makes
    the pair its embedded S3 will require (:data:`~.s3_keys.S3_CREDENTIALS_FILE`)."""
    names = [node_name(role, node) for role, node in nodes]
    tables: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in names}
    operator = PLAINTEXT
    if s3_key_pair:
        private_dir((directory / S3_CREDENTIALS_FILE).parent)
        write_key_pair(directory / S3_CREDENTIALS_FILE, KeyPair.generate())
    if not security.on:
        return dict(tables), operator
    private_dir(directory / Path(TLS_DIR).parent)  # 0700 itself: mkdir's parents=True gives parents the umask's mode
    principals = [f"User:{name}" for name in names]
    common: dict[str, Any] = {"cluster_principals": principals}
    if security.acls:
        common |= {"authorizer": True, "super_users": [f"User:{ADMIN}"]}
    if security.sasl:
        common["sasl_mechanisms"] = list(SCRAM_MECHANISMS)
    for name in names:
        tables[name]["security"] = dict(common)
    if security.tls or security.sasl:
        issued = issue_local_certificates(private_dir(directory / TLS_DIR), [*names, ADMIN])
        for name in names:
            cert = issued[name]
            files = {"certfile": str(cert.certfile), "keyfile": str(cert.keyfile)}
            tables[name]["metrics"] = {**files, "client_cafile": str(cert.cafile)}
            if security.tls:
                tables[name]["tls"] = {**files, "cafile": str(cert.cafile)}
    if security.tls:
        admin_cert = issued[ADMIN]
        operator = ClientSecurity(
            tls=True,
            cafile=str(admin_cert.cafile),
            certfile=None if security.sasl else str(admin_cert.certfile),
            keyfile=None if security.sasl else str(admin_cert.keyfile),
        )
    if security.sasl:
        passwords = private_dir(directory / PASSWORD_DIR)
        logins = [ADMIN] if security.tls else [ADMIN, *names]  # with TLS the processes log in by certificate
        for login in logins:
            write_private(passwords / login, secrets.token_urlsafe(24) + "\n")
        if not security.tls:
            for name in names:
                tables[name]["security"] |= {
                    "sasl_mechanism": CLIENT_MECHANISM,
                    "sasl_username": name,
                    "sasl_password_file": str(passwords / name),
                }
        operator = ClientSecurity(
            tls=operator.tls,
            cafile=operator.cafile,
            sasl=SaslCredentials(CLIENT_MECHANISM, ADMIN, password_of(directory, ADMIN)),
        )
    write_client_properties(directory / CLIENT_PROPERTIES, operator)
    return dict(tables), operator


def password_of(directory: Path, login: str) -> str:
    return (directory / PASSWORD_DIR / login).read_text().strip()


def bootstrap_logins(directory: Path, store: MetadataStore) -> None:
    """Write the credentials of every login ``prepare`` made a password for into the new cluster's empty log."""
    passwords = directory / PASSWORD_DIR
    credentials = {
        (path.name, mechanism.value): credential_from_password(mechanism, path.read_text().strip())
        for path in sorted(passwords.iterdir())
        for mechanism in map(ScramMechanism.from_name, SCRAM_MECHANISMS)
    }
    bootstrap_scram_users(store, credentials)
