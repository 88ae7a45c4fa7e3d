import pytest

from orchestrator.errors import SettingsError
from orchestrator.settings import (
    BrokerMembership,
    DisablementSettings,
    load_broker_settings,
    load_controller_settings,
)
from tests.support import REPO_ROOT

pytestmark = pytest.mark.unit
DEPLOY = REPO_ROOT / "deploy" / "config"
BROKER_BASICS = "[broker]\nbroker_id = 2\ndata_dir = 'data'\nmetadata_store = 'm.db'\ncontrollers = 'x:1'\n"


def test_the_shipped_example_configs_load():
    broker = load_broker_settings(DEPLOY / "broker.toml")
    assert broker.broker_id == 1 and broker.s3.bucket == "kafka-tiered-storage" and not broker.tls.enabled
    controller = load_controller_settings(DEPLOY / "controller.toml")
    assert controller.node_id == 3000 and controller.lease_ttl_ms == 5000
    assert controller.membership.session_timeout_ms == 9000
    assert controller.disablement.stall_threshold_ms == 60_000


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
