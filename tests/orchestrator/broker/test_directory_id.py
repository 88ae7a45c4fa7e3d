"""A broker's log directory id (``meta.properties``' ``directory.id``): made once for a directory without one, read
back unchanged ever after, refused when unreadable; and the controller's verdict on a registration whose ids are
all new (a disk replaced by an empty one)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from orchestrator.broker.directory_id import META_PROPERTIES, load_or_create
from orchestrator.controller.membership import replaced_disk
from orchestrator.errors import KafkaStorageError
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit


def test_a_directory_gets_an_id_once_and_keeps_it(tmp_path):
    first, created = load_or_create(tmp_path, broker_id=1, cluster_id="c")
    assert created
    text = (tmp_path / META_PROPERTIES).read_text()
    assert f"directory.id={first}" in text and "node.id=1" in text and "cluster.id=c" in text
    assert load_or_create(tmp_path, broker_id=1, cluster_id="c") == (first, False)
    assert not list(tmp_path.glob("*.tmp"))


def test_an_emptied_directory_gets_a_new_id(tmp_path):
    first, _ = load_or_create(tmp_path, broker_id=1, cluster_id="c")
    (tmp_path / META_PROPERTIES).unlink()
    second, created = load_or_create(tmp_path, broker_id=1, cluster_id="c")
    assert created and second != first


@pytest.mark.parametrize("text", ["version=1\n", "directory.id=not-a-uuid\n", "directory.id=\n"])
def test_a_file_without_a_valid_id_refuses_the_start_rather_than_guess(tmp_path, text):
    (tmp_path / META_PROPERTIES).write_text(text)
    with pytest.raises(KafkaStorageError, match=r"meta\.properties"):
        load_or_create(tmp_path, broker_id=1, cluster_id="c")
    assert (tmp_path / META_PROPERTIES).read_text() == text, "never rewritten"


def test_only_a_registration_whose_ids_are_all_new_says_the_disk_was_replaced():
    a, b = Uuid.random(), Uuid.random()
    assert replaced_disk([a], [b])
    assert not replaced_disk([a], [a]) and not replaced_disk([a, b], [b])
    assert not replaced_disk([], [b]), "a broker that registered without ids before says nothing either way"
    assert not replaced_disk([a], [])


def test_a_disk_that_fails_reading_the_file_is_the_disks_failure_not_the_files(tmp_path, monkeypatch):
    """EIO reading meta.properties is raised as the OSError it is (the broker halts as for a failed log directory,
    exit 74, 'fix or replace the disk'), not as a damaged file to restore or move aside."""
    load_or_create(tmp_path, broker_id=1, cluster_id="c")

    def failing(self, *args, **kwargs):
        raise OSError(errno.EIO, "Input/output error", str(self))

    monkeypatch.setattr(Path, "read_text", failing)
    with pytest.raises(OSError) as raised:
        load_or_create(tmp_path, broker_id=1, cluster_id="c")
    assert raised.value.errno == errno.EIO and not isinstance(raised.value, KafkaStorageError)
