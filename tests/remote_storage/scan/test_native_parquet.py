"""Spark's own Parquet reader against the executors' pyarrow reader: the same rows, file by file, for every column
type the native path admits, and the pyarrow path for every file it does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from remote_storage.inventory import InventoryError
from remote_storage.scan import job, sources
from remote_storage.scan.sources import DataFileRef, InventorySource

MS_2023 = 1_700_000_000_123


def _ref(path: Path) -> DataFileRef:
    return DataFileRef(path.resolve().as_uri(), "", str(path.resolve()), path.stat().st_size, "")


def _write(path: Path, columns: dict[str, pa.Array]) -> DataFileRef:
    pq.write_table(pa.table(columns), path)
    return _ref(path)


def _source(refs: list[DataFileRef]) -> InventorySource:
    return InventorySource("file:///manifest.json", "src", 0, "parquet", (), tuple(refs))


FILES: dict[str, dict[str, pa.Array]] = {
    "tz-ms": {
        "bucket": pa.array(["b", None, "b", "b"]),
        "key": pa.array(["tiered/a", "", None, "tiered/ünï"]),
        "size": pa.array([5, 0, 7, 2**40], pa.int64()),
        "last_modified_date": pa.array([MS_2023, -1_500, None, 0], pa.timestamp("ms", tz="UTC")),
    },
    "naive-us": {  # no time zone, microseconds, negative instants: floored as unix_millis floors
        "key": pa.array(["k1", "k2", "k3"]),
        "size": pa.array([1, 2, 3], pa.int32()),
        "last_modified_date": pa.array([1_500, -1_500, -1], pa.timestamp("us")),
    },
    "string-size-int-lm": {
        "bucket": pa.array(["b", "b", "b"]),
        "key": pa.array(["x", "y", "z"]),
        "size": pa.array(["12", "5kB", None]),
        "last_modified_date": pa.array([MS_2023, None, -5], pa.int64()),
    },
    "no-last-modified": {
        "key": pa.array(["only"]),
        "size": pa.array([9], pa.int64()),
    },
    "text-last-modified": {
        "key": pa.array(["t"]),
        "size": pa.array([1], pa.int64()),
        "last_modified_date": pa.array(["yesterday"]),
    },
}


@pytest.mark.spark
def test_spark_reads_every_admitted_file_as_the_executors_do(spark: Any, tmp_path: Path) -> None:
    refs = [_write(tmp_path / f"{name}.parquet", cols) for name, cols in FILES.items()]
    src = _source(refs)
    native = job.native_files(src)
    assert native is not None and len(native) == len(refs)

    def rows(df: Any) -> list[tuple[Any, ...]]:
        return sorted((tuple(r) for r in df.collect()), key=repr)

    expected = rows(job._file_rows(spark, src, sources.PARQUET_ROWS_SCHEMA))
    got = [(sources.file_name(native, r[0]), *r[1:]) for r in rows(job._native_parquet_rows(spark, native))]
    assert sorted(got, key=repr) == expected
    assert len(expected) == sum(len(next(iter(cols.values()))) for cols in FILES.values())


@pytest.mark.unit
@pytest.mark.parametrize(
    ("why", "columns"),
    [
        (
            "nanoseconds",
            {"key": pa.array(["k"]), "size": pa.array([1]), "last_modified_date": pa.array([1], pa.timestamp("ns"))},
        ),
        ("binary key", {"key": pa.array([b"k"], pa.binary()), "size": pa.array([1])}),
        ("float size", {"key": pa.array(["k"]), "size": pa.array([1.5])}),
        ("names by case", {"key": pa.array(["k"]), "Key": pa.array(["K"]), "size": pa.array([1])}),
    ],
)
def test_a_file_spark_would_read_differently_goes_through_pyarrow(
    tmp_path: Path, why: str, columns: dict[str, pa.Array]
) -> None:
    ref = _write(tmp_path / "f.parquet", columns)
    assert sources.native_parquet(ref) is None, why
    good = _write(tmp_path / "good.parquet", FILES["tz-ms"])
    assert job.native_files(_source([good, ref])) is None  # one such file: the whole inventory goes through pyarrow


@pytest.mark.unit
def test_a_glob_character_in_the_path_or_an_s3_file_goes_through_pyarrow(tmp_path: Path) -> None:
    ref = _write(tmp_path / "a[1].parquet", FILES["tz-ms"])
    assert sources.native_parquet(ref) is None
    assert sources.native_parquet(DataFileRef("s3://b/k", "b", "k", 1, "")) is None


@pytest.mark.unit
def test_a_file_without_a_key_column_is_refused_naming_it(tmp_path: Path) -> None:
    ref = _write(tmp_path / "nokey.parquet", {"size": pa.array([1])})
    with pytest.raises(InventoryError, match=r"nokey\.parquet has no 'key' column"):
        sources.native_parquet(ref)


@pytest.mark.unit
def test_spark_file_paths_map_back_to_the_inventorys_names(tmp_path: Path) -> None:
    ref = _write(tmp_path / "with space.parquet", FILES["tz-ms"])
    native = sources.native_parquet(ref)
    assert native is not None
    spark_path = "file://" + str(tmp_path / "with space.parquet").replace(" ", "%20")
    assert sources.file_name((native,), spark_path) == ref.name
    assert sources.file_name((native,), "file:///elsewhere.parquet") == "file:///elsewhere.parquet"
