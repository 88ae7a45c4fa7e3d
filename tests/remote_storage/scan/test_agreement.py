"""The Spark scan and the pure Python classifier (policies.orphans) agree on every generated bucket: per object
(category, reclaimable, anomaly, the prefix it was found under) and on the multiset of anomalies, for CSV and
Parquet inventories written by hand in AWS's format, with the manifests the size rule needs read by the executors
from moto's S3 server (or not read at all)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote_storage.inventory import read_inventory
from remote_storage.scan import contract as c
from remote_storage.scan.job import ManifestSource, ScanSettings, run_scan
from remote_storage.scan.sources import InventorySource, ObjectStoreAccess
from tests.support.scan_world import GRACE_MS, PREFIX, World, worlds
from tests.support.soak import sized

pytestmark = pytest.mark.spark

# Each example is a whole Spark scan (about 14 s here), and each world draws up to four topics in random states with
# their segments, stray objects and anomalies. make test draws 6 worlds (both formats, with and without manifest
# reads, in play on every run; fixed worlds with every category are test_planted_bucket's); make soak draws 40.
AGREEMENT_EXAMPLES = sized(6, soak=40)


def spark_scan(
    spark: Any,
    world: World,
    root: Path,
    fmt: str,
    *,
    bucket: str = "kafka-tiered",
    reading: ManifestSource | None = None,
) -> tuple[dict[str, tuple[Any, ...]], Counter[Any]]:
    manifest = world.write_inventory(root / "inventory", fmt, per_file=7, bucket=bucket)
    export_dir = world.write_export(root / "export")
    inventory = read_inventory(str(manifest))
    source = InventorySource.from_inventory(inventory)
    out = root / "out"
    run_scan(spark, source, export_dir, out, ScanSettings(prefix=PREFIX, grace_ms=GRACE_MS), manifests=reading)
    objects = pq.read_table(out / c.OBJECTS_DIR).to_pylist()
    anomalies = pq.read_table(out / c.ANOMALIES_DIR).to_pylist()
    got = {o["key"]: (o["category"], o["reclaimable"], o["anomaly"], o["object_prefix"]) for o in objects}
    assert len(got) == len(objects)
    return got, Counter((a["type"], a["topic_id"], a["segment_id"], a["key"]) for a in anomalies)


@pytest.mark.soak
@settings(
    max_examples=AGREEMENT_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds(), fmt=st.sampled_from(["csv", "parquet"]), read=st.sampled_from([True, True, False]))
def test_spark_scan_and_python_classifier_agree(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    s3_client: Any,
    moto_endpoint: str,
    world: World,
    fmt: str,
    read: bool,
) -> None:
    bucket = f"agree-{uuid.uuid4().hex[:16]}"  # one per example: hypothesis may replay the same ids
    s3_client.create_bucket(Bucket=bucket)
    for key, body in world.bodies.items():
        s3_client.put_object(Bucket=bucket, Key=key, Body=body)
    reading = ManifestSource(bucket, ObjectStoreAccess(endpoint_url=moto_endpoint)) if read else None
    got, got_anomalies = spark_scan(spark, world, tmp_path_factory.mktemp("agree"), fmt, bucket=bucket, reading=reading)
    expected = world.classify(manifests_read=read)
    want = {v.key: (v.category, v.reclaimable, v.anomaly, v.object_prefix) for v in expected.objects}
    assert got == want
    assert got_anomalies == Counter((a.type, a.topic_id, a.segment_id, a.key) for a in expected.anomalies)


def test_an_export_listing_a_topic_id_twice_is_refused_naming_it(spark: Any, tmp_path: Path) -> None:
    from dataclasses import replace

    from remote_storage.export_format import TopicMeta
    from remote_storage.scan.job import ScanError

    topic = TopicMeta("AAAAAAAAAAAAAAAAAAAAAA", "orders", "ENABLED", 1, "NONE", -1, -1, False)
    world = World(topics=[topic, replace(topic, deleted=True)], segments=[], epochs=[], objects=[])
    with pytest.raises(ScanError, match=r"topic id more than once.*AAAAAAAAAAAAAAAAAAAAAA"):
        spark_scan(spark, world, tmp_path, "parquet")


def test_an_export_listing_a_segment_twice_is_refused_naming_it(spark: Any, tmp_path: Path) -> None:
    from dataclasses import replace

    from remote_storage.export_format import SegmentMeta, TopicMeta
    from remote_storage.scan.job import ScanError

    topic = TopicMeta("AAAAAAAAAAAAAAAAAAAAAA", "orders", "ENABLED", 1, "NONE", -1, -1, False)
    segment = SegmentMeta(
        topic.topic_id, "orders", 0, "BBBBBBBBBBBBBBBBBBBBBB", 0, 9, 10, 1, "COPY_SEGMENT_FINISHED", 0, 0
    )
    # The same segment, once under another prefix: the count of rows and of distinct segments differ.
    twice = [segment, replace(segment, object_prefix="old/")]
    world = World(topics=[topic], segments=twice, epochs=[], objects=[])
    with pytest.raises(ScanError, match=r"a segment more than once.*segment_id=BBBBBBBBBBBBBBBBBBBBBB, 2 rows"):
        spark_scan(spark, world, tmp_path, "parquet")


def test_malformed_rows_are_counted_by_the_readers_reasons_never_dropped(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remote_storage.scan import job
    from remote_storage.scan.summary import build_summary
    from tests.support import aws_inventory as aws

    observed: list[dict[str, int] | None] = []
    counts = job._malformed_counts

    def counted(seen: Any) -> dict[str, int] | None:
        observed.append(counts(seen))
        return observed[-1]

    monkeypatch.setattr(job, "_malformed_counts", counted)

    good = aws.csv_line(aws.SOURCE, "tiered/a b+c.log", 5, aws.CREATED_MS - 1000)
    lines = [
        good,
        f'"{aws.SOURCE}","too-few","5"',
        f'"{aws.SOURCE}","extra","5","2023-11-14T10:00:00.000Z","e","STANDARD","x"',
        f'"{aws.SOURCE}","bad-size","5kB","2023-11-14T10:00:00.000Z","e","STANDARD"',
        f'"{aws.SOURCE}","neg-size","-1","2023-11-14T10:00:00.000Z","e","STANDARD"',
        f'"{aws.SOURCE}","bad%FFutf8","5","2023-11-14T10:00:00.000Z","e","STANDARD"',
        f'"{aws.SOURCE}","bad%ZZescape","5","2023-11-14T10:00:00.000Z","e","STANDARD"',
        f'"{aws.SOURCE}","","5","2023-11-14T10:00:00.000Z","e","STANDARD"',
        f'"{aws.SOURCE}","late","5","yesterday","e","STANDARD"',
    ]
    manifest = aws.write_aws_inventory(tmp_path / "inv", {"m.csv.gz": aws.gz(lines)}, fmt="CSV", schema=aws.CSV_SCHEMA)
    reader = read_inventory(str(manifest))
    assert [r.key for r in reader.rows()] == ["tiered/a b+c.log"]
    export_dir = World([], [], [], []).write_export(tmp_path / "export")
    source = InventorySource.from_inventory(reader)
    settings = ScanSettings(prefix=PREFIX, grace_ms=GRACE_MS)
    agg = run_scan(spark, source, export_dir, tmp_path / "out", settings)

    assert agg.malformed_by_reason == dict(reader.malformed.counts)
    assert observed == [agg.malformed_by_reason]  # counted as the classification read them, not by a second read
    assert agg.rows == len(lines)
    assert {e["reason"] for e in agg.malformed_examples} == set(reader.malformed.counts)
    assert all(e["file"].endswith(".csv.gz") and e["raw"] for e in agg.malformed_examples)
    objects = pq.read_table(tmp_path / "out" / c.OBJECTS_DIR).to_pylist()
    assert [(o["key"], o["category"]) for o in objects] == [("tiered/a b+c.log", c.UNPARSEABLE)]
    summary = build_summary(agg, source=source, export_dir=export_dir, settings=settings, generated_at_ms=0)
    assert summary["inventory"]["malformed_rows"]["total"] == len(lines) - 1
    assert summary["totals"]["anomalies"][c.MALFORMED_INVENTORY_ROW] == len(lines) - 1
    assert summary["alert"]["exceeded"] is True


class _Seen:
    """An observation's metrics, as Spark hands them over (``Observation.get``)."""

    def __init__(self, **metrics: int) -> None:
        self.get = metrics


def test_observed_malformed_counts_name_each_reason_or_send_the_count_to_a_second_read() -> None:
    from remote_storage.scan.job import MALFORMED_REASONS, _malformed_counts

    zeros = {f"reason{i}": 0 for i in range(len(MALFORMED_REASONS))}
    assert _malformed_counts(_Seen(malformed=0, **zeros)) == {}
    some = {**zeros, "reason0": 2, "reason3": 1}
    assert _malformed_counts(_Seen(malformed=3, **some)) == {MALFORMED_REASONS[0]: 2, MALFORMED_REASONS[3]: 1}
    assert _malformed_counts(_Seen(malformed=4, **some)) is None  # a reason no name covers: counted again
