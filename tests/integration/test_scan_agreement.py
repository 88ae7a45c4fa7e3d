"""The Spark scan and the pure Python classifier (policies.orphans) agree on every generated bucket: per object
(category, reclaimable, anomaly) and on the multiset of anomalies, for CSV and Parquet inventories written by hand
in AWS's format."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote_storage.inventory import read_inventory
from remote_storage.scan import contract as c
from remote_storage.scan.job import ScanSettings, StagedInventory, run_scan
from tests.support.scan_world import GRACE_MS, PREFIX, World, worlds

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def spark_scan(spark: Any, world: World, root: Path, fmt: str) -> tuple[dict[str, tuple[Any, ...]], Counter[Any]]:
    manifest = world.write_inventory(root / "inventory", fmt, per_file=7)
    export_dir = world.write_export(root / "export")
    inventory = read_inventory(str(manifest))
    source = StagedInventory.from_inventory(inventory, inventory.stage(root / "staging"))
    out = root / "out"
    run_scan(spark, source, export_dir, out, ScanSettings(prefix=PREFIX, grace_ms=GRACE_MS))
    objects = pq.read_table(out / c.OBJECTS_DIR).to_pylist()
    anomalies = pq.read_table(out / c.ANOMALIES_DIR).to_pylist()
    got = {o["key"]: (o["category"], o["reclaimable"], o["anomaly"]) for o in objects}
    assert len(got) == len(objects)
    return got, Counter((a["type"], a["topic_id"], a["segment_id"], a["key"]) for a in anomalies)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds(), fmt=st.sampled_from(["csv", "parquet"]))
def test_spark_scan_and_python_classifier_agree(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, world: World, fmt: str
) -> None:
    got, got_anomalies = spark_scan(spark, world, tmp_path_factory.mktemp("agree"), fmt)
    expected = world.classify()
    want = {v.key: (v.category, v.reclaimable, v.anomaly) for v in expected.objects}
    assert got == want
    assert got_anomalies == Counter((a.type, a.topic_id, a.segment_id, a.key) for a in expected.anomalies)


def test_an_export_listing_a_topic_id_twice_is_refused_naming_it(spark: Any, tmp_path: Path) -> None:
    from dataclasses import replace

    from policies.orphans import TopicMeta
    from remote_storage.scan.job import ScanError

    topic = TopicMeta("AAAAAAAAAAAAAAAAAAAAAA", "orders", "ENABLED", 1, "NONE", -1, -1, False)
    world = World(topics=[topic, replace(topic, deleted=True)], segments=[], epochs=[], objects=[])
    with pytest.raises(ScanError, match=r"topic id more than once.*AAAAAAAAAAAAAAAAAAAAAA"):
        spark_scan(spark, world, tmp_path, "parquet")
