"""An embedded S3's stop interrupted while its snapshot is written (orchestrator/local/s3_snapshot.py): the previous
snapshot is left whole on disk, the directory says the objects were lost (a start refuses rather than bring back
an older or partial set), and the next complete snapshot replaces both. The object store here is a dict with
moto's shape (:class:`ObjectStore`); the embedded S3's own process is tested in test_embedded_s3_snapshot.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.local import s3_snapshot as snap
from orchestrator.local.s3_snapshot import SnapshotStatus, StoredObject

pytestmark = pytest.mark.unit


class DictStore:
    def __init__(self, objects: dict[str, list[StoredObject]], *, fail_after: int | None = None) -> None:
        self.objects_by_bucket, self.fail_after = objects, fail_after

    def buckets(self) -> list[str]:
        return sorted(self.objects_by_bucket)

    def objects(self, bucket: str) -> Iterator[StoredObject]:
        for n, obj in enumerate(self.objects_by_bucket[bucket]):
            if self.fail_after is not None and n >= self.fail_after:
                raise OSError(28, "No space left on device")
            yield obj

    def create_bucket(self, bucket: str) -> None:
        self.objects_by_bucket.setdefault(bucket, [])

    def put(self, bucket: str, obj: StoredObject) -> None:
        self.objects_by_bucket[bucket].append(obj)


def _obj(n: int) -> StoredObject:
    return StoredObject(f"k{n}", bytes([n]) * n, "application/x-segment", {"n": str(n)}, {"t": "v"}, 1_000_000 + n)


def test_an_interrupted_snapshot_keeps_the_previous_one_and_a_start_refuses_until_a_complete_one(tmp_path: Path):
    first = DictStore({"tiered": [_obj(1), _obj(2)]})
    assert snap.write(tmp_path, first) == 2
    before = snap.status(tmp_path)
    assert before.status is SnapshotStatus.STOPPED
    kept = {
        p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / str(before.snapshot)).rglob("*") if p.is_file()
    }

    snap.mark_running(tmp_path)  # the server ran again and took more objects
    grown = {"tiered": [_obj(1), _obj(2), _obj(3), _obj(4)]}
    with pytest.raises(OSError, match="No space left"):
        snap.write(tmp_path, DictStore(grown, fail_after=3))

    assert snap.status(tmp_path).status is SnapshotStatus.LOST, "a start must not bring back 2 of 4 objects"
    now = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / str(before.snapshot)).rglob("*") if p.is_file()}
    assert now == kept, "the previous snapshot is whole on disk"
    empty = DictStore({})
    assert snap.restore(tmp_path, empty) == 0 and empty.objects_by_bucket == {}, "nothing restored from it"

    assert snap.write(tmp_path, DictStore(grown)) == 4
    after = snap.status(tmp_path)
    assert after.status is SnapshotStatus.STOPPED and after.objects == 4
    assert sorted(p.name for p in tmp_path.glob("snapshot-*")) == [after.snapshot], "older and partial ones gone"
    back = DictStore({})
    assert snap.restore(tmp_path, back) == 4
    assert back.objects_by_bucket == grown
