"""Files holding keys, credentials, metadata or records are the owner's alone: 0600 files in 0700 directories.

A real local cluster is run under the permissive umask 022 a shell usually has: a tiered topic gets records and
remote segments, the cluster stops (the embedded S3 writes its objects to disk), and then every file and directory
the run left in the cluster's directory (the store and its WAL, settings, ``cluster.json`` with the embedded S3's
keys, process logs, segment files, the S3 snapshot) must have no group or other permission bits.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.local import cluster as lc
from orchestrator.private_files import open_private_append, private_dir, write_private
from tests.support.live_cluster import LiveCluster, wait_until


@pytest.fixture
def shell_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _open_to_others(root: Path) -> list[str]:
    found = []
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            found.append(f"{oct(mode)} {path.relative_to(root)}")
    return found


@pytest.mark.unit
def test_the_helpers_create_owner_only_files_and_directories(tmp_path: Path, shell_umask: None) -> None:
    directory = private_dir(tmp_path / "a" / "b")
    write_private(directory / "settings.toml", "x = 1\n")
    write_private(directory / "settings.toml", b"x = 2\n")  # replaced, still private
    with open_private_append(directory / "process.log") as out:
        out.write(b"line\n")
    (tmp_path / "wide").mkdir(mode=0o755)
    private_dir(tmp_path / "wide")  # an existing directory is restricted too
    assert (directory / "settings.toml").read_text() == "x = 2\n"
    assert _open_to_others(directory) == []
    assert stat.S_IMODE((tmp_path / "wide").stat().st_mode) == 0o700


@pytest.mark.integration
def test_a_cluster_run_leaves_no_file_or_directory_open_to_group_or_others(tmp_path: Path, shell_umask: None) -> None:
    live = LiveCluster(tmp_path / "cluster", brokers=1, controllers=1)
    try:
        tiered = {"remote.storage.enable": "true", "local.retention.ms": "0"}
        live.call(lambda c: c.create_topic("private", partitions=1, replication_factor=1, configs=tiered))
        live.call(lambda c: c.produce("private", [b"v" * 400 for _ in range(100)], partition=0))
        topic_id = live.status("private").topic_id
        wait_until("a segment copied to S3", lambda: live.segments(topic_id), timeout_s=60)
        lc.down(live.dir)  # stops everything; the embedded S3 writes its objects to disk
        assert (live.dir / "metadata.db").exists() and any((live.dir / "s3").rglob("*"))
        assert any((live.dir / "data").rglob("*.log")), "segment files were written"
        assert _open_to_others(live.dir) == []
    finally:
        live.close()


@pytest.mark.unit
def test_a_secured_clusters_security_files_and_its_store_are_owner_only_under_a_shell_umask(
    tmp_path: Path, shell_umask: None
) -> None:
    """Made by the CLI's own process (umask 022), not a server's: the security files of a --tls --sasl --acls
    cluster on an external S3 (no key pair of its own), and the store the first SCRAM logins are written into
    (``metadata.db`` and SQLite's ``-wal`` and ``-shm`` beside it). Both were 0755/0644 before."""
    from orchestrator.local.security import LocalSecurity, prepare
    from orchestrator.metadata.sqlite import SqliteMetadataStore

    prepare(tmp_path, LocalSecurity(tls=True, sasl=True, acls=True), [("controller", 1), ("broker", 1)])
    assert (tmp_path / "security").is_dir()
    with SqliteMetadataStore(tmp_path / "metadata.db"):  # the schema written: the WAL and its index exist
        assert {p.name for p in tmp_path.glob("metadata.db*")} >= {"metadata.db", "metadata.db-wal", "metadata.db-shm"}
        assert _open_to_others(tmp_path) == []
