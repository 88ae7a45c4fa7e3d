"""The full-disk fault (chaos.disk) on a real tmpfs, as root: a directory moved onto a file system of its own keeps
its files, a ballast takes every free byte so that any write needing a block fails with ENOSPC (to a file opened
before too), and deleting it makes the disk whole again; a directory that cannot be moved is left as it was."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from chaos.disk import BALLAST, Ballast, DiskFaultRefused, SizedDisk, empty_directory

pytestmark = pytest.mark.integration

SIZE = 4 * 1024 * 1024


def _sized(directory: Path) -> SizedDisk:
    try:
        return SizedDisk(directory, SIZE)
    except DiskFaultRefused as exc:
        pytest.fail(f"{exc}; this test needs root")


def _mounted(directory: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(directory)], check=False).returncode == 0


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "broker-1"
    (directory / "orders-0").mkdir(parents=True)
    (directory / "orders-0" / "00000000000000000000.log").write_bytes(b"x" * 5000)
    (directory / "meta.properties").write_text("broker.id=1\n")
    directory.chmod(0o700)
    return directory


def test_a_sized_disk_keeps_the_files_and_a_ballast_fills_it_until_released(data_dir: Path) -> None:
    disk = _sized(data_dir)
    try:
        assert _mounted(data_dir)
        assert (data_dir / "orders-0" / "00000000000000000000.log").read_bytes() == b"x" * 5000
        assert (data_dir / "meta.properties").read_text() == "broker.id=1\n"
        assert data_dir.stat().st_mode & 0o777 == 0o700
        assert not data_dir.with_name("broker-1.moving").exists()
        st = os.statvfs(data_dir)
        assert st.f_blocks * st.f_frsize == SIZE

        with (data_dir / "orders-0" / "00000000000000000000.log").open("ab", buffering=0) as opened:
            ballast = Ballast(disk)
            try:
                assert disk.free_bytes() == 0
                with pytest.raises(OSError) as new_file:
                    (data_dir / "orders-0" / "00000000000000000001.log").write_bytes(b"y" * 4096)
                assert new_file.value.errno == errno.ENOSPC
                # the file's last page takes what fits in it (a short write), then a new page is needed
                assert opened.write(b"z" * 8192) < 8192
                with pytest.raises(OSError) as appended:
                    opened.write(b"z" * 8192)
                assert appended.value.errno == errno.ENOSPC
            finally:
                ballast.release()
            assert not (data_dir / BALLAST).exists() and disk.free_bytes() > 0
            assert opened.write(b"z" * 8192) == 8192
        ballast.release()  # idempotent
    finally:
        disk.release()
    assert not _mounted(data_dir)
    disk.release()  # idempotent


def test_a_directory_that_cannot_be_moved_onto_a_tmpfs_is_left_as_it_was(data_dir: Path) -> None:
    with pytest.raises(DiskFaultRefused):
        SizedDisk(data_dir, -1)  # mount refuses the size
    assert not _mounted(data_dir)
    assert (data_dir / "orders-0" / "00000000000000000000.log").read_bytes() == b"x" * 5000
    assert not data_dir.with_name("broker-1.moving").exists()


def test_a_lost_disk_leaves_the_directory_itself_and_nothing_under_it(tmp_path: Path) -> None:
    data = tmp_path / "broker-1"
    (data / "topic-0").mkdir(parents=True)
    (data / "topic-0" / "00000000000000000000.log").write_bytes(b"x" * 100)
    (data / "meta.properties").write_text("id")
    (data / "link").symlink_to(tmp_path)  # a link is removed, not followed
    assert empty_directory(data) == 3
    assert data.is_dir() and list(data.iterdir()) == [] and tmp_path.is_dir()
