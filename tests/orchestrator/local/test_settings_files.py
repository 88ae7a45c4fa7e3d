"""The local cluster's settings files: what it writes reads back as the same values, with their TOML types (a float
stays a float, as the settings loader checks types), and a value TOML cannot spell is refused when written."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrator.local.settings_files import read_toml, with_overrides, write_toml
from orchestrator.settings import load_broker_settings

pytestmark = pytest.mark.unit


def test_every_value_reads_back_with_its_own_type(tmp_path: Path) -> None:
    tables = {
        "broker": {"broker_id": 1, "controllers": "3000@127.0.0.1:9093", "tls": False, "skipped": None},
        "s3": {"read_timeout_s": 2.0, "connect_timeout_s": 0.25, "tiny": 1e-05, "bucket": 'a "quoted" name'},
        "rsm": {"key_pairs": [["k1", "/pub.pem", "/priv.pem"]]},
    }
    path = tmp_path / "config" / "broker.toml"
    write_toml(path, tables)
    back = read_toml(path)
    assert back == {
        "broker": {"broker_id": 1, "controllers": "3000@127.0.0.1:9093", "tls": False},
        "s3": {"read_timeout_s": 2.0, "connect_timeout_s": 0.25, "tiny": 1e-05, "bucket": 'a "quoted" name'},
        "rsm": {"key_pairs": [["k1", "/pub.pem", "/priv.pem"]]},
    }
    assert isinstance(back["s3"]["read_timeout_s"], float)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_number_toml_cannot_spell_is_refused_when_written(tmp_path: Path, value: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        write_toml(tmp_path / "x.toml", {"s3": {"read_timeout_s": value}})
    assert not (tmp_path / "x.toml").exists()


def test_a_float_override_is_a_setting_the_broker_accepts(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    broker = {"broker_id": 1, "data_dir": str(tmp_path / "data"), "metadata_store": "m.db", "controllers": "x:1"}
    base = {"broker": broker}
    write_toml(path, with_overrides(base, {"s3": {"read_timeout_s": 2.0}}))
    assert load_broker_settings(path).s3.read_timeout_s == 2.0
