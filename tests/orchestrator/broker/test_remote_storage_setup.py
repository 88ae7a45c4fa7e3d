"""A broker's RemoteStorageManager from its [rsm] settings: key files read once at start, a file that cannot be
used refuses the start naming the setting, the key pair and the file (never the key), and the object format is
what the settings say."""

from pathlib import Path

import pytest

from orchestrator.broker.agent import BrokerAgent
from orchestrator.broker.remote_storage_setup import object_format, remote_storage
from orchestrator.errors import SettingsError
from orchestrator.settings import BrokerSettings, RemoteStorageManagerSettings, S3Settings
from remote_storage.segment_format.custom_metadata import CustomMetadataField
from tests.support.key_pairs import KeyPairFiles, write_key_pair

pytestmark = pytest.mark.unit


@pytest.fixture
def pairs(tmp_path: Path) -> tuple[KeyPairFiles, KeyPairFiles]:
    return write_key_pair(tmp_path / "keys", "k1"), write_key_pair(tmp_path / "keys", "k2")


def _settings(*pairs: KeyPairFiles, **kw: object) -> RemoteStorageManagerSettings:
    entries = tuple((p.key_pair_id, str(p.public_file), str(p.private_file)) for p in pairs)
    return RemoteStorageManagerSettings(encryption_key_pairs=entries, **kw)  # type: ignore[arg-type]


def test_the_format_is_what_the_settings_say_with_every_key_pair_read_and_the_active_one_wrapping(pairs):
    old, new = pairs
    settings = _settings(
        old,
        new,
        chunk_size=65536,
        compression_enabled=True,
        encryption_enabled=True,
        encryption_key_pair_id="k2",
        custom_metadata_fields_include=("OBJECT_PREFIX", "REMOTE_SIZE"),
    )
    fmt = object_format(settings)
    assert (fmt.chunk_size, fmt.compression, fmt.encrypt) == (65536, True, True)
    assert fmt.custom_metadata_fields == {CustomMetadataField.OBJECT_PREFIX, CustomMetadataField.REMOTE_SIZE}
    assert fmt.key_ring is not None and fmt.key_ring.active_key_pair_id == "k2"
    assert set(fmt.key_ring.key_pairs) == {"k1", "k2"}
    wrapped = fmt.key_ring.wrap(b"d" * 32)
    assert wrapped.key_pair_id == "k2" and fmt.key_ring.unwrap(wrapped) == b"d" * 32
    assert "PRIVATE" not in repr(fmt) and "BEGIN" not in repr(fmt)


def test_key_pairs_given_with_encryption_off_are_kept_to_read_what_was_encrypted(pairs):
    fmt = object_format(_settings(pairs[0]))
    assert not fmt.encrypt and fmt.key_ring is not None and fmt.new_data_key() is None


def test_a_missing_key_file_refuses_the_start_naming_the_key_pair_and_the_file(pairs):
    good = pairs[0]
    good.private_file.rename(good.private_file.with_suffix(".gone"))
    with pytest.raises(SettingsError, match=r"key pair 'k1': the private key file .*k1-private\.pem cannot be read"):
        object_format(_settings(good, encryption_enabled=True, encryption_key_pair_id="k1"))


def test_a_file_that_is_not_the_key_pairs_key_refuses_the_start_without_showing_any_key(pairs):
    first, second = pairs
    mixed = KeyPairFiles("k1", first.public_file, second.private_file, first.private_key)
    with pytest.raises(SettingsError, match="does not belong to the public key") as caught:
        object_format(_settings(mixed))
    assert "BEGIN" not in str(caught.value)
    first.public_file.write_text("not a key")
    with pytest.raises(SettingsError, match="not an RSA key in PEM"):
        object_format(_settings(first))


def test_a_broker_with_an_unusable_key_file_does_not_start_and_opens_nothing(tmp_path):
    rsm = RemoteStorageManagerSettings(
        encryption_enabled=True,
        encryption_key_pair_id="k1",
        encryption_key_pairs=(("k1", str(tmp_path / "none.pem"), str(tmp_path / "none.key")),),
    )
    settings = BrokerSettings(
        broker_id=1, data_dir=str(tmp_path / "data"), metadata_store=str(tmp_path / "m.db"), controllers="x:1", rsm=rsm
    )
    with pytest.raises(SettingsError, match=r"none\.pem cannot be read"):
        BrokerAgent(settings)
    assert not (tmp_path / "m.db").exists()


def test_the_reader_gets_a_chunk_cache_of_the_configured_bound():
    storage = remote_storage(
        S3Settings(endpoint_url="http://127.0.0.1:1"), RemoteStorageManagerSettings(chunk_cache_bytes=123)
    )
    assert storage.reader.cache.max_bytes == 123 and storage.reader.rsm is storage.rsm
    assert storage.rsm.object_format.chunk_size == 4 * 1024 * 1024
