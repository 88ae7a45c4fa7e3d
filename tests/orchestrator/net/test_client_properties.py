"""``--command-config``: a Kafka client properties file (librdkafka's names, Java's where they mean the same) becomes
a ClientSecurity; every mistake names the file, the line and the property and says what to write, and never shows
the password; what write_client_properties writes reads back the same."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.errors import InvalidArgument
from orchestrator.net.client_properties import (
    KNOWN_PROPERTIES,
    CommandConfigError,
    read_command_config,
    write_client_properties,
)
from orchestrator.net.client_security import ClientSecurity, SaslCredentials

pytestmark = pytest.mark.unit

PASSWORD = "s3cr#t=pa:ss wörd"
SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cr#t=pa:ss wörd";'
)


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    for name in ("ca.pem", "client.pem", "client-key.pem"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return tmp_path


def _write(directory: Path, text: str, name: str = "client.properties") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(directory: Path, text: str) -> CommandConfigError:
    with pytest.raises(CommandConfigError) as caught:
        read_command_config(_write(directory, text))
    return caught.value


# -- what the properties mean --------------------------------------------------------------------------------------


def test_an_empty_file_is_plaintext(tmp_path: Path) -> None:
    assert read_command_config(_write(tmp_path, "# nothing\n")) == ClientSecurity()


def test_mutual_tls_with_librdkafkas_names(tls_dir: Path) -> None:
    path = _write(
        tls_dir,
        "security.protocol=ssl\n"
        f"ssl.ca.location={tls_dir}/ca.pem\n"
        f"ssl.certificate.location={tls_dir}/client.pem\n"
        f"ssl.key.location={tls_dir}/client-key.pem\n"
        "ssl.endpoint.identification.algorithm=https\n",
    )
    assert read_command_config(path) == ClientSecurity(
        tls=True,
        cafile=str(tls_dir / "ca.pem"),
        certfile=str(tls_dir / "client.pem"),
        keyfile=str(tls_dir / "client-key.pem"),
    )


def test_tls_with_only_a_ca_and_a_certificate_holding_its_own_key(tls_dir: Path) -> None:
    path = _write(tls_dir, "security.protocol=SSL\nssl.certificate.location=client.pem\n")
    assert read_command_config(path) == ClientSecurity(tls=True, certfile=str(tls_dir / "client.pem"))


def test_relative_paths_are_relative_to_the_properties_files_directory(
    tls_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tls_dir / "conf").mkdir()
    path = _write(tls_dir / "conf", "security.protocol=SSL\nssl.ca.location=../ca.pem\n")
    monkeypatch.chdir("/")

    assert read_command_config(path).cafile == str(tls_dir / "conf" / ".." / "ca.pem")
    relative = Path(os.path.relpath(path, tls_dir))
    monkeypatch.chdir(tls_dir)
    assert read_command_config(relative).cafile == str(tls_dir / "conf" / ".." / "ca.pem")


@pytest.mark.parametrize("mechanism_property", ["sasl.mechanism", "sasl.mechanisms"])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512"])
def test_scram_over_tls_with_sasl_username_and_password(tls_dir: Path, mechanism_property: str, mechanism: str) -> None:
    path = _write(
        tls_dir,
        "security.protocol=SASL_SSL\n"
        "ssl.ca.location=ca.pem\n"
        f"{mechanism_property}={mechanism}\n"
        "sasl.username=alice\n"
        f"sasl.password={PASSWORD}\n",
    )
    assert read_command_config(path) == ClientSecurity(
        tls=True, cafile=str(tls_dir / "ca.pem"), sasl=SaslCredentials(mechanism.upper(), "alice", PASSWORD)
    )


def test_both_mechanism_names_may_be_given_when_they_agree(tmp_path: Path) -> None:
    text = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.mechanisms=scram-sha-256\n"
    security = read_command_config(_write(tmp_path, text + "sasl.username=a\nsasl.password=b\n"))
    assert security.sasl == SaslCredentials("SCRAM-SHA-256", "a", "b")


def test_scram_credentials_in_javas_jaas_form(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={SCRAM_JAAS}\n",
    )
    assert read_command_config(path) == ClientSecurity(sasl=SaslCredentials("SCRAM-SHA-512", "alice", PASSWORD))


@pytest.mark.parametrize(
    "jaas,username,password",
    [
        # Continued over lines, single quotes, an unquoted word, a flag in capitals, extra options, comments.
        (
            "org.apache.kafka.common.security.scram.ScramLoginModule REQUIRED \\\n"
            "    username='bob' \\\n    password=plain_word-1.x tokenauth=\"false\" /* why */;",
            "bob",
            "plain_word-1.x",
        ),
        # Java's escapes inside quotes: \" \\ \t and octal.
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="a\\\\"b" '
            'password="x\\\\\\\\y\\\\tz\\\\101";  // trailing comment',
            'a"b',
            "x\\y\tzA",
        ),
    ],
)
def test_jaas_text_is_read_as_kafkas_tokenizer_reads_it(
    tmp_path: Path, jaas: str, username: str, password: str
) -> None:
    path = _write(
        tmp_path, f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config={jaas}\n"
    )
    assert read_command_config(path).sasl == SaslCredentials("SCRAM-SHA-256", username, password)


def test_java_properties_syntax_separators_comments_continuations_and_escapes(tmp_path: Path) -> None:
    text = (
        "! a comment\n"
        "# another\n"
        "\n"
        "   security.protocol : SASL_PLAINTEXT\n"
        "sasl.mechanism SCRAM-SHA-256\n"
        "sasl.username=al\\\n"
        "        ice\n"
        "sasl.password=\\u00e9t\\u00e9\\ \\=\\:\\#\\\\\n"
    )
    security = read_command_config(_write(tmp_path, text))
    assert security.sasl == SaslCredentials("SCRAM-SHA-256", "alice", "été =:#\\")


def test_a_key_given_twice_keeps_its_last_value_as_in_java(tmp_path: Path) -> None:
    path = _write(tmp_path, "security.protocol=SSL\nsecurity.protocol=PLAINTEXT\n")
    assert read_command_config(path) == ClientSecurity()


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_key(tmp_path: Path) -> None:
    path = tmp_path / "bom.properties"
    path.write_bytes("\ufeffsecurity.protocol=PLAINTEXT\n".encode())
    assert read_command_config(path) == ClientSecurity()


# -- the round trip ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda d: ClientSecurity(),
        lambda d: ClientSecurity(tls=True),
        lambda d: ClientSecurity(tls=True, cafile=str(d / "ca.pem")),
        lambda d: ClientSecurity(
            tls=True, cafile=str(d / "ca.pem"), certfile=str(d / "client.pem"), keyfile=str(d / "client-key.pem")
        ),
        lambda d: ClientSecurity(sasl=SaslCredentials("SCRAM-SHA-256", "bob", "p")),
        lambda d: ClientSecurity(
            tls=True,
            cafile=str(d / "ca.pem"),
            sasl=SaslCredentials("SCRAM-SHA-512", "älice with spaces", PASSWORD + " \\ \"'\t!#\u2603 "),
        ),
    ],
)
def test_what_write_client_properties_writes_reads_back_the_same_from_a_0600_file(
    tls_dir: Path, make: Callable[[Path], ClientSecurity]
) -> None:
    security = make(tls_dir)
    path = tls_dir / "written" / "client.properties"
    path.parent.mkdir()
    previous = os.umask(0o022)
    try:
        write_client_properties(path, security)
    finally:
        os.umask(previous)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().isascii()
    assert read_command_config(path) == security


# -- mistakes --------------------------------------------------------------------------------------------------------


def test_an_unknown_property_is_named_with_its_line_and_the_known_ones(tmp_path: Path) -> None:
    error = _error(tmp_path, "security.protocol=SSL\n\nrequest.timeout.ms=5000\n")
    assert error.line == 3 and error.prop == "request.timeout.ms"
    assert str(error).startswith(f"INVALID_COMMAND_CONFIG: {tmp_path}/client.properties:3: request.timeout.ms: ")
    assert all(prop in str(error) for prop in KNOWN_PROPERTIES)
    assert isinstance(error, InvalidArgument) and not hasattr(error, "code")


def test_line_numbers_count_continued_lines(tmp_path: Path) -> None:
    error = _error(tmp_path, "# a\nsasl.jaas.config=a \\\n  b \\\n  c\nbogus=1\n")
    assert error.line == 5 and error.prop == "bogus"


@pytest.mark.parametrize(
    "prop",
    ["ssl.truststore.location", "ssl.truststore.password", "ssl.keystore.location", "ssl.keystore.type"],
)
def test_java_keystores_are_refused_with_the_pem_properties_to_use(tmp_path: Path, prop: str) -> None:
    error = _error(tmp_path, f"security.protocol=SSL\n{prop}=/etc/kafka/store.jks\n")
    assert (error.line, error.prop) == (2, prop)
    assert "Java keystore" in str(error) and "ssl.ca.location" in str(error)


def test_an_encrypted_key_is_refused_with_how_to_decrypt_it(tmp_path: Path) -> None:
    error = _error(tmp_path, "security.protocol=SSL\nssl.key.password=hunter22\n")
    assert error.prop == "ssl.key.password" and "openssl pkey" in str(error) and "hunter22" not in str(error)


def test_an_unknown_security_protocol_lists_the_four(tmp_path: Path) -> None:
    error = _error(tmp_path, "security.protocol=TLS\n")
    assert (error.line, error.prop) == (1, "security.protocol")
    assert "'TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" in str(error)


@pytest.mark.parametrize(
    "text,prop,wanted",
    [
        ("ssl.ca.location=ca.pem\n", "ssl.ca.location", "security.protocol=SSL"),
        ("security.protocol=SASL_PLAINTEXT\nssl.ca.location=ca.pem\n", "ssl.ca.location", "security.protocol=SSL"),
        ("sasl.username=alice\n", "sasl.username", "security.protocol=SASL_SSL"),
        ("security.protocol=SSL\nsasl.mechanism=SCRAM-SHA-256\n", "sasl.mechanism", "security.protocol=SASL_SSL"),
    ],
)
def test_tls_or_sasl_settings_without_the_protocol_that_uses_them_are_refused(
    tls_dir: Path, text: str, prop: str, wanted: str
) -> None:
    error = _error(tls_dir, text)
    assert error.prop == prop and wanted in str(error)


@pytest.mark.parametrize("prop", ["ssl.ca.location", "ssl.certificate.location", "ssl.key.location"])
def test_an_ssl_file_that_does_not_exist_is_named_with_its_resolved_path(tls_dir: Path, prop: str) -> None:
    certificate = "ssl.certificate.location=client.pem\n" if prop == "ssl.key.location" else ""
    error = _error(tls_dir, f"security.protocol=SSL\n{certificate}{prop}=missing.pem\n")
    assert error.prop == prop and f"'{tls_dir}/missing.pem' does not exist" in str(error)


def test_a_directory_is_not_a_ca_file(tls_dir: Path) -> None:
    error = _error(tls_dir, f"security.protocol=SSL\nssl.ca.location={tls_dir}\n")
    assert error.prop == "ssl.ca.location" and "is not a file" in str(error)


def test_a_key_without_a_certificate_is_refused(tls_dir: Path) -> None:
    error = _error(tls_dir, "security.protocol=SSL\nssl.key.location=client-key.pem\n")
    assert error.prop == "ssl.key.location" and "ssl.certificate.location" in str(error)


def test_hostname_verification_cannot_be_turned_off(tls_dir: Path) -> None:
    error = _error(tls_dir, "security.protocol=SSL\nssl.endpoint.identification.algorithm=\n")
    assert error.prop == "ssl.endpoint.identification.algorithm" and "only 'https'" in str(error)


def test_an_empty_value_is_refused(tls_dir: Path) -> None:
    error = _error(tls_dir, "security.protocol=SSL\nssl.ca.location=\n")
    assert (error.line, error.prop) == (2, "ssl.ca.location") and "has no value" in str(error)


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_sasl_without_a_username_and_password_says_what_to_set(tmp_path: Path, protocol: str) -> None:
    error = _error(tmp_path, f"security.protocol={protocol}\nsasl.mechanism=SCRAM-SHA-256\n")
    assert (error.line, error.prop) == (1, "security.protocol")
    assert f"{protocol} needs a user name and password: set sasl.username and sasl.password" in str(error)


@pytest.mark.parametrize(
    "credentials,prop,missing",
    [
        ("sasl.username=alice\n", "sasl.username", "sasl.password"),
        (f"sasl.password={PASSWORD}\n", "sasl.password", "sasl.username"),
    ],
)
def test_half_a_pair_of_credentials_names_the_other_half(
    tmp_path: Path, credentials: str, prop: str, missing: str
) -> None:
    error = _error(tmp_path, f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n{credentials}")
    assert error.prop == prop and f"set {missing} too" in str(error)


def test_sasl_without_a_mechanism_says_kafka_would_use_gssapi(tmp_path: Path) -> None:
    error = _error(tmp_path, f"security.protocol=SASL_SSL\nsasl.username=alice\nsasl.password={PASSWORD}\n")
    assert error.prop == "security.protocol" and "GSSAPI" in str(error) and "sasl.mechanism=SCRAM-SHA-512" in str(error)


@pytest.mark.parametrize("mechanism", ["PLAIN", "GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1"])
def test_a_mechanism_other_than_scram_sha_256_or_512_is_not_served(tmp_path: Path, mechanism: str) -> None:
    error = _error(tmp_path, f"security.protocol=SASL_SSL\nsasl.mechanism={mechanism}\n")
    assert (error.line, error.prop) == (2, "sasl.mechanism")
    assert mechanism in str(error) and "only SCRAM-SHA-256 and SCRAM-SHA-512 are" in str(error)


def test_two_mechanism_lines_that_disagree_are_refused(tmp_path: Path) -> None:
    text = "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.mechanisms=SCRAM-SHA-512\n"
    assert "keep one line" in str(_error(tmp_path, text))


def test_credentials_given_twice_in_both_forms_are_refused(tmp_path: Path) -> None:
    text = f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=a\nsasl.jaas.config={SCRAM_JAAS}\n"
    error = _error(tmp_path, text)
    assert error.prop == "sasl.username" and "not both" in str(error)


@pytest.mark.parametrize(
    "module,mechanism",
    [
        ("org.apache.kafka.common.security.plain.PlainLoginModule", "PLAIN"),
        ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule", "OAUTHBEARER"),
        ("com.sun.security.auth.module.Krb5LoginModule", "GSSAPI"),
        ("com.example.MyLoginModule", "'com.example.MyLoginModule'"),
    ],
)
def test_a_jaas_login_module_other_than_scrams_is_not_served(tmp_path: Path, module: str, mechanism: str) -> None:
    jaas = f'{module} required username="alice" password="{PASSWORD}";'
    error = _error(tmp_path, f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config={jaas}\n")
    assert error.prop == "sasl.jaas.config" and mechanism in str(error) and "not served" in str(error)


@pytest.mark.parametrize(
    "jaas,problem",
    [
        ("", "has no value"),
        ('username="alice" password="x";', "not followed by a control flag"),
        ("org.apache.kafka.common.security.scram.ScramLoginModule", "not followed by a control flag"),
        ("org.apache.kafka.common.security.scram.ScramLoginModule mandatory;", "not followed by a control flag"),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="x"',
            "end with ';'",
        ),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password;',
            'the option at column 83 is not key="value"',
        ),
        ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="x', "not closed"),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="x"; b c;',
            "exactly one",
        ),
        ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice";', "needs password"),
        ("org.apache.kafka.common.security.scram.ScramLoginModule required;", "needs username and password"),
        ('org.apache.kafka.common.security.scram.ScramLoginModule required user@x="a";', "unexpected character"),
    ],
)
def test_jaas_text_that_cannot_be_parsed_says_where_and_what_to_write(tmp_path: Path, jaas: str, problem: str) -> None:
    error = _error(tmp_path, f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config={jaas}\n")
    assert (error.line, error.prop) == (3, "sasl.jaas.config") and problem in str(error)


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(CommandConfigError, match="No such file or directory"):
        read_command_config(tmp_path / "absent.properties")


def test_a_file_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.properties"
    path.write_bytes(b"security.protocol=SASL_SSL\nsasl.password=caf\xe9\n")
    with pytest.raises(CommandConfigError, match=r"latin1\.properties:2: is not UTF-8") as caught:
        read_command_config(path)
    assert "caf" not in str(caught.value)


# -- the password is never shown -------------------------------------------------------------------------------------

SECRET = "Tr0ub4dor&3-horse"


@pytest.mark.parametrize(
    "text",
    [
        f"sasl.password={SECRET}\n",  # SASL settings with PLAINTEXT
        f"security.protocol=SASL_SSL\nsasl.password={SECRET}\n",  # no mechanism
        f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.password={SECRET}\n",  # no username
        f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=a\nsasl.password={SECRET}\n",
        f"security.protocol=SASL_SSL\nsasl.mechanism={SECRET}\nsasl.password={SECRET}\n",  # pasted in the wrong place
        f"security.protocol=SASL_SSL\nsasl.password={SECRET}\n{SECRET}\n",  # a stray line: a key with no value
        f"security.protocol=SASL_SSL\nsasl.password={SECRET}\nsecurity.protocol.{SECRET}=1\n",
        f"security.protocol=SASL_SSL\nsasl.password={SECRET}\nssl.ca.location=/tmp/{SECRET}.pem\n",
        f"security.protocol=SSL\nsasl.password={SECRET}\nssl.ca.location=/tmp/{SECRET}.pem\n",
        f"security.protocol=SSL\nssl.key.password={SECRET}\n",
        f"security.protocol=SSL\nssl.keystore.password={SECRET}\n",
        f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.password=x\\u12{SECRET}\n",
        f'security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.jaas.config=x required password="{SECRET}";\n',
        f'security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=x required password="{SECRET}";\n',
        f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=x required password={SECRET};\n",
        f'security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=x required password="{SECRET}\n',
        f'security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config={SECRET} required password="x";\n',
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config="
            f'org.apache.kafka.common.security.scram.ScramLoginModule required password="{SECRET}";\n'
        ),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config="
            f'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="{SECRET}";\n'
        ),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config="
            f"org.apache.kafka.common.security.scram.ScramLoginModule required username=a password {SECRET};\n"
        ),
    ],
)
def test_no_error_shows_a_password_given_in_the_file(tmp_path: Path, text: str) -> None:
    error = _error(tmp_path, text)
    shown = " ".join([str(error), repr(error), error.message, *map(str, error.args)])
    assert SECRET not in shown and "Tr0ub4dor" not in shown and "horse" not in shown
