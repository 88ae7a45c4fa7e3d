"""A set-up newcomer's HOME (tests.support.newcomer_home): empty but for links to the scan's class archive and its
Spark home, when this machine has them, where a scan run with that HOME looks for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_storage.scan import class_archive
from tests.support.newcomer_home import newcomer_home

pytestmark = pytest.mark.unit


def test_the_home_links_the_machines_archive_and_spark_home_where_a_scan_with_that_home_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "machine" / "a.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"classes")
    class_archive.make_spark_home(class_archive.spark_home_of(archive))  # of the installed PySpark
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, str(archive))
    home = newcomer_home(tmp_path / "home")
    assert newcomer_home(tmp_path / "home") == home  # again: nothing changes, nothing fails
    monkeypatch.delenv(class_archive.ARCHIVE_ENV)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    found = class_archive.installed()
    # Found through the links, as the machine's own files: the JVM checks its jars by the paths they were archived at.
    assert found == class_archive.Archive(archive, class_archive.spark_home_of(archive))
    assert [p.name for p in home.iterdir()] == [".cache"]
    linked = class_archive.default_path()
    assert linked is not None and linked.is_relative_to(home) and linked.is_symlink()


def test_with_no_archive_on_the_machine_the_home_is_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, "")
    assert list(newcomer_home(tmp_path / "home").iterdir()) == []
