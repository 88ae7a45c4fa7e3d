from pathlib import Path

import pytest

from orchestrator.config import load_broker_config, load_controller_config
from orchestrator.errors import InvalidConfig

pytestmark = pytest.mark.unit
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "config"


def test_the_shipped_example_configs_load():
    broker = load_broker_config(DEPLOY / "broker.toml")
    assert broker.broker_id == 1 and broker.s3.bucket == "kafka-tiered-storage" and not broker.tls.enabled
    controller = load_controller_config(DEPLOY / "controller.toml")
    assert controller.node_id == 3000 and controller.lease_ttl_ms == 5000


@pytest.mark.parametrize(
    "text,match",
    [
        ("[broker]\nbroker_id = 1\ndata_dir='d'\nmetadata_store='m'\ncontrollers='c'\nprot = 1\n", "unknown key"),
        ("[broker]\nbroker_id = 'one'\ndata_dir='d'\nmetadata_store='m'\ncontrollers='c'\n", "must be an integer"),
        ("[broker]\ndata_dir='d'\nmetadata_store='m'\ncontrollers='c'\n", "broker_id"),
        ("[brokr]\n", "expected tables"),
        ("[broker\n", "not valid TOML"),
    ],
)
def test_bad_configs_are_refused_naming_the_problem(tmp_path, text, match):
    path = tmp_path / "b.toml"
    path.write_text(text)
    with pytest.raises(InvalidConfig, match=match):
        load_broker_config(path)


def test_relative_paths_resolve_against_the_file(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text("[broker]\nbroker_id = 2\ndata_dir = 'data'\nmetadata_store = 'm.db'\ncontrollers = 'x:1'\n")
    cfg = load_broker_config(path)
    assert cfg.data_dir == str(tmp_path / "data") and cfg.metadata_store == str(tmp_path / "m.db")


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidConfig, match="does not exist"):
        load_controller_config(tmp_path / "nope.toml")
