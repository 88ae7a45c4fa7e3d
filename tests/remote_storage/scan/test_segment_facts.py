"""What the scan learns of the export's segments before it plans is the same whether the driver reads their ids itself
(a small export) or a Spark job counts them (a large one): the count, whether any segment records a location, the
prefixes recorded, and the refusal of a segment listed twice, naming it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote_storage import export_format
from remote_storage.export_format import SegmentMeta, TopicMeta
from remote_storage.scan.job import ScanError, _read_export, _segment_facts
from tests.support.scan_world import World, worlds

pytestmark = pytest.mark.spark

BY_SPARK = 0  # driver_max: every export is counted by the Spark job
ON_DRIVER = 1 << 40


def _both(spark: Any, export_dir: Path) -> tuple[Any, Any]:
    _, segments, _ = _read_export(spark, export_dir)
    return (
        _segment_facts(segments, export_dir, driver_max=ON_DRIVER),
        _segment_facts(segments, export_dir, driver_max=BY_SPARK),
    )


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(world=worlds(), prefixes=st.lists(st.sampled_from([None, "old/", "custom/x/"]), min_size=0, max_size=6))
def test_the_driver_and_the_spark_job_find_the_same_facts(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, world: World, prefixes: list[str | None]
) -> None:
    # Some segments record a prefix (others may record a key already, as the world drew them).
    drawn = [replace(s, object_prefix=p) if p else s for s, p in zip(world.segments, prefixes, strict=False)]
    segments = drawn + world.segments[len(drawn) :]
    export_dir = replace(world, segments=segments).write_export(tmp_path_factory.mktemp("facts"))
    on_driver, by_spark = _both(spark, export_dir)
    assert on_driver == by_spark
    assert on_driver.count == len(world.segments)
    recorded = {s.object_prefix for s in segments if s.object_prefix is not None}
    assert set(on_driver.recorded_prefixes) == recorded


def test_an_export_written_before_the_location_columns_has_no_recorded_locations(spark: Any, tmp_path: Path) -> None:
    topic = TopicMeta("AAAAAAAAAAAAAAAAAAAAAA", "orders", "ENABLED", 1, "NONE", -1, -1, False)
    segment = SegmentMeta(
        topic.topic_id, "orders", 0, "BBBBBBBBBBBBBBBBBBBBBB", 0, 9, 10, 1, "COPY_SEGMENT_FINISHED", 0, 0
    )
    export_dir = World(topics=[topic], segments=[segment], epochs=[], objects=[]).write_export(tmp_path)
    path = export_dir / export_format.SEGMENTS_FILE
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(list(export_format.ADDED_SEGMENT_COLUMNS)), path)
    on_driver, by_spark = _both(spark, export_dir)
    assert on_driver == by_spark
    assert (on_driver.count, on_driver.any_recorded, on_driver.recorded_prefixes) == (1, False, ())


@pytest.mark.parametrize("driver_max", [ON_DRIVER, BY_SPARK], ids=["on-driver", "by-spark"])
def test_a_segment_listed_twice_is_refused_by_either_naming_it(spark: Any, tmp_path: Path, driver_max: int) -> None:
    topic = TopicMeta("AAAAAAAAAAAAAAAAAAAAAA", "orders", "ENABLED", 1, "NONE", -1, -1, False)
    segment = SegmentMeta(
        topic.topic_id, "orders", 0, "BBBBBBBBBBBBBBBBBBBBBB", 0, 9, 10, 1, "COPY_SEGMENT_FINISHED", 0, 0
    )
    other = replace(segment, segment_id="CCCCCCCCCCCCCCCCCCCCCC")
    world = World(topics=[topic], segments=[other, segment, segment, segment], epochs=[], objects=[])
    export_dir = world.write_export(tmp_path)
    _, segments, _ = _read_export(spark, export_dir)
    with pytest.raises(ScanError, match=r"a segment more than once \(topic_id=A{22}, segment_id=B{22}, 3 rows\)"):
        _segment_facts(segments, export_dir, driver_max=driver_max)
