"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: stored credentials, and one connection's exchange on either side.

The exchange and the derivation of a credential from a password are scramp's; this module adds Kafka's rules around
them. The one derivation scramp does not offer - keys from a salted password, which is what an
AlterUserScramCredentials client sends (Kafka's ``ScramFormatter.storedKey(clientKey(...))`` / ``serverKey``) - is
the RFC's two HMACs and one hash, with :mod:`hmac` and :mod:`hashlib`.

Invariants:
* :class:`ScramMechanism` holds Kafka's codes (``org.apache.kafka.clients.admin.ScramMechanism``: 1 SCRAM-SHA-256,
  2 SCRAM-SHA-512); they are written into the metadata log (``UserScramCredentialRecord``).
* A credential's iterations lie in Kafka's range, 4096 to 16384 (:class:`UnacceptableCredential` otherwise), and
  its salt is at least 12 bytes (scramp's floor, so a stored credential can always be used to log in).
* A salt or key never appears in a ``repr``, a log line or an error message; a password is never kept by this
  module's objects.
* A server exchange fails with one error and one message whatever went wrong (Kafka's "Authentication failed during
  authentication due to invalid credentials with SASL mechanism ..."). An unknown user is not even told apart by
  the round it fails in: the exchange runs against a decoy credential (its salt derived from the user name and a
  per-process secret, so a repeated probe sees the same salt) and fails at the proof, as a wrong password does (RFC
  5802 section 5.1). Why it failed is kept in :attr:`ScramServerExchange.failure_reason`, for the server's log only.
* User names: SCRAM's ``saslname`` escapes ``,`` as ``=2C`` and ``=`` as ``=3D``; scramp escapes and unescapes them,
  so :attr:`ScramServerExchange.username` is the plain name. scramp also applies SASLprep (RFC 4013) to user names
  and passwords, which Kafka's Java client does not: the two agree on every name and password that SASLprep leaves
  unchanged (printable ASCII, for one), and a password with control characters is refused here.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NoReturn

from orchestrator.errors import (
    IllegalSaslState,
    SaslAuthenticationFailed,
    SaslExchangeFailed,
    UnacceptableCredential,
    UnsupportedSaslMechanism,
)

if TYPE_CHECKING:
    import scramp


def _scramp() -> Any:  # scramp ships no type information
    """The SCRAM library, imported at the first exchange or credential: a process or command that never
    authenticates with SCRAM starts without it (and without the package metadata it reads on import)."""
    import scramp
    import scramp.utils

    return scramp


MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations (both mechanisms)
MAX_ITERATIONS = 16384  # Kafka's ScramControlManager.MAX_ITERATIONS
DEFAULT_ITERATIONS = 4096  # what kafka-configs.sh uses when none is given
MIN_SALT_BYTES = 12  # scramp refuses a shorter salt in the exchange


class ScramMechanism(IntEnum):
    """Kafka's SCRAM mechanism codes (AlterUserScramCredentials, DescribeUserScramCredentials, the metadata log)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL name: ``SCRAM-SHA-256``, ``SCRAM-SHA-512``."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        if self is ScramMechanism.UNKNOWN:
            raise UnsupportedSaslMechanism("unknown SCRAM mechanism")
        return self.name.removeprefix("SCRAM_").replace("_", "").lower()  # sha256, sha512

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism:
        """The mechanism a SASL name names; :class:`UnsupportedSaslMechanism` for any other name."""
        for m in (cls.SCRAM_SHA_256, cls.SCRAM_SHA_512):
            if m.mechanism_name == name:
                return m
        raise UnsupportedSaslMechanism(f"SASL mechanism {name!r} is not SCRAM-SHA-256 or SCRAM-SHA-512")

    @classmethod
    def from_code(cls, code: int) -> ScramMechanism:
        """The mechanism of a wire code; UNKNOWN for a code Kafka does not define (the caller refuses it)."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


SCRAM_MECHANISM_NAMES = tuple(m.mechanism_name for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512))


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server stores for one user and mechanism (RFC 5802 section 3): never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        # Secrets: only their sizes are shown.
        return (
            f"ScramCredential(salt=<{len(self.salt)} bytes>, stored_key=<{len(self.stored_key)} bytes>, "
            f"server_key=<{len(self.server_key)} bytes>, iterations={self.iterations})"
        )


def check_iterations(iterations: int) -> None:
    """Kafka's bounds on a credential's iterations (:class:`UnacceptableCredential` outside them)."""
    if iterations < MIN_ITERATIONS:
        raise UnacceptableCredential(f"too few iterations: {iterations} (at least {MIN_ITERATIONS})")
    if iterations > MAX_ITERATIONS:
        raise UnacceptableCredential(f"too many iterations: {iterations} (at most {MAX_ITERATIONS})")


def _check_salt(salt: bytes) -> None:
    if len(salt) < MIN_SALT_BYTES:
        raise UnacceptableCredential(f"the salt is {len(salt)} bytes; at least {MIN_SALT_BYTES} are needed")


def _scramp_mechanism(mechanism: ScramMechanism) -> scramp.ScramMechanism:
    if mechanism is ScramMechanism.UNKNOWN:
        raise UnsupportedSaslMechanism("unknown SCRAM mechanism")
    return _scramp().ScramMechanism(mechanism.mechanism_name)


def credential_from_password(
    mechanism: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS, *, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for ``password`` (a random salt unless one is given)."""
    check_iterations(iterations)
    if salt is not None:
        _check_salt(salt)
    try:
        made_salt, stored_key, server_key, made_iterations = _scramp_mechanism(mechanism).make_auth_info(
            password, iteration_count=iterations, salt=salt
        )
    except _scramp().ScramException as exc:
        # scramp's messages say what is wrong with the password's characters, never the password itself.
        raise UnacceptableCredential(f"the password cannot be used: {exc}") from None
    return ScramCredential(bytes(made_salt), stored_key, server_key, int(made_iterations))


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, iterations)`` (PBKDF2 with the mechanism's HMAC): what an AlterUserScramCredentials
    client sends, so that the server never sees the password. The password is SASLprep'd as scramp does."""
    check_iterations(iterations)
    _check_salt(salt)
    try:
        prepared: str = _scramp().utils.saslprep(password)
    except _scramp().ScramException as exc:
        raise UnacceptableCredential(f"the password cannot be used: {exc}") from None
    return hashlib.pbkdf2_hmac(mechanism.hash_name, prepared.encode("utf-8"), salt, iterations)


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The credential an AlterUserScramCredentials upsertion describes (RFC 5802 section 3):
    ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))``, ``ServerKey = HMAC(SaltedPassword, "Server Key")``."""
    if mechanism is ScramMechanism.UNKNOWN:
        raise UnsupportedSaslMechanism("unknown SCRAM mechanism")
    check_iterations(iterations)
    _check_salt(salt)
    digest = mechanism.hash_name
    size = hashlib.new(digest).digest_size
    if len(salted_password) != size:
        raise UnacceptableCredential(
            f"the salted password is {len(salted_password)} bytes; {mechanism.mechanism_name} makes {size}"
        )
    client_key = hmac.digest(salted_password, b"Client Key", digest)
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.digest(salted_password, b"Server Key", digest)
    return ScramCredential(bytes(salt), stored_key, server_key, iterations)


# --- the exchange -----------------------------------------------------------------------------------------------

CredentialLookup = Callable[[str], ScramCredential | None]
"""A user name -> that user's credential for the exchange's mechanism, or None when there is none."""

_DECOY_SECRET = secrets.token_bytes(32)  # per process: the decoy salts of unknown users


def authentication_failed_message(mechanism: ScramMechanism) -> str:
    """Kafka's one message for every failed SASL exchange (SaslServerAuthenticator)."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        f"{mechanism.mechanism_name}"
    )


class ScramServerExchange:
    """The server side of one connection's SCRAM exchange: two :meth:`step` calls, client-first then client-final.

    Each returns the server's answer (server-first, then server-final); after the second, :attr:`done` is true and
    :attr:`username` names who logged in. Any failure raises :class:`SaslAuthenticationFailed` with Kafka's one
    message and ends the exchange; a step after the end raises :class:`IllegalSaslState`.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        *,
        decoy_secret: bytes = _DECOY_SECRET,
        token_bytes: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._decoy_secret = decoy_secret
        self._token_bytes = token_bytes
        self._server = _scramp_mechanism(mechanism).make_server(self._auth_info)
        self._round = 0
        self._ended = False
        self._claimed: str | None = None  # the name in client-first
        self._known = False
        self._username: str | None = None
        self.failure_reason: str | None = None  # for the server's log; never sent to the client

    @property
    def done(self) -> bool:
        """True once the client proved who it is (the server-final message is its last answer)."""
        return self._username is not None

    @property
    def username(self) -> str | None:
        """The authenticated user name (unescaped), or None until :attr:`done`."""
        return self._username

    def step(self, client_message: bytes) -> bytes:
        if self._ended:
            raise IllegalSaslState(f"the {self.mechanism.mechanism_name} exchange has already ended")
        try:
            text = client_message.decode("utf-8")
        except UnicodeDecodeError:
            self._fail("the client's message is not UTF-8")
        if self._round == 0:
            return self._client_first(text)
        return self._client_final(text)

    def _client_first(self, text: str) -> bytes:
        try:
            self._server.set_client_first(text)
            answer: str = self._server.get_server_first()
        except _scramp().ScramException as exc:
            cause = f" ({exc.__cause__!r})" if exc.__cause__ is not None else ""  # e.g. the lookup itself failed
            self._fail(f"client-first refused: {exc}{cause}")
        self._round = 1
        return answer.encode("utf-8")

    def _client_final(self, text: str) -> bytes:
        try:
            self._server.set_client_final(text)
            answer: str = self._server.get_server_final()
        except _scramp().ScramException as exc:
            self._fail("unknown user" if not self._known else f"client-final refused: {exc}")
        if not self._known:  # unreachable in practice: nobody proves a random key
            self._fail("unknown user")
        self._ended = True
        self._username = self._claimed
        return answer.encode("utf-8")

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's lookup: the user's credential, or a decoy that no proof matches."""
        self._claimed = username
        credential = self._lookup(username)
        if credential is None:
            return self._decoy(username)
        self._known = True
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _decoy(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        size = hashlib.new(self.mechanism.hash_name).digest_size
        seed = f"{self.mechanism.mechanism_name}\x00{username}".encode()
        salt = hmac.digest(self._decoy_secret, seed, "sha256")
        return salt, self._token_bytes(size), self._token_bytes(size), DEFAULT_ITERATIONS

    def _fail(self, reason: str) -> NoReturn:
        self._ended = True
        self.failure_reason = reason
        raise SaslAuthenticationFailed(authentication_failed_message(self.mechanism))


class ScramClientExchange:
    """The client side of one SCRAM exchange: :meth:`first`, then :meth:`step` with the server-first message, then
    :meth:`finish` with the server-final message, which checks the server's signature (so a server that does not
    hold the credential is found out). Failures raise :class:`SaslExchangeFailed`."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str) -> None:
        self.mechanism = mechanism
        try:
            self._client = _scramp().ScramClient([_scramp_mechanism(mechanism).name], username, password)
        except _scramp().ScramException as exc:
            detail = f"{mechanism.mechanism_name}: the user name or password cannot be used: {exc}"
            raise SaslExchangeFailed(detail) from None
        self._finished = False

    def first(self) -> bytes:
        """The client-first message (``n,,n=<saslname>,r=<nonce>``)."""
        return self._run("client-first", lambda: self._client.get_client_first())

    def step(self, server_first: bytes) -> bytes:
        """The client-final message, with the proof, for the server-first message."""

        def final() -> str:
            self._client.set_server_first(server_first.decode("utf-8"))
            message: str = self._client.get_client_final()
            return message

        return self._run("client-final", final)

    def finish(self, server_final: bytes) -> None:
        """Check the server-final message: the server's signature must be the one only the credential gives."""

        def check() -> str:
            self._client.set_server_final(server_final.decode("utf-8"))
            return ""

        self._run("server-final", check)
        self._finished = True

    @property
    def done(self) -> bool:
        return self._finished

    def _run(self, what: str, action: Callable[[], str]) -> bytes:
        try:
            return action().encode("utf-8")
        except (_scramp().ScramException, UnicodeDecodeError) as exc:
            raise SaslExchangeFailed(f"{self.mechanism.mechanism_name} {what}: {exc}") from None
