"""TLS contexts and client identities for the Kafka-protocol ports, built from a process's ``[tls]`` and
``[security]`` settings, and the server context of its ``/metrics`` (``[metrics]``).

Servers present ``certfile``. With a ``cafile`` they ask every client for a certificate and verify the one sent
against it (a verified certificate's CN is the connection's principal); ``require_client_cert`` refuses clients
that send none. Clients verify the server against ``cafile``, present their own certificate when they have one and,
with ``[security] sasl_username``, log in with SCRAM (the password read from ``sasl_password_file``, never logged).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from orchestrator.errors import SettingsError
from orchestrator.settings import MetricsSettings, SecuritySettings, TlsSettings

from .client_security import ClientSecurity, SaslCredentials


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext | None:
    if not tls.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tls.cafile)
    if tls.certfile:
        ctx.load_cert_chain(tls.certfile, tls.keyfile)
    if tls.require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_OPTIONAL if tls.cafile else ssl.CERT_NONE
    return ctx


def metrics_ssl_context(metrics: MetricsSettings) -> ssl.SSLContext | None:
    """The server context of a process's ``/metrics`` (None: plain HTTP): its certificate and, with
    ``client_cafile``, client certificates signed by that CA required (mutual TLS)."""
    if metrics.certfile is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=metrics.client_cafile)
    ctx.load_cert_chain(metrics.certfile, metrics.keyfile)
    ctx.verify_mode = ssl.CERT_REQUIRED if metrics.client_cafile else ssl.CERT_NONE
    return ctx


def node_client_security(tls: TlsSettings, security: SecuritySettings) -> ClientSecurity:
    """How a controller or broker connects to the others: its TLS settings and, if set, its SCRAM login."""
    sasl = None
    if security.sasl_username is not None and security.sasl_password_file is not None:
        path = Path(security.sasl_password_file)
        try:
            password = path.read_text().strip()
        except OSError as exc:
            raise SettingsError(f"[security] sasl_password_file {path} cannot be read: {exc.strerror}") from None
        sasl = SaslCredentials(security.sasl_mechanism, security.sasl_username, password)
    return ClientSecurity(tls=tls.enabled, cafile=tls.cafile, certfile=tls.certfile, keyfile=tls.keyfile, sasl=sasl)
