"""Who is asking: SASL/SCRAM logins and certificate principals on a KafkaServer, over loopback.

Every server binds 127.0.0.1 on port 0 and is stopped by its test; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Coroutine
from typing import Any

import pytest
import trustme
from structlog.testing import capture_logs

from orchestrator.errors import BrokerNotAvailable, SaslAuthenticationFailed, UnsupportedSaslMechanism
from orchestrator.net import KafkaConnection, KafkaServer
from orchestrator.net.client_security import SaslCredentials
from orchestrator.net.server import Authentication
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request, decode_response, encode_request
from orchestrator.protocol.framing import read_frame as read_frame_
from orchestrator.security.scram import ScramMechanism, credential_from_password

pytestmark = pytest.mark.integration

DESCRIBE = ApiKey.DESCRIBE_TIERED_STATE
PASSWORD = "correct horse battery staple"
USERS = {
    (user, mechanism.value): credential_from_password(mechanism, PASSWORD)
    for user in ("alice", "bob")
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
}


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20.0))


async def whoami(request: Request) -> dict[str, Any]:
    """Answers DescribeTieredState with one 'topic' named after the request's principal and host."""
    name = f"{request.principal}@{request.client_host}"
    return {"error_code": 0, "topics": [{"name": name, "pending_brokers": []}]}


def lookup(mechanism: str, user: str) -> Any:
    return USERS.get((user, ScramMechanism.from_name(mechanism).value))


SCRAM = Authentication(sasl_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"), credentials=lookup)


def server(authentication: Authentication = SCRAM, **kwargs: Any) -> KafkaServer:
    return KafkaServer(
        name="test", host="127.0.0.1", port=0, handlers={DESCRIBE: whoami}, authentication=authentication, **kwargs
    )


async def principal_of(conn: KafkaConnection) -> str:
    body = await conn.request(DESCRIBE, 0, {"topics": None}, timeout_s=5)
    return str(body["topics"][0]["name"])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_scram_login_makes_the_user_the_connections_principal(mechanism):
    async def main() -> None:
        async with server() as srv:
            sasl = SaslCredentials(mechanism, "alice", PASSWORD)
            async with await KafkaConnection.open(*srv.address, sasl=sasl) as conn:
                assert await principal_of(conn) == "User:alice@127.0.0.1"
                versions = await conn.api_versions()
                assert versions[ApiKey.SASL_HANDSHAKE] == (1, 1)

    run(main())


@pytest.mark.parametrize("user", ["alice", "mallory"])
def test_a_wrong_password_and_an_unknown_user_are_refused_alike_and_logged(user):
    async def main() -> None:
        async with server() as srv:
            with capture_logs() as logs, pytest.raises(SaslAuthenticationFailed) as failure:
                await KafkaConnection.open(*srv.address, sasl=SaslCredentials("SCRAM-SHA-256", user, "wrong"))
            assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in failure.value.message
            assert "wrong" not in failure.value.message
            assert srv.authentication_failures == 1
            assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["net.authentication_failed"]

    run(main())


def test_a_mechanism_not_offered_is_refused_with_the_ones_that_are():
    async def main() -> None:
        only_512 = Authentication(sasl_mechanisms=("SCRAM-SHA-512",), credentials=lookup)
        async with server(only_512) as srv:
            with pytest.raises(UnsupportedSaslMechanism, match="SCRAM-SHA-512"):
                await KafkaConnection.open(*srv.address, sasl=SaslCredentials("SCRAM-SHA-256", "alice", PASSWORD))

    run(main())


def test_a_request_before_the_login_closes_the_connection_and_is_never_served():
    async def main() -> None:
        served: list[str] = []

        async def spy(request: Request) -> dict[str, Any]:
            served.append(request.principal)
            return await whoami(request)

        srv = KafkaServer(name="t", host="127.0.0.1", port=0, handlers={DESCRIBE: spy}, authentication=SCRAM)
        async with srv:
            async with await KafkaConnection.open(*srv.address) as conn:
                assert ApiKey.SASL_AUTHENTICATE in await conn.api_versions()  # ApiVersions is served before login
                with pytest.raises(BrokerNotAvailable, match=r"requires TLS or SASL.*--command-config"):
                    await principal_of(conn)
            assert served == [] and srv.unauthenticated_requests == 1

    run(main())


def test_a_second_handshake_on_a_logged_in_connection_is_illegal_and_closes_it():
    async def main() -> None:
        async with server() as srv:
            sasl = SaslCredentials("SCRAM-SHA-512", "bob", PASSWORD)
            async with await KafkaConnection.open(*srv.address, sasl=sasl) as conn:
                answer = await conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}, timeout_s=5)
                assert answer["error_code"] == 34  # ILLEGAL_SASL_STATE
                with pytest.raises(BrokerNotAvailable):
                    await principal_of(conn)

    run(main())


def test_random_bytes_as_sasl_tokens_fail_the_login_and_the_server_serves_on():
    async def main() -> None:
        async with server() as srv:
            host, port = srv.address
            for junk in (b"", b"\xff" * 64, b"n,,n=alice", b"p=" + bytes(range(256))):
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": "SCRAM-SHA-256"}))
                writer.write(encode_request(ApiKey.SASL_AUTHENTICATE, 1, 2, {"auth_bytes": junk}))
                await writer.drain()
                _, handshake = decode_response(await read_frame_(reader), ApiKey.SASL_HANDSHAKE, 1)
                _, answer = decode_response(await read_frame_(reader), ApiKey.SASL_AUTHENTICATE, 1)
                assert handshake["error_code"] == 0 and answer["error_code"] == 58
                assert await reader.read() == b""  # closed by the server
                writer.close()
            sasl = SaslCredentials("SCRAM-SHA-256", "alice", PASSWORD)
            async with await KafkaConnection.open(*srv.address, sasl=sasl) as conn:
                assert await principal_of(conn) == "User:alice@127.0.0.1"

    run(main())


class Tls:
    def __init__(self) -> None:
        ca = trustme.CA()
        self.server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(self.server)
        ca.configure_trust(self.server)
        self.server.verify_mode = ssl.CERT_OPTIONAL
        self.with_cert = ssl.create_default_context()
        ca.configure_trust(self.with_cert)
        ca.issue_cert("broker-7", common_name="broker-7").configure_cert(self.with_cert)
        self.without_cert = ssl.create_default_context()
        ca.configure_trust(self.without_cert)


def test_a_verified_client_certificate_names_the_principal_and_needs_no_login():
    async def main() -> None:
        tls = Tls()
        async with server(ssl_context=tls.server) as srv:
            async with await KafkaConnection.open(*srv.address, ssl_context=tls.with_cert) as conn:
                assert await principal_of(conn) == "User:broker-7@127.0.0.1"
            sasl = SaslCredentials("SCRAM-SHA-512", "alice", PASSWORD)  # no certificate: SCRAM over TLS
            async with await KafkaConnection.open(*srv.address, ssl_context=tls.without_cert, sasl=sasl) as conn:
                assert await principal_of(conn) == "User:alice@127.0.0.1"
            async with await KafkaConnection.open(*srv.address, ssl_context=tls.without_cert) as conn:
                with pytest.raises(BrokerNotAvailable):  # neither: refused
                    await principal_of(conn)

    run(main())


def test_a_plaintext_client_of_a_tls_listener_hears_that_the_port_wants_tls_or_sasl():
    async def main() -> None:
        async with server(ssl_context=Tls().server) as srv, await KafkaConnection.open(*srv.address) as conn:
            with pytest.raises(BrokerNotAvailable, match=r"requires TLS or SASL.*client properties"):
                await conn.api_versions(timeout_s=5)

    run(main())


def test_without_authentication_everyone_is_anonymous():
    async def main() -> None:
        async with server(Authentication()) as srv, await KafkaConnection.open(*srv.address) as conn:
            assert await principal_of(conn) == "User:ANONYMOUS@127.0.0.1"
            assert ApiKey.SASL_HANDSHAKE not in await conn.api_versions()

    run(main())
