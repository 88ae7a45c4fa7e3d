"""``--command-config FILE``: a Kafka client properties file, read into a :class:`ClientSecurity`.

As ``kafka-configs.sh --command-config`` takes one, with librdkafka's property names (what confluent-kafka and
kcat read) and the Java client's where they mean the same thing:

==========================================  ==================================================================
``security.protocol``                       PLAINTEXT (the default), SSL, SASL_PLAINTEXT or SASL_SSL, any case
``ssl.ca.location``                         PEM file of the CA certificates to trust (else the system's)
``ssl.certificate.location``                PEM certificate for mutual TLS (its key in it, or in ...)
``ssl.key.location``                        ... an unencrypted PEM key
``ssl.endpoint.identification.algorithm``   ``https`` only: the server's name is always checked
``sasl.mechanism`` / ``sasl.mechanisms``    SCRAM-SHA-256 or SCRAM-SHA-512
``sasl.username``, ``sasl.password``        the SCRAM credentials, or in Java's form:
``sasl.jaas.config``                        ``org.apache.kafka.common.security.scram.ScramLoginModule required
                                            username="..." password="...";``
==========================================  ==================================================================

The file is read by Java's ``.properties`` rules (``key=value``, ``key: value``, ``key value``, ``#`` and ``!``
comments, backslash continuations and escapes, ``\\uXXXX``) by :mod:`javaproperties`, as UTF-8 (ASCII with
``\\uXXXX`` escapes is what :func:`write_client_properties` writes, and what Java reads the same way); a key given
twice keeps its last value, as in Java. Relative paths are relative to the file's directory.

Invariants:
* Any mistake is a :class:`CommandConfigError` naming the file, the line and the property, and saying what to
  write instead; nothing is sent anywhere before the whole file is understood.
* No error message holds a secret: values are echoed only for ``security.protocol``, the mechanism and file paths,
  and any text to be echoed that contains a password given in the file (``sasl.password``, the JAAS password, a
  keystore's) is withheld; a JAAS problem is described by its position, never by its text.
* A file that says SSL files, or SASL credentials, without the ``security.protocol`` that uses them is refused
  rather than silently connecting in plaintext or without credentials.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import InvalidArgument
from orchestrator.net.client_security import ClientSecurity, SaslCredentials
from orchestrator.private_files import write_private
from orchestrator.settings import SCRAM_MECHANISMS

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

SECURITY_PROTOCOL = "security.protocol"
SSL_CA_LOCATION = "ssl.ca.location"
SSL_CERTIFICATE_LOCATION = "ssl.certificate.location"
SSL_KEY_LOCATION = "ssl.key.location"
SSL_ENDPOINT_IDENTIFICATION = "ssl.endpoint.identification.algorithm"
SASL_MECHANISM = "sasl.mechanism"
SASL_MECHANISMS = "sasl.mechanisms"  # librdkafka's older name, an alias
SASL_USERNAME = "sasl.username"
SASL_PASSWORD = "sasl.password"
SASL_JAAS_CONFIG = "sasl.jaas.config"

KNOWN_PROPERTIES = (
    SECURITY_PROTOCOL,
    SSL_CA_LOCATION,
    SSL_CERTIFICATE_LOCATION,
    SSL_KEY_LOCATION,
    SSL_ENDPOINT_IDENTIFICATION,
    SASL_MECHANISM,
    SASL_MECHANISMS,
    SASL_USERNAME,
    SASL_PASSWORD,
    SASL_JAAS_CONFIG,
)
_SSL_PROPERTIES = (SSL_CA_LOCATION, SSL_CERTIFICATE_LOCATION, SSL_KEY_LOCATION, SSL_ENDPOINT_IDENTIFICATION)
_SASL_PROPERTIES = (SASL_MECHANISM, SASL_MECHANISMS, SASL_USERNAME, SASL_PASSWORD, SASL_JAAS_CONFIG)

_PEM_HINT = (
    f"give PEM files instead: {SSL_CA_LOCATION} (the CA to trust), {SSL_CERTIFICATE_LOCATION} and "
    f"{SSL_KEY_LOCATION} (this client's certificate and key)"
)
_REFUSED_PROPERTIES = {
    "ssl.truststore.location": f"is a Java keystore (JKS/PKCS12), which is not read here; {_PEM_HINT}",
    "ssl.truststore.password": f"belongs to a Java keystore (JKS/PKCS12), which is not read here; {_PEM_HINT}",
    "ssl.truststore.type": f"belongs to a Java keystore (JKS/PKCS12), which is not read here; {_PEM_HINT}",
    "ssl.truststore.certificates": f"(inline PEM) is not read here; {_PEM_HINT}",
    "ssl.keystore.location": f"is a Java keystore (JKS/PKCS12), which is not read here; {_PEM_HINT}",
    "ssl.keystore.password": f"belongs to a Java keystore (JKS/PKCS12), which is not read here; {_PEM_HINT}",
    "ssl.keystore.type": f"belongs to a Java keystore (JKS/PKCS12), which is not read here; {_PEM_HINT}",
    "ssl.keystore.key": f"(inline PEM) is not read here; {_PEM_HINT}",
    "ssl.keystore.certificate.chain": f"(inline PEM) is not read here; {_PEM_HINT}",
    "ssl.ca.pem": f"(inline PEM) is not read here; {_PEM_HINT}",
    "ssl.certificate.pem": f"(inline PEM) is not read here; {_PEM_HINT}",
    "ssl.key.pem": f"(inline PEM) is not read here; {_PEM_HINT}",
    "ssl.key.password": (
        "(an encrypted key) is not supported: write the key unencrypted to a file only you can read "
        "('openssl pkey -in key.pem -out plain-key.pem', then chmod 600) and give that as ssl.key.location"
    ),
}
_SECRET_PROPERTIES = (
    SASL_PASSWORD,
    SASL_JAAS_CONFIG,
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.password",
    "ssl.keystore.key",
    "ssl.key.pem",
)

# What other SASL mechanisms and JAAS login modules are, to say which one was asked for.
_UNSERVED_MECHANISMS = ("PLAIN", "GSSAPI", "OAUTHBEARER")
_SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_SCRAM_JAAS_TEMPLATE = f'{_SCRAM_LOGIN_MODULE} required username="..." password="...";'
_OTHER_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": "OAUTHBEARER",
    "com.sun.security.auth.module.Krb5LoginModule": "GSSAPI",
}
_JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")
_PROPERTY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class CommandConfigError(InvalidArgument):
    """A ``--command-config`` file that cannot be used; the message names the file, the line and the property."""

    name, retriable = "INVALID_COMMAND_CONFIG", False
    hint = "--command-config takes a Kafka client properties file: librdkafka's property names, PEM files"

    def __init__(self, message: str, *, path: Path, line: int | None = None, prop: str | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {prop}: {message}" if prop else f"{where}: {message}")
        self.path = path
        self.line = line
        self.prop = prop


@dataclass(frozen=True, slots=True)
class _Entry:
    value: str
    line: int


class _Reader:
    """One file's entries, and errors about them that never echo a secret."""

    def __init__(self, path: Path, entries: dict[str, _Entry]) -> None:
        self.path = path
        self.entries = entries
        self.secrets = [entries[key].value for key in _SECRET_PROPERTIES if key in entries and entries[key].value]
        if SASL_JAAS_CONFIG in entries:
            try:
                jaas_password = _parse_jaas(entries[SASL_JAAS_CONFIG].value)[1].get("password")
            except _JaasSyntaxError:
                jaas_password = None
            if jaas_password:
                self.secrets.append(jaas_password)

    def fail(self, prop: str | None, message: str, *, line: int | None = None) -> CommandConfigError:
        if line is None and prop is not None and prop in self.entries:
            line = self.entries[prop].line
        return CommandConfigError(message, path=self.path, line=line, prop=prop)

    def shown(self, text: str) -> str:
        """``text`` quoted for a message, or a placeholder when a password given in the file is inside it."""
        if any(secret in text for secret in self.secrets):
            return "(not shown: it contains a password given in this file)"
        return repr(text)

    def get(self, prop: str) -> str | None:
        entry = self.entries.get(prop)
        if entry is None:
            return None
        if not entry.value.strip() and prop != SASL_PASSWORD:
            raise self.fail(prop, "has no value: give one, or remove the line")
        return entry.value.strip() if prop != SASL_PASSWORD else entry.value

    def file(self, prop: str) -> str | None:
        """The path ``prop`` names, relative to the properties file's directory, checked to be a file."""
        value = self.get(prop)
        if value is None:
            return None
        path = self.path.absolute().parent / value
        if not path.exists():
            raise self.fail(prop, f"file {self.shown(str(path))} does not exist: give the path of a PEM file")
        if not path.is_file():
            raise self.fail(prop, f"{self.shown(str(path))} is not a file: give the path of a PEM file")
        return str(path)


def read_command_config(path: Path) -> ClientSecurity:
    """The :class:`ClientSecurity` the Kafka client properties file ``path`` describes."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CommandConfigError(
            f"cannot be read ({exc.strerror or exc}): give a Kafka client properties file", path=path
        ) from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CommandConfigError(
            "is not UTF-8: save the file as UTF-8, or write other characters as \\uXXXX escapes", path=path, line=line
        ) from exc
    return parse_command_config(text, path=path)


def parse_command_config(text: str, *, path: Path) -> ClientSecurity:
    """:func:`read_command_config` for the text of a file (``path`` names it and anchors relative paths)."""
    reader = _Reader(path, _entries(text, path=path))
    for key, entry in sorted(reader.entries.items(), key=lambda item: item[1].line):
        if key in _REFUSED_PROPERTIES:
            raise reader.fail(key, _REFUSED_PROPERTIES[key])
        if key not in KNOWN_PROPERTIES:
            # A stray line (a value continued by mistake, a password pasted alone) reads as a key: not echoed.
            if not _PROPERTY_NAME.fullmatch(key) or any(secret in key for secret in reader.secrets):
                raise reader.fail(
                    None, "this line is not a known property (not shown: it may hold a secret)", line=entry.line
                )
            raise reader.fail(
                key, f"is not a property tieredctl knows; the known ones are {', '.join(KNOWN_PROPERTIES)}"
            )

    protocol = _protocol(reader)
    tls = protocol in ("SSL", "SASL_SSL")
    uses_sasl = protocol.startswith("SASL_")
    for prop in _SSL_PROPERTIES if not tls else ():
        if prop in reader.entries:
            raise reader.fail(prop, _needs_protocol(protocol, "SSL", "SASL_SSL"))
    for prop in _SASL_PROPERTIES if not uses_sasl else ():
        if prop in reader.entries:
            raise reader.fail(prop, _needs_protocol(protocol, "SASL_SSL", "SASL_PLAINTEXT"))

    cafile = certfile = keyfile = None
    if tls:
        _check_endpoint_identification(reader)
        cafile = reader.file(SSL_CA_LOCATION)
        certfile = reader.file(SSL_CERTIFICATE_LOCATION)
        keyfile = reader.file(SSL_KEY_LOCATION)
        if keyfile is not None and certfile is None:
            raise reader.fail(
                SSL_KEY_LOCATION, f"a key without a certificate: give {SSL_CERTIFICATE_LOCATION} too (its PEM file)"
            )
    sasl = _sasl_credentials(reader, protocol) if uses_sasl else None
    return ClientSecurity(tls=tls, cafile=cafile, certfile=certfile, keyfile=keyfile, sasl=sasl)


def write_client_properties(path: Path, security: ClientSecurity) -> None:
    """Write ``security`` to ``path`` as a client properties file (librdkafka's names, absolute paths, mode 0600).

    :func:`read_command_config` reads it back to an equal :class:`ClientSecurity`; it holds the password, hence 0600.
    """
    props: dict[str, str] = {SECURITY_PROTOCOL: security.protocol}
    for prop, file in (
        (SSL_CA_LOCATION, security.cafile),
        (SSL_CERTIFICATE_LOCATION, security.certfile),
        (SSL_KEY_LOCATION, security.keyfile),
    ):
        if file is not None:
            props[prop] = os.path.abspath(file)
    if security.sasl is not None:
        props[SASL_MECHANISM] = security.sasl.mechanism
        props[SASL_USERNAME] = security.sasl.username
        props[SASL_PASSWORD] = security.sasl.password
    import javaproperties  # loaded when a properties file is written or read: every process imports this module

    text = javaproperties.dumps(props, timestamp=False, comments="Kafka client properties written by tieredctl")
    write_private(path, text)


def _entries(text: str, *, path: Path) -> dict[str, _Entry]:
    import javaproperties

    entries: dict[str, _Entry] = {}
    line = 1
    elements = javaproperties.parse(text)
    while True:
        try:
            element = next(elements)
        except StopIteration:
            return entries
        except javaproperties.InvalidUEscapeError as exc:
            # The escape itself is not echoed: it may be part of a password.
            raise CommandConfigError(
                "a \\u escape that is not four hexadecimal digits: write \\uXXXX, or \\\\ for a backslash",
                path=path,
                line=line,
            ) from exc
        if isinstance(element, javaproperties.KeyValue):
            entries[element.key] = _Entry(element.value, line)
        line += _line_count(element.source)


def _line_count(source: str) -> int:
    breaks = len(re.findall(r"\r\n|\r|\n", source))
    return breaks if source.endswith(("\n", "\r")) else breaks + 1


def _protocol(reader: _Reader) -> str:
    value = reader.get(SECURITY_PROTOCOL)
    if value is None:
        return "PLAINTEXT"
    if value.upper() not in PROTOCOLS:
        raise reader.fail(SECURITY_PROTOCOL, f"{reader.shown(value)} is not one of {', '.join(PROTOCOLS)}")
    return value.upper()


def _needs_protocol(protocol: str, wanted: str, alternative: str) -> str:
    return (
        f"is used only with security.protocol {wanted} or {alternative}, and this file's is {protocol}: "
        f"set security.protocol={wanted} (or {alternative}), or remove the line"
    )


def _check_endpoint_identification(reader: _Reader) -> None:
    entry = reader.entries.get(SSL_ENDPOINT_IDENTIFICATION)
    if entry is not None and entry.value.strip().lower() != "https":
        raise reader.fail(
            SSL_ENDPOINT_IDENTIFICATION,
            "only 'https' is accepted: the server's certificate must name the host connected to (connect by a "
            "name or address its subjectAltName holds, or issue it one that does)",
        )


def _mechanism(reader: _Reader) -> str:
    given = {prop: value for prop in (SASL_MECHANISM, SASL_MECHANISMS) if (value := reader.get(prop)) is not None}
    if len({value.upper() for value in given.values()}) > 1:
        raise reader.fail(SASL_MECHANISMS, f"disagrees with {SASL_MECHANISM}: they are one setting; keep one line")
    if not given:
        raise reader.fail(
            SECURITY_PROTOCOL,
            f"SASL needs {SASL_MECHANISM}, which Kafka clients default to GSSAPI (not served): set "
            f"{SASL_MECHANISM}=SCRAM-SHA-512 (or SCRAM-SHA-256)",
        )
    prop, value = next(iter(given.items()))
    mechanism = value.upper()
    if mechanism not in SCRAM_MECHANISMS:
        what = f"{mechanism} is" if mechanism in _UNSERVED_MECHANISMS else f"{reader.shown(value)} is not a mechanism"
        raise reader.fail(prop, f"{what} not served: only {' and '.join(SCRAM_MECHANISMS)} are")
    return mechanism


def _sasl_credentials(reader: _Reader, protocol: str) -> SaslCredentials:
    mechanism = _mechanism(reader)
    username, password = reader.get(SASL_USERNAME), reader.get(SASL_PASSWORD)
    if SASL_JAAS_CONFIG in reader.entries:
        if username is not None or password is not None:
            extra = SASL_USERNAME if username is not None else SASL_PASSWORD
            raise reader.fail(
                extra, f"is given as well as {SASL_JAAS_CONFIG}: give the credentials in one of the two, not both"
            )
        username, password = _jaas_credentials(reader)
    elif username is None and password is None:
        raise reader.fail(
            SECURITY_PROTOCOL,
            f"{protocol} needs a user name and password: set {SASL_USERNAME} and {SASL_PASSWORD} (or "
            f"{SASL_JAAS_CONFIG} with {_SCRAM_LOGIN_MODULE})",
        )
    elif username is None:
        raise reader.fail(SASL_PASSWORD, f"is given without {SASL_USERNAME}: set {SASL_USERNAME} too")
    elif password is None:
        raise reader.fail(SASL_USERNAME, f"is given without {SASL_PASSWORD}: set {SASL_PASSWORD} too")
    if not password:
        raise reader.fail(SASL_PASSWORD, "is empty: give the user's password")
    return SaslCredentials(mechanism=mechanism, username=username, password=password)


# -- sasl.jaas.config ---------------------------------------------------------------------------------------------


class _JaasSyntaxError(Exception):
    """A problem with the JAAS text, described by position only (the text may hold the password)."""


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "word", "quoted", or the character itself: "=" ";"
    text: str
    column: int


_QUOTE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _jaas_tokens(text: str) -> Iterator[_Token]:
    """Kafka's JaasConfig tokens (a java.io.StreamTokenizer): words, quoted strings, '=' and ';', with ``//`` and
    ``/* */`` comments skipped."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise _JaasSyntaxError(f"a /* comment at column {i + 1} is not closed")
            i = end + 2
        elif c == "/":  # '//' and, as in StreamTokenizer, a lone '/' comment out the rest of the line
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif c in "=;":
            yield _Token(c, c, i + 1)
            i += 1
        elif c in "\"'":
            start, i, chars = i, i + 1, []
            while i < n and text[i] != c:
                if text[i] in "\r\n":
                    break
                if text[i] == "\\" and i + 1 < n:
                    octal = re.match(r"[0-7]{1,3}", text[i + 1 :])
                    if octal and int(octal.group(), 8) <= 0o377:
                        chars.append(chr(int(octal.group(), 8)))
                        i += 1 + len(octal.group())
                        continue
                    chars.append(_QUOTE_ESCAPES.get(text[i + 1], text[i + 1]))
                    i += 2
                    continue
                chars.append(text[i])
                i += 1
            if i >= n or text[i] != c:
                raise _JaasSyntaxError(f"the quoted value starting at column {start + 1} is not closed on its line")
            yield _Token("quoted", "".join(chars), start + 1)
            i += 1
        elif c.isalnum() or c in "._$-" or ord(c) >= 128:
            start = i
            while i < n and (text[i].isalnum() or text[i] in "._$-" or ord(text[i]) >= 128):
                i += 1
            yield _Token("word", text[start:i], start + 1)
        else:
            raise _JaasSyntaxError(f'an unexpected character at column {i + 1} (quote values: key="value")')


def _parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``LoginModule flag key="value" ... ;`` -> (the login module, its options); exactly one entry, as Kafka."""
    tokens = list(_jaas_tokens(text))
    if not tokens or tokens[0].kind != "word":
        raise _JaasSyntaxError("it does not start with a login module class name")
    module = tokens[0].text
    if len(tokens) < 2 or tokens[1].kind != "word" or tokens[1].text.lower() not in _JAAS_FLAGS:
        raise _JaasSyntaxError(f"the login module is not followed by a control flag ({', '.join(_JAAS_FLAGS)})")
    options: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i].kind != ";":
        key, equals = tokens[i], tokens[i + 1] if i + 1 < len(tokens) else None
        value = tokens[i + 2] if i + 2 < len(tokens) else None
        if key.kind != "word" or equals is None or equals.kind != "=":
            raise _JaasSyntaxError(f'the option at column {key.column} is not key="value"')
        if value is None or value.kind not in ("word", "quoted"):
            raise _JaasSyntaxError(f'the option at column {key.column} has no value (write key="value")')
        options[key.text] = value.text
        i += 3
    if i >= len(tokens):
        raise _JaasSyntaxError("the entry does not end with ';'")
    if i + 1 < len(tokens):
        raise _JaasSyntaxError(f"text follows the ';' at column {tokens[i].column}: give exactly one login module")
    return module, options


def _jaas_credentials(reader: _Reader) -> tuple[str, str]:
    text = reader.get(SASL_JAAS_CONFIG) or ""
    try:
        module, options = _parse_jaas(text)
    except _JaasSyntaxError as exc:
        raise reader.fail(
            SASL_JAAS_CONFIG,
            f"cannot be parsed: {exc} (columns count from the value's start); write it as '{_SCRAM_JAAS_TEMPLATE}'",
        ) from exc
    if module != _SCRAM_LOGIN_MODULE:
        if module in _OTHER_LOGIN_MODULES:
            what = f"{module} is for {_OTHER_LOGIN_MODULES[module]}, which is"
        else:
            what = f"login module {reader.shown(module)} is"
        raise reader.fail(
            SASL_JAAS_CONFIG,
            f"{what} not served: only {' and '.join(SCRAM_MECHANISMS)} are, with {_SCRAM_LOGIN_MODULE}",
        )
    missing = [option for option in ("username", "password") if not options.get(option)]
    if missing:
        raise reader.fail(
            SASL_JAAS_CONFIG, f'{_SCRAM_LOGIN_MODULE} needs {" and ".join(missing)}: add {missing[0]}="..."'
        )
    return options["username"], options["password"]
