"""How the executors read an inventory's data files (remote_storage.scan.sources): lines split as Hadoop splits
them, Parquet timestamps floored to milliseconds, credentials kept out of reprs, and a corrupt ``s3://`` data file
found by the executor that reads it and raised on the driver as the inventory error it is."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from remote_storage.inventory import InventoryError
from remote_storage.scan import sources
from remote_storage.scan.job import ScanSettings
from remote_storage.scan.run import scan
from remote_storage.scan.sources import ObjectStoreAccess
from tests.support import aws_inventory
from tests.support.scan_world import PREFIX, World


@pytest.mark.unit
def test_csv_lines_end_at_lf_crlf_or_cr_even_across_chunks_and_blank_lines_are_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "READ_CHUNK_BYTES", 3)  # every "\r\n" is cut somewhere
    path = tmp_path / "f.csv.gz"
    path.write_bytes(gzip.compress(b"a,b\r\nc,d\n\n  \t\re,f\rg,\xff\r\n"))
    got = [line for _, line in sources._csv_lines(path, "f")]
    assert got == ["a,b", "c,d", "e,f", "g,\ufffd"]


@pytest.mark.unit
def test_parquet_timestamps_become_epoch_milliseconds_floored_as_unix_millis_does() -> None:
    micros = pa.array([1_500, -1_500, None], pa.timestamp("us", tz="UTC"))
    assert sources._epoch_ms(micros).to_pylist() == [1, -2, None]
    assert sources._epoch_ms(pa.array([2], pa.timestamp("s"))).to_pylist() == [2000]
    assert sources._epoch_ms(pa.array([7], pa.int32())).to_pylist() == [7]
    assert sources._epoch_ms(pa.array(["x"], pa.string())).to_pylist() == [None]


@pytest.mark.unit
def test_the_object_store_access_never_shows_its_secrets() -> None:
    access = ObjectStoreAccess("http://127.0.0.1:9", "eu-west-1", "AKIDEXAMPLE", "wJalrXUtnFEMI")
    assert "AKIDEXAMPLE" not in repr(access) and "wJalrXUtnFEMI" not in repr(access)


@pytest.mark.spark
def test_an_s3_data_file_that_is_not_the_one_the_manifest_lists_fails_the_scan_naming_it(
    spark: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    root = tmp_path / "inventory"
    lines = [aws_inventory.csv_line("kafka-tiered", "tiered/x", 1, 1_600_000_000_000)]
    manifest = aws_inventory.write_aws_inventory(
        root, {"a.csv.gz": aws_inventory.gz(lines)}, fmt="CSV", schema=aws_inventory.CSV_SCHEMA
    )
    doc = json.loads(manifest.read_text())
    doc["files"][0]["MD5checksum"] = "0" * 32  # same size, another MD5: only reading the file shows it
    manifest.write_text(json.dumps(doc))
    for path in (p for p in root.rglob("*") if p.is_file()):
        s3_client.put_object(Bucket=bucket, Key=path.relative_to(root).as_posix(), Body=path.read_bytes())
    export_dir = World([], [], [], []).write_export(tmp_path / "export")
    uri = f"s3://{bucket}/{manifest.relative_to(root).as_posix()}"
    with pytest.raises(InventoryError, match=rf"s3://{bucket}/inv/.*/a\.csv\.gz has MD5 .*, the manifest says 0+"):
        scan(
            inventory_uri=uri,
            export_dir=export_dir,
            out_dir=tmp_path / "out",
            settings=ScanSettings(prefix=PREFIX),
            s3_client=s3_client,
            spark=spark,
        )
    assert not (tmp_path / "out" / ".inventory-staging").exists()
