"""How a client (the CLI, a broker, a standby forwarding a write) proves who it is to a Kafka-protocol port.

:class:`ClientSecurity` is what a Kafka client's ``security.protocol`` and ``ssl.*``/``sasl.*`` properties say,
already parsed: TLS or not (with the CA to trust and, for mutual TLS, a certificate and key), and SASL/SCRAM
credentials or not. The CLI builds one from ``--command-config``; a controller or broker from its settings.

Invariant: the password never appears in a ``repr``, a log line or an error message.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from orchestrator.settings import SCRAM_MECHANISMS


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    mechanism: str  # one of SCRAM_MECHANISMS
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"SASL mechanism {self.mechanism!r} is not served; use one of {list(SCRAM_MECHANISMS)}")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    tls: bool = False
    cafile: str | None = None  # None with tls: the system's trusted CAs
    certfile: str | None = None  # mutual TLS: this client's certificate (PEM) ...
    keyfile: str | None = None  # ... and its key
    sasl: SaslCredentials | None = None

    @property
    def protocol(self) -> str:
        """Kafka's security.protocol name for this configuration."""
        if self.sasl is not None:
            return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"
        return "SSL" if self.tls else "PLAINTEXT"

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        return ctx


PLAINTEXT = ClientSecurity()
