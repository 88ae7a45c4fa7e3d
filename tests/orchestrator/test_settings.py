from dataclasses import dataclass, field

import pytest

from orchestrator.errors import SettingsError
from orchestrator.settings import (
    BrokerMembership,
    DisablementSettings,
    MetricsSettings,
    load_broker_settings,
    load_controller_settings,
    load_settings,
)
from tests.support import REPO_ROOT

pytestmark = pytest.mark.unit
DEPLOY = REPO_ROOT / "deploy" / "config"
BROKER_BASICS = "[broker]\nbroker_id = 2\ndata_dir = 'data'\nmetadata_store = 'm.db'\ncontrollers = 'x:1'\n"


def test_the_shipped_example_configs_load():
    broker = load_broker_settings(DEPLOY / "broker.toml")
    assert broker.broker_id == 1 and broker.s3.bucket == "kafka-tiered-storage"
    controller = load_controller_settings(DEPLOY / "controller.toml")
    assert controller.node_id == 3000 and controller.lease_ttl_ms == 5000
    assert controller.membership.session_timeout_ms == 9000
    assert controller.disablement.stall_threshold_ms == 60_000
    for shipped in (broker, controller):  # listening on every interface: TLS, SCRAM logins and ACLs, never plaintext
        assert shipped.host == "0.0.0.0" and shipped.tls.enabled and shipped.security.authorizer
        assert shipped.security.sasl_mechanisms and not shipped.security.allow_insecure
        assert shipped.security.cluster_principals == ("User:tieredctl-controller", "User:tieredctl-broker")


BROKER_ON = "[broker]\nbroker_id = 1\ndata_dir='d'\nmetadata_store='m'\ncontrollers='c'\nhost = '{host}'\n"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "broker-1.example.com", "::"])
def test_a_port_reachable_from_other_hosts_without_authentication_is_refused_and_says_why(tmp_path, host):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_ON.format(host=host))
    with pytest.raises(SettingsError, match=r"without authentication.*allow_insecure = true"):
        load_broker_settings(path)


@pytest.mark.parametrize(
    "extra",
    [
        "[security]\nallow_insecure = true\n",
        "[security]\nsasl_mechanisms = ['SCRAM-SHA-512']\n",
        "[tls]\ncertfile = 'c.pem'\ncafile = 'ca.pem'\nrequire_client_cert = true\n",
    ],
)
def test_authentication_or_an_explicit_allow_insecure_lets_it_start(tmp_path, extra):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_ON.format(host="0.0.0.0") + extra)
    assert load_broker_settings(path).host == "0.0.0.0"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_stays_as_easy_as_before(tmp_path, host):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_ON.format(host=host))
    assert load_broker_settings(path).security.sasl_mechanisms == ()


@pytest.mark.parametrize(
    "security,match",
    [
        ("sasl_mechanisms = ['PLAIN']", "not served"),
        ("super_users = ['alice']", "User:<name>"),
        ("sasl_username = 'broker-1'", "go together"),
        ("sasl_mechanisms = 'SCRAM-SHA-512'", "list of strings"),
    ],
)
def test_bad_security_settings_are_refused_naming_the_key(tmp_path, security, match):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_ON.format(host="127.0.0.1") + "[security]\n" + security + "\n")
    with pytest.raises(SettingsError, match=match):
        load_broker_settings(path)


@pytest.mark.parametrize(
    "text,match",
    [
        ("[broker]\nbroker_id = 1\ndata_dir='d'\nmetadata_store='m'\ncontrollers='c'\nprot = 1\n", "unknown key"),
        ("[broker]\nbroker_id = 'one'\ndata_dir='d'\nmetadata_store='m'\ncontrollers='c'\n", "must be an integer"),
        ("[broker]\ndata_dir='d'\nmetadata_store='m'\ncontrollers='c'\n", "broker_id"),
        ("[brokr]\n", "expected the tables"),
        ("[broker\n", "not valid TOML"),
    ],
)
def test_bad_configs_are_refused_naming_the_problem(tmp_path, text, match):
    path = tmp_path / "b.toml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=match):
        load_broker_settings(path)


def test_relative_paths_resolve_against_the_file(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_BASICS)
    cfg = load_broker_settings(path)
    assert cfg.data_dir == str(tmp_path / "data") and cfg.metadata_store == str(tmp_path / "m.db")


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(SettingsError, match="does not exist") as caught:
        load_controller_settings(tmp_path / "nope.toml")
    assert str(caught.value).startswith("INVALID_SETTINGS: ")


def test_each_group_is_its_own_table_and_the_process_gets_it_whole(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        "[controller]\nnode_id = 3001\nmetadata_store = 'm.db'\n"
        "[membership]\nsession_timeout_ms = 2500\n[disablement]\nrepoll_ms = 100\n"
    )
    settings = load_controller_settings(path)
    assert settings.membership == BrokerMembership(session_timeout_ms=2500)
    assert settings.disablement == DisablementSettings(repoll_ms=100)


@pytest.mark.parametrize(
    "text,match",
    [
        ("[controller]\nnode_id = 1\nmetadata_store = 'm'\nsession_timeout_ms = 1\n", r"unknown key.*\[controller\]"),
        ("[controller]\nnode_id = 1\nmetadata_store = 'm'\n[membership]\ncluster = 'x'\n", r"\[membership\]"),
        ("[controller]\nnode_id = 1\nmetadata_store = 'm'\nmembership = 3\n", "unknown key"),
        ("[controller]\nnode_id = 1\nmetadata_store = 'm'\n[disablement]\nrepoll_ms = 'soon'\n", "integer"),
    ],
)
def test_a_group_key_in_the_wrong_table_is_refused(tmp_path, text, match):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=match):
        load_controller_settings(path)


def test_metrics_are_served_on_loopback_on_a_free_port_unless_the_metrics_table_says_otherwise(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_BASICS + "[metrics]\nport = 9400\n")
    assert load_broker_settings(path).metrics == MetricsSettings(enabled=True, host="127.0.0.1", port=9400)
    path.write_text("[controller]\nnode_id = 3001\nmetadata_store = 'm.db'\n")
    assert load_controller_settings(path).metrics == MetricsSettings(enabled=True, host="127.0.0.1", port=0)
    path.write_text("[controller]\nnode_id = 3001\nmetadata_store = 'm.db'\n[metrics]\nport = 70000\n")
    with pytest.raises(SettingsError, match=r"\[metrics\] port"):
        load_controller_settings(path)


def test_metrics_over_tls_need_a_certificate_and_its_key_and_client_certificates_need_tls(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_BASICS + "[metrics]\ncertfile = 'b.pem'\nkeyfile = 'b-key.pem'\nclient_cafile = 'ca.pem'\n")
    assert load_broker_settings(path).metrics == MetricsSettings(  # paths relative to the file, as every path
        certfile=str(tmp_path / "b.pem"), keyfile=str(tmp_path / "b-key.pem"), client_cafile=str(tmp_path / "ca.pem")
    )
    for table, match in (
        ("certfile = 'b.pem'\n", "certfile and keyfile go together"),
        ("client_cafile = 'ca.pem'\n", "client_cafile needs certfile"),
    ):
        path.write_text(BROKER_BASICS + "[metrics]\n" + table)
        with pytest.raises(SettingsError, match=match):
            load_broker_settings(path)


def test_a_broker_registers_its_bound_port_unless_an_advertised_port_is_set(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_BASICS)
    assert load_broker_settings(path).advertised_port == 0  # 0: the port it binds
    path.write_text(BROKER_BASICS + "advertised_port = 19092\n")
    assert load_broker_settings(path).advertised_port == 19092
    for bad, match in (("70000", "advertised_port must be 0..65535"), ("'19092'", "must be an integer")):
        path.write_text(BROKER_BASICS + f"advertised_port = {bad}\n")
        with pytest.raises(SettingsError, match=match):
            load_broker_settings(path)


def test_a_brokers_loop_retry_cap_is_read_and_a_cap_below_the_shortest_wait_is_refused(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_BASICS)
    assert load_broker_settings(path).loop_retry_max_ms == 10_000
    path.write_text(BROKER_BASICS + "loop_retry_max_ms = 2000\n")
    assert load_broker_settings(path).loop_retry_max_ms == 2000
    path.write_text(BROKER_BASICS + "loop_retry_max_ms = 50\n")
    with pytest.raises(SettingsError, match="loop_retry_max_ms must be >= 100, got 50"):
        load_broker_settings(path)


# --- types are checked against each field's real type, the way TOML writes them ---------------------------------


@dataclass(frozen=True)
class _Backoff:
    """A settings group with the field types TOML values must fit (not shipped: only these tests read it)."""

    base_s: float = 0.2
    cap_s: float | None = None
    attempts: int = 5
    jitter: bool = True
    codes: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Process:
    name: str
    ratio: float = 1.0
    backoff: _Backoff = field(default_factory=_Backoff)


def _load_process(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text)
    return load_settings(_Process, "process", path), path


def test_a_float_setting_given_a_string_is_refused_naming_the_file_the_key_and_both_types(tmp_path):
    with pytest.raises(SettingsError) as refused:
        _load_process(tmp_path, "[process]\nname = 'p'\nratio = 'fast'\n")
    message = str(refused.value)
    assert str(tmp_path / "p.toml") in message
    assert "[process] ratio must be a number, got a string ('fast')" in message


@pytest.mark.parametrize(
    "backoff,expected",
    [
        ("base_s = '0.5'", "[backoff] base_s must be a number, got a string ('0.5')"),
        ("base_s = true", "[backoff] base_s must be a number, got a boolean (True)"),
        ("cap_s = [30]", "[backoff] cap_s must be a number, got an array ([30])"),
        ("attempts = true", "[backoff] attempts must be an integer, got a boolean (True)"),
        ("attempts = 2.5", "[backoff] attempts must be an integer, got a float (2.5)"),
        ("jitter = 1", "[backoff] jitter must be true or false, got an integer (1)"),
        ("codes = [500, '503']", "[backoff] codes must be a list of integers, got an array ([500, '503'])"),
        ("codes = 503", "[backoff] codes must be a list of integers, got an integer (503)"),
    ],
)
def test_a_value_of_another_type_is_refused_whatever_the_fields_type(tmp_path, backoff, expected):
    with pytest.raises(SettingsError) as refused:
        _load_process(tmp_path, f"[process]\nname = 'p'\n[backoff]\n{backoff}\n")
    assert expected in str(refused.value)
    assert str(tmp_path / "p.toml") in str(refused.value)


def test_an_integer_is_taken_where_a_float_is_expected_and_held_as_a_float(tmp_path):
    settings, _path = _load_process(tmp_path, "[process]\nname = 'p'\nratio = 2\n[backoff]\nbase_s = 1\ncap_s = 30\n")
    assert settings.ratio == 2.0 and type(settings.ratio) is float
    assert settings.backoff.base_s == 1.0 and type(settings.backoff.base_s) is float
    assert settings.backoff.cap_s == 30.0 and type(settings.backoff.cap_s) is float


def test_values_of_the_fields_types_are_held_as_written_and_arrays_as_tuples(tmp_path):
    settings, _path = _load_process(
        tmp_path,
        "[process]\nname = 'p'\nratio = 0.5\n[backoff]\ncap_s = 2.5\nattempts = 3\njitter = false\n"
        "codes = [500, 503]\n",
    )
    assert settings == _Process(
        name="p", ratio=0.5, backoff=_Backoff(cap_s=2.5, attempts=3, jitter=False, codes=(500, 503))
    )


def test_a_shipped_setting_given_the_wrong_type_names_the_file_the_table_and_the_key(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_BASICS + "[store]\nlock_timeout_ms = 5000.0\n")
    with pytest.raises(SettingsError) as refused:
        load_broker_settings(path)
    assert f"{path}: [store] lock_timeout_ms must be an integer, got a float (5000.0)" in str(refused.value)
    path.write_text(BROKER_BASICS + "rack = 3\n")
    with pytest.raises(SettingsError, match=r"\[broker\] rack must be a string, got an integer \(3\)"):
        load_broker_settings(path)


def test_the_remote_storage_managers_settings_are_aivens_defaults_unless_the_rsm_table_says_otherwise(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_BASICS)
    rsm = load_broker_settings(path).rsm
    assert (rsm.chunk_size, rsm.compression_enabled, rsm.encryption_enabled) == (4 * 1024 * 1024, False, False)
    assert rsm.custom_metadata_fields_include == () and rsm.encryption_key_pairs == ()
    path.write_text(
        BROKER_BASICS
        + "[rsm]\nchunk_size = 65536\ncompression_enabled = true\nencryption_enabled = true\n"
        + "encryption_key_pair_id = 'k2'\n"
        + "encryption_key_pairs = [['k2', 'keys/k2.pub', '/abs/k2.key'], ['k1', 'k1.pub', 'k1.key']]\n"
        + "custom_metadata_fields_include = ['REMOTE_SIZE', 'OBJECT_KEY']\n"
    )
    rsm = load_broker_settings(path).rsm
    assert rsm.chunk_size == 65536 and rsm.compression_enabled and rsm.encryption_enabled
    assert rsm.encryption_key_pairs == (  # paths resolve against the file, like every path setting
        ("k2", str(tmp_path / "keys" / "k2.pub"), "/abs/k2.key"),
        ("k1", str(tmp_path / "k1.pub"), str(tmp_path / "k1.key")),
    )
    assert rsm.custom_metadata_fields_include == ("REMOTE_SIZE", "OBJECT_KEY")


@pytest.mark.parametrize(
    ("rsm", "match"),
    [
        ("chunk_size = 0", r"chunk_size must be in \[1, 1073741823\]"),
        ("chunk_size = 1073741824", "chunk_size must be in"),
        ("encryption_enabled = true", "encryption_enabled needs encryption_key_pair_id"),
        ("encryption_key_pair_id = 'k9'\nencryption_key_pairs = [['k1', 'a', 'b']]", "'k9' is not in"),
        ("encryption_key_pairs = [['k1', 'a', 'b'], ['k1', 'c', 'd']]", "twice"),
        ("encryption_key_pairs = [['k:1', 'a', 'b']]", "holds no ':'"),
        ("encryption_key_pairs = [['k1', 'a']]", "encryption_key_pairs must be"),
        ("custom_metadata_fields_include = ['REMOTE_SIZE', 'SIZE']", r"unknown field\(s\) \['SIZE'\]"),
        ("chunk_cache_bytes = -1", "chunk_cache_bytes must be >= 0"),
    ],
)
def test_bad_remote_storage_manager_settings_are_refused_naming_the_setting(tmp_path, rsm, match):
    path = tmp_path / "b.toml"
    path.write_text(BROKER_BASICS + "[rsm]\n" + rsm + "\n")
    with pytest.raises(SettingsError, match=match):
        load_broker_settings(path)
