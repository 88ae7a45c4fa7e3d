"""The AWS S3 Inventory format: hand-written inventories (CSV.gz and Parquet) are read exactly, broken ones are
refused naming the file, malformed rows are counted, and build_inventory round-trips a paginated bucket."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from remote_storage.inventory import (
    BAD_KEY,
    BAD_SIZE,
    WRONG_COLUMN_COUNT,
    InventoryError,
    InventoryRow,
    build_inventory,
    covering_prefixes,
    read_inventory,
)
from remote_storage.s3 import make_s3_client
from tests.support.aws_inventory import CONFIG_DIR, CREATED_MS, CSV_SCHEMA, SOURCE, gz, write_aws_inventory
from tests.support.faults import FaultInjector

pytestmark = pytest.mark.integration

CSV_LINES_1 = [
    f'"{SOURCE}","tiered/orders-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log",'
    '"1024","2023-11-14T10:00:00.000Z","0123456789abcdef0123456789abcdef","STANDARD"',
    f'"{SOURCE}","tiered/with+space/and%2Bplus.log","7","2023-11-14T10:00:01.500Z","abc","STANDARD"',
]
CSV_LINES_2 = [f'"{SOURCE}","caf%C3%A9/%E2%82%AC.log","0","2023-11-14T10:00:02.000Z","d41d8","GLACIER"']
EXPECTED_CSV = [
    InventoryRow(
        SOURCE,
        "tiered/orders-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log",
        1024,
        1699956000000,
        "0123456789abcdef0123456789abcdef",
    ),
    InventoryRow(SOURCE, "tiered/with space/and+plus.log", 7, 1699956001500, "abc"),
    InventoryRow(SOURCE, "café/€.log", 0, 1699956002000, "d41d8"),
]


@pytest.fixture
def csv_inventory(tmp_path: Path) -> Path:
    return write_aws_inventory(
        tmp_path, {"a.csv.gz": gz(CSV_LINES_1), "b.csv.gz": gz(CSV_LINES_2)}, fmt="CSV", schema=CSV_SCHEMA
    )


def test_hand_written_csv_inventory_is_read_exactly(csv_inventory: Path) -> None:
    inv = read_inventory(str(csv_inventory))
    assert inv.creation_ms == CREATED_MS
    assert inv.source_bucket == SOURCE
    assert list(inv.rows()) == EXPECTED_CSV
    assert inv.malformed.total == 0
    # A directory holding manifest.json works too.
    assert list(read_inventory(str(csv_inventory.parent)).rows()) == EXPECTED_CSV


def test_hand_written_parquet_inventory_is_read_exactly(tmp_path: Path) -> None:
    keys = ["tiered/a b+c.log", "tiered/x-AAAAAAAAAAAAAAAAAAAAAA/3/00000000000000000042-CCCCCCCCCCCCCCCCCCCCCC.indexes"]
    files = {}
    for i, lm_type in enumerate([pa.int64(), pa.timestamp("ms", tz="UTC")]):
        table = pa.table(
            {
                "bucket": pa.array([SOURCE], pa.string()),
                "key": pa.array([keys[i]], pa.string()),
                "size": pa.array([100 + i], pa.int64()),
                "last_modified_date": pa.array([CREATED_MS - 1000 * (i + 1)], pa.int64()).cast(lm_type),
                "e_tag": pa.array([f"etag{i}"], pa.string()),
                "storage_class": pa.array(["STANDARD"], pa.string()),
            }
        )
        path = tmp_path / f"scratch{i}.parquet"
        pq.write_table(table, path)
        files[f"{i}.parquet"] = path.read_bytes()
    manifest = write_aws_inventory(
        tmp_path / "dest",
        files,
        fmt="Parquet",
        schema="message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); ... }",
    )
    inv = read_inventory(str(manifest))
    assert list(inv.rows()) == [
        InventoryRow(SOURCE, keys[0], 100, CREATED_MS - 1000, "etag0"),
        InventoryRow(SOURCE, keys[1], 101, CREATED_MS - 2000, "etag1"),
    ]


def _rewrite_manifest(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_bad_md5_is_refused_naming_the_file(csv_inventory: Path) -> None:
    _rewrite_manifest(csv_inventory, lambda d: d["files"][1].update(MD5checksum="0" * 32))
    with pytest.raises(InventoryError, match=r"data/b\.csv\.gz.*MD5"):
        read_inventory(str(csv_inventory))


def test_a_data_file_changed_after_opening_is_refused_before_its_rows(csv_inventory: Path, tmp_path: Path) -> None:
    inv = read_inventory(str(csv_inventory))
    target = tmp_path / CONFIG_DIR / "data" / "a.csv.gz"
    data = bytearray(target.read_bytes())
    data[-5] ^= 0xFF  # same size, different content
    target.write_bytes(bytes(data))
    with pytest.raises(InventoryError, match=r"a\.csv\.gz.*MD5"):
        next(inv.rows())


def test_a_manifest_changed_after_its_checksum_was_written_is_refused_before_anything_is_read(
    csv_inventory: Path,
) -> None:
    checksum = csv_inventory.with_name("manifest.checksum")
    checksum.write_text(hashlib.md5(csv_inventory.read_bytes()).hexdigest() + "\n")  # as AWS writes it
    assert list(read_inventory(str(csv_inventory)).rows()) == EXPECTED_CSV
    # The data file list edited (a file dropped, its rows with it) and every listed file still intact: only the
    # checksum can tell.
    _rewrite_manifest(csv_inventory, lambda d: d["files"].pop())
    with pytest.raises(InventoryError, match=r"manifest\.json has MD5 [0-9a-f]{32}, its manifest\.checksum says"):
        read_inventory(str(csv_inventory))
    checksum.unlink()  # a hand-made inventory without one is read
    assert len(list(read_inventory(str(csv_inventory)).rows())) == len(CSV_LINES_1)


def test_missing_file_is_refused_naming_the_file(csv_inventory: Path, tmp_path: Path) -> None:
    (tmp_path / CONFIG_DIR / "data" / "b.csv.gz").unlink()
    with pytest.raises(InventoryError, match=r"data/b\.csv\.gz.*missing"):
        read_inventory(str(csv_inventory))


def test_malformed_csv_rows_are_counted_by_reason(tmp_path: Path) -> None:
    good = f'"{SOURCE}","k%20ok","5","2023-11-14T10:00:00.000Z","e","STANDARD"'
    lines = [
        good,
        f'"{SOURCE}","too-few","5"',
        f'"{SOURCE}","extra","5","2023-11-14T10:00:00.000Z","e","STANDARD","x"',
        f'"{SOURCE}","bad-size","5kB","2023-11-14T10:00:00.000Z","e","STANDARD"',
        f'"{SOURCE}","neg-size","-1","2023-11-14T10:00:00.000Z","e","STANDARD"',
        f'"{SOURCE}","bad%FFutf8","5","2023-11-14T10:00:00.000Z","e","STANDARD"',
    ]
    manifest = write_aws_inventory(tmp_path, {"m.csv.gz": gz(lines)}, fmt="CSV", schema=CSV_SCHEMA)
    inv = read_inventory(str(manifest), max_examples=3)
    assert [r.key for r in inv.rows()] == ["k ok"]
    assert dict(inv.malformed.counts) == {WRONG_COLUMN_COUNT: 2, BAD_SIZE: 2, BAD_KEY: 1}
    assert inv.malformed.total == 5
    assert [(e.row, e.reason) for e in inv.malformed.examples] == [
        (2, WRONG_COLUMN_COUNT),
        (3, WRONG_COLUMN_COUNT),
        (4, BAD_SIZE),
    ]
    assert inv.malformed.examples[0].file.endswith("data/m.csv.gz")


# -- build_inventory against moto ----------------------------------------------------------------------------

N_OBJECTS = 2_500


@pytest.fixture(scope="module")
def filled(moto_endpoint: str) -> tuple[str, dict[str, int]]:
    """One bucket of 2,500+ objects (so listing paginates) for the module; tests never change it."""
    from concurrent.futures import ThreadPoolExecutor

    client = make_s3_client(endpoint_url=moto_endpoint)
    name = f"inv-src-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=name)
    expected: dict[str, int] = {}
    for i in range(N_OBJECTS):
        key = f"tiered/t-{i % 7}/{i:05d} with space+plus.log" if i % 10 == 0 else f"tiered/t-{i % 7}/{i:05d}.log"
        expected[key] = i % 97
    expected["outside/other.bin"] = 3

    def put(item: tuple[str, int]) -> None:
        client.put_object(Bucket=name, Key=item[0], Body=b"x" * item[1])

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, expected.items()))
    return name, expected


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_build_inventory_round_trips_a_paginated_bucket(
    s3_client: Any, filled: tuple[str, dict[str, int]], tmp_path: Path, fmt: str
) -> None:
    bucket, filled_bucket = filled
    seen: list[int] = []
    manifest = build_inventory(
        s3_client,
        bucket=bucket,
        prefix="tiered/",
        dest=str(tmp_path / "inv"),
        fmt=fmt,  # type: ignore[arg-type]
        now_ms=CREATED_MS,
        rows_per_file=1_000,
        progress=seen.append,
    )
    doc = json.loads(Path(manifest).read_text())
    assert len(doc["files"]) == 3  # 2,500 rows at 1,000 per file
    assert doc["fileFormat"] == ("CSV" if fmt == "csv" else "Parquet")
    assert seen[-1] == N_OBJECTS
    inv = read_inventory(manifest)
    assert inv.creation_ms == CREATED_MS
    rows = list(inv.rows())
    assert inv.malformed.total == 0
    assert {r.bucket for r in rows} == {bucket}
    want = {k: v for k, v in filled_bucket.items() if k.startswith("tiered/")}
    assert {r.key: r.size for r in rows} == want
    assert len(rows) == len(want)
    assert all(r.last_modified_ms > 0 and r.etag for r in rows)


def test_build_inventory_to_s3_and_read_back(s3_client: Any, filled: tuple[str, dict[str, int]]) -> None:
    bucket, filled_bucket = filled
    dest_bucket = f"{bucket}-inv"
    s3_client.create_bucket(Bucket=dest_bucket)
    manifest = build_inventory(
        s3_client, bucket=bucket, dest=f"s3://{dest_bucket}/inventory/{bucket}/", now_ms=CREATED_MS, rows_per_file=900
    )
    assert manifest == f"s3://{dest_bucket}/inventory/{bucket}/manifest.json"
    inv = read_inventory(manifest, s3_client=s3_client)
    assert {r.key: r.size for r in inv.rows()} == filled_bucket
    # A missing data file in the bucket is refused, naming it.
    doc = json.loads(s3_client.get_object(Bucket=dest_bucket, Key=f"inventory/{bucket}/manifest.json")["Body"].read())
    s3_client.delete_object(Bucket=dest_bucket, Key=doc["files"][0]["key"])
    with pytest.raises(InventoryError, match=doc["files"][0]["key"].replace(".", r"\.") + ".*missing"):
        read_inventory(f"s3://{dest_bucket}/inventory/{bucket}/", s3_client=s3_client)
    # A manifest rewritten without the deleted file no longer matches the manifest.checksum written beside it.
    doc["files"].pop(0)
    s3_client.put_object(Bucket=dest_bucket, Key=f"inventory/{bucket}/manifest.json", Body=json.dumps(doc).encode())
    with pytest.raises(InventoryError, match=r"manifest\.checksum says"):
        read_inventory(manifest, s3_client=s3_client)


def test_build_inventory_retries_throttling_and_resets_through_the_one_retry_layer(
    moto_endpoint: str, filled: tuple[str, dict[str, int]]
) -> None:
    bucket, filled_bucket = filled
    client = make_s3_client(endpoint_url=moto_endpoint)
    faults = FaultInjector(client)
    faults.fail("ListObjectsV2", "slowdown", "reset")
    faults.fail("PutObject", "slowdown", "internal", "reset")
    dest_bucket = f"{bucket}-retried"
    client.create_bucket(Bucket=dest_bucket)
    waits: list[float] = []
    dest = f"s3://{dest_bucket}/inv/"
    manifest = build_inventory(
        client, bucket=bucket, dest=dest, now_ms=CREATED_MS, rows_per_file=900, sleep=waits.append
    )
    assert {r.key: r.size for r in read_inventory(manifest, s3_client=client).rows()} == filled_bucket
    assert faults.faults_served == {"ListObjectsV2": 2, "PutObject": 3}
    assert len(waits) == 5  # each fault cost one attempt and one wait, nothing more


def test_an_inventory_write_that_fails_for_good_names_the_destination(
    s3_client: Any, filled: tuple[str, dict[str, int]]
) -> None:
    bucket, _ = filled
    with pytest.raises(InventoryError, match=r"writing s3://no-such-bucket-[0-9a-f]+/inv/data/.* failed"):
        build_inventory(s3_client, bucket=bucket, dest=f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/inv/", now_ms=1)


def test_a_listing_that_fails_for_good_names_the_bucket_and_writes_no_manifest(s3_client: Any, tmp_path: Path) -> None:
    missing = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InventoryError, match=rf"listing s3://{missing}/tiered/ failed: .*NoSuchBucket"):
        build_inventory(s3_client, bucket=missing, prefix="tiered/", dest=str(tmp_path / "inv"), now_ms=1)
    assert not (tmp_path / "inv" / "manifest.json").exists()


def test_reading_s3_without_a_client_is_refused() -> None:
    with pytest.raises(InventoryError, match="needs an S3 client"):
        read_inventory("s3://b/manifest.json")


def test_several_prefixes_are_listed_each_object_once(s3_client: Any, bucket: str, tmp_path: Path) -> None:
    """The scanned prefix and those segments record in their custom metadata, in one inventory."""
    keys = ["tiered/a.log", "tiered/sub/b.log", "old-cluster/c.log", "old-cluster-2/d.log", "elsewhere/e.log"]
    for key in keys:
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"x")
    also = ["tiered/sub/", "old-cluster/", "old-cluster", "tiered/"]
    manifest = build_inventory(
        s3_client, bucket=bucket, prefix="tiered/", also_prefixes=also, dest=str(tmp_path / "inv"), now_ms=CREATED_MS
    )
    rows = [r.key for r in read_inventory(manifest).rows()]
    assert sorted(rows) == sorted(keys[:4])  # "old-cluster" covers both old-cluster prefixes; nothing twice
    assert len(rows) == len(set(rows))


@pytest.mark.parametrize(
    ("prefixes", "listed"),
    [
        (["tiered/", "tiered/sub/", "old/"], ["old/", "tiered/"]),
        (["tiered/", "", "old/"], [""]),
        (["b/", "a", "ab/"], ["a", "b/"]),
        ([], []),
    ],
)
def test_the_prefixes_listed_cover_every_one_asked_for_without_overlap(prefixes: list[str], listed: list[str]) -> None:
    assert covering_prefixes(prefixes) == listed
