"""TLS contexts for the Kafka-protocol ports, built from a process's ``[tls]`` settings (None when TLS is off).

Servers present ``certfile`` and, with ``require_client_cert``, accept only clients whose certificate is signed by
``cafile``; clients verify the server against ``cafile`` and present their own certificate when they have one.
"""

from __future__ import annotations

import ssl

from orchestrator.settings import TlsSettings


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext | None:
    if not tls.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tls.cafile)
    if tls.certfile:
        ctx.load_cert_chain(tls.certfile, tls.keyfile)
    ctx.verify_mode = ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_NONE
    return ctx


def client_ssl_context(tls: TlsSettings) -> ssl.SSLContext | None:
    if not tls.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.cafile)
    if tls.certfile:
        ctx.load_cert_chain(tls.certfile, tls.keyfile)
    return ctx
