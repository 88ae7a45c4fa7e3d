"""A set-up newcomer's HOME (tests.support.newcomer_home): empty but for a link to the scan's class archive, when
this machine has one, where a scan run with that HOME looks for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_storage.scan import class_archive
from tests.support.newcomer_home import newcomer_home

pytestmark = pytest.mark.unit


def test_the_home_links_the_machines_archive_where_a_scan_with_that_home_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "machine" / "a.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"classes")
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, str(archive))
    home = newcomer_home(tmp_path / "home")
    assert newcomer_home(tmp_path / "home") == home  # again: nothing changes, nothing fails
    monkeypatch.delenv(class_archive.ARCHIVE_ENV)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    found = class_archive.installed()
    assert found is not None and found.read_bytes() == b"classes" and found.is_relative_to(home)
    assert [p.name for p in home.iterdir()] == [".cache"]


def test_with_no_archive_on_the_machine_the_home_is_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, "")
    assert list(newcomer_home(tmp_path / "home").iterdir()) == []
