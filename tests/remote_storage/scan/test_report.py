"""The scan's report: chart geometry, the self-contained and escaped HTML page, its atomic write, and the
``tieredctl scan report`` command (text and JSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orchestrator.cli import cli
from remote_storage.scan import contract as c
from remote_storage.scan.report import (
    RECLAIMABLE_ORDER,
    chart_geometry,
    human_bytes,
    human_duration_ms,
    read_anomaly_rows,
    topic_labels,
    write_html_report,
)
from remote_storage.scan.summary import ScanOutputError, load_summary

pytestmark = pytest.mark.unit

HOSTILE = "<script>alert('x')</script>"
PLOT_WIDTH = 500.0
LABEL_WIDTH = 200.0


def _categories(**values: int) -> dict[str, int]:
    return {cat: values.get(cat, 0) for cat in sorted(c.RECLAIMABLE)}


def _anomalies(**values: int) -> dict[str, int]:
    return {a: values.get(a, 0) for a in c.ANOMALY_TYPES}


def _topic(name: str | None, tid: str, **kw: Any) -> dict[str, Any]:
    return {
        "topic": name,
        "topic_id": tid,
        "state": kw.get("state", "ENABLED"),
        "policy": kw.get("policy", "NONE"),
        "tiered_epoch": kw.get("epoch", 1),
        "deleted": kw.get("deleted", False),
        "known": kw.get("known", True),
        "objects": kw.get("objects", 3),
        "bytes": kw.get("bytes", 3000),
        "reclaimable_bytes": _categories(**kw.get("reclaimable", {})),
        "reclaimable_objects": _categories(**{k: 1 for k in kw.get("reclaimable", {})}),
        "anomalies": _anomalies(**kw.get("anomalies", {})),
    }


def _summary() -> dict[str, Any]:
    deleted_orders = {"state": "DISABLED", "policy": "DELETE", "epoch": 2, "deleted": True, "bytes": 2_000_000}
    orders_reclaimable = {"deleted_topic": 1_258_291, "past_retention": 4096}
    not_in_metadata = {"known": False, "state": None, "policy": None, "epoch": None, "deleted": None}
    topics = [
        _topic(HOSTILE, "AAAAAAAAAAAAAAAAAAAAAA", reclaimable={"no_rlmm_entry": 1000}, anomalies={"size_mismatch": 2}),
        _topic("orders", "BBBBBBBBBBBBBBBBBBBBBB", **deleted_orders, reclaimable=orders_reclaimable),
        _topic("payments", "CCCCCCCCCCCCCCCCCCCCCC", state="DISABLED", policy="RETAIN"),
        _topic(None, "DDDDDDDDDDDDDDDDDDDDDD", **not_in_metadata, reclaimable={"unknown_topic": 77}),
    ]
    return {
        "format_version": 1,
        "generated_at_ms": 1_700_000_100_000,
        "inventory": {
            "uri": "s3://inventory/kafka-tiered/daily/manifest.json",
            "source_bucket": "kafka-tiered",
            "creation_ms": 1_700_000_000_000,
            "format": "csv",
            "files": 2,
            "rows": 13,
            "malformed_rows": {
                "total": 2,
                "by_reason": {"bad size": 1, "wrong column count": 1},
                "examples": [{"file": "data/a.csv.gz", "reason": "bad size", "raw": '"b","<img src=x>","NaN"'}],
            },
        },
        "export": {"dir": "/var/lib/tieredctl/export"},
        "parameters": {"prefix": "tiered/", "grace_ms": 259_200_000, "now_ms": 1_700_000_000_000, "max_anomalies": 0},
        "totals": {
            "objects": 11,
            "bytes": 2_009_000,
            "outside_prefix_objects": 1,
            "reclaimable_bytes": _categories(
                no_rlmm_entry=1000, deleted_topic=1_258_291, past_retention=4096, unknown_topic=77
            ),
            "reclaimable_objects": _categories(no_rlmm_entry=1, deleted_topic=1, past_retention=1, unknown_topic=1),
            "within_grace_bytes": 512,
            "anomalies": _anomalies(size_mismatch=2),
            "anomalies_total": 2,
        },
        "topics": topics,
        "alert": {"anomalies_total": 2, "threshold": 0, "exceeded": True},
        "files": {"objects": c.OBJECTS_DIR, "anomalies": c.ANOMALIES_DIR, "report": c.REPORT_FILE},
    }


def _anomaly_schema() -> pa.Schema:
    types = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64()}
    return pa.schema([(name, types[kind]) for name, kind in c.ANOMALY_COLUMNS])


def _size_mismatch_row(i: int) -> dict[str, Any]:
    """Anomaly row ``i``: a size mismatch on partition ``i`` of the topic with the hostile name."""
    tid = "AAAAAAAAAAAAAAAAAAAAAA"
    key = f"tiered/{HOSTILE}-{tid}/{i}/x.log"
    where = {"topic": HOSTILE, "topic_id": tid, "partition": i, "segment_id": f"seg-{i}", "key": key}
    return {"type": c.SIZE_MISMATCH, **where, "bytes": 10 + i, "detail": "size 10, rlmm 12"}


def _write_scan(out: Path, summary: dict[str, Any] | None = None, *, anomaly_rows: int = 2) -> Path:
    """A scan's output as Spark leaves it: summary.json and a Parquet directory with part files and _SUCCESS."""
    out.mkdir(parents=True, exist_ok=True)
    (out / c.SUMMARY_FILE).write_text(json.dumps(summary or _summary()))
    parts = out / c.ANOMALIES_DIR
    parts.mkdir()
    rows = [_size_mismatch_row(i) for i in range(anomaly_rows)]
    half = len(rows) // 2
    for n, chunk in enumerate((rows[:half], rows[half:])):
        pq.write_table(pa.Table.from_pylist(chunk, schema=_anomaly_schema()), parts / f"part-{n:05d}.parquet")
    (parts / "_SUCCESS").write_text("")
    (parts / ".part-00000.parquet.crc").write_bytes(b"\x00not parquet")
    return out


# -- numbers -----------------------------------------------------------------------------------------------------


BINARY_SIZES = [
    (0, "0 B"),
    (1023, "1023 B"),
    (1024, "1.0 KiB"),
    (1_258_291, "1.2 MiB"),
    (5 * 1024**4, "5.0 TiB"),
    (1024**2 - 1, "1.0 MiB"),
]


@pytest.mark.parametrize(("n", "text"), BINARY_SIZES)
def test_bytes_are_written_in_binary_units(n: int, text: str) -> None:
    assert human_bytes(n) == text


def test_durations_use_the_largest_whole_unit() -> None:
    assert [human_duration_ms(ms) for ms in (259_200_000, 90_000, 1500, 0)] == ["72h", "90s", "1500ms", "0ms"]


# -- chart geometry ----------------------------------------------------------------------------------------------


def _chart(rows: list[tuple[str, dict[str, int]]], **kw: Any) -> Any:
    return chart_geometry(rows, plot_width=PLOT_WIDTH, label_width=LABEL_WIDTH, **kw)


def test_bar_widths_are_proportional_to_bytes_and_the_largest_spans_the_plot() -> None:
    chart = _chart([("a", {c.DELETED_TOPIC: 100}), ("b", {c.DELETED_TOPIC: 400}), ("c", {c.NO_RLMM_ENTRY: 200})])
    assert [bar.label for bar in chart.bars] == ["b", "c", "a"]  # by reclaimable bytes, descending
    assert [bar.width for bar in chart.bars] == pytest.approx([PLOT_WIDTH, PLOT_WIDTH / 2, PLOT_WIDTH / 4])
    assert all(bar.segments[0].x == LABEL_WIDTH for bar in chart.bars)
    ys = [bar.y for bar in chart.bars]
    assert ys == sorted(ys) and len(set(ys)) == 3  # one row each, top to bottom
    assert [bar.total_label for bar in chart.bars] == ["400 B", "200 B", "100 B"]


def test_stacked_segments_follow_the_category_order_and_add_up_to_the_bar() -> None:
    by_cat = {c.PAST_RETENTION: 300, c.DELETED_TOPIC: 100, c.NO_RLMM_ENTRY: 600, c.LIVE: 10_000}
    (bar,) = _chart([("t", by_cat)]).bars
    assert [s.category for s in bar.segments] == [c.DELETED_TOPIC, c.NO_RLMM_ENTRY, c.PAST_RETENTION]
    assert bar.total_bytes == 1000  # `live` is not a reclaimable category: not drawn, not counted
    assert sum(s.width for s in bar.segments) == pytest.approx(bar.width, abs=0.05)
    for left, right in zip(bar.segments, bar.segments[1:], strict=False):
        assert right.x == pytest.approx(left.x + left.width, abs=0.05)  # contiguous, no overlap
    assert [s.width for s in bar.segments] == pytest.approx([50.0, 300.0, 150.0], abs=0.05)
    assert len({s.colour for s in bar.segments}) == 3
    assert [item.category for item in _chart([("t", by_cat)]).legend] == [
        c.DELETED_TOPIC,
        c.NO_RLMM_ENTRY,
        c.PAST_RETENTION,
    ]


def test_no_reclaimable_bytes_makes_an_empty_chart() -> None:
    assert _chart([]).empty
    chart = _chart([("a", {}), ("b", {c.DELETED_TOPIC: 0, c.LIVE: 5})])
    assert chart.empty and chart.bars == () and chart.legend == () and chart.height == 0


def test_topics_past_the_limit_are_summed_into_an_others_bar() -> None:
    rows = [(f"t{i:02d}", {c.DELETED_TOPIC: 1000 - i, c.RLMM_DELETED: 1}) for i in range(40)]
    chart = _chart(rows, max_bars=30)
    assert len(chart.bars) == 31
    assert [bar.label for bar in chart.bars[:30]] == [f"t{i:02d}" for i in range(30)]
    others = chart.bars[-1]
    assert others.is_others and others.label == "others (10 topics)"
    assert others.total_bytes == sum(1000 - i + 1 for i in range(30, 40))
    assert {s.category: s.bytes for s in others.segments} == {
        c.DELETED_TOPIC: sum(1000 - i for i in range(30, 40)),
        c.RLMM_DELETED: 10,
    }
    # The others bar is the longest here: it sets the scale.
    assert others.width == pytest.approx(PLOT_WIDTH) and chart.bars[0].width < PLOT_WIDTH


def test_max_bars_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_bars"):
        _chart([("a", {c.DELETED_TOPIC: 1})], max_bars=0)


def test_topic_labels_tell_a_recreated_name_apart_and_fall_back_to_the_id() -> None:
    topics = [
        {"topic": "orders", "topic_id": "AAAAAAAAxx"},
        {"topic": "orders", "topic_id": "BBBBBBBBxx"},
        {"topic": "clicks", "topic_id": "CCCC"},
        {"topic": None, "topic_id": "DDDD"},
    ]
    assert topic_labels(topics) == ["orders (AAAAAAAA)", "orders (BBBBBBBB)", "clicks", "DDDD"]


# -- the page ----------------------------------------------------------------------------------------------------


def test_the_report_shows_every_topic_and_the_totals(tmp_path: Path) -> None:
    out = _write_scan(tmp_path / "scan")
    path = write_html_report(out)
    assert path == out / c.REPORT_FILE
    page = path.read_text()
    for name in ("orders", "payments", "DDDDDDDDDDDDDDDDDDDDDD", "not in metadata"):
        assert name in page
    assert "1.2 MiB" in page  # reclaimable total and the orders bar
    assert "72h" in page and "tiered/" in page and "2023-11-14 22:13:20 UTC" in page
    assert "ALERT" in page and "wrong column count" in page
    for cat in RECLAIMABLE_ORDER:
        assert cat in page
    for anomaly in c.ANOMALY_TYPES:
        assert anomaly in page
    svg = re.search(r"<svg.*?</svg>", page, re.S)
    assert svg is not None and svg.group(0).count("<g>") == 3  # orders, the hostile topic, the unknown id
    assert page.count("seg-") == 2  # both anomaly rows, from both part files (_SUCCESS and .crc skipped)


def test_the_report_escapes_names_keys_and_rows_from_the_bucket(tmp_path: Path) -> None:
    page = write_html_report(_write_scan(tmp_path / "scan")).read_text()
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert "&lt;img src=x&gt;" in page


def test_the_report_is_self_contained(tmp_path: Path) -> None:
    page = write_html_report(_write_scan(tmp_path / "scan")).read_text()
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "url(" not in page


def test_only_the_first_anomaly_rows_are_shown(tmp_path: Path) -> None:
    out = _write_scan(tmp_path / "scan", anomaly_rows=7)
    assert len(read_anomaly_rows(out, limit=3) or []) == 3
    page = write_html_report(out, max_anomaly_rows=3).read_text()
    assert page.count("seg-") == 3 and "at most 3 are shown" in page


def test_a_scan_without_anomalies_or_reclaimable_bytes_renders(tmp_path: Path) -> None:
    summary = _summary()
    summary["topics"] = [_topic("quiet", "QQQQQQQQQQQQQQQQQQQQQQ")]
    summary["totals"]["reclaimable_bytes"] = _categories()
    out = tmp_path / "scan"
    out.mkdir()
    (out / c.SUMMARY_FILE).write_text(json.dumps(summary))
    page = write_html_report(out).read_text()
    assert "Nothing reclaimable." in page and "<svg" not in page
    assert "This scan wrote no anomalies file." in page and "quiet" in page


def test_the_write_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    out = _write_scan(tmp_path / "scan")
    (out / c.REPORT_FILE).write_text("the previous report")
    write_html_report(out)
    assert (out / c.REPORT_FILE).read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in out.iterdir()) == [c.ANOMALIES_DIR, c.REPORT_FILE, c.SUMMARY_FILE]


def test_a_missing_or_foreign_summary_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ScanOutputError, match=r"summary\.json.*tieredctl scan run"):
        load_summary(tmp_path)
    (tmp_path / c.SUMMARY_FILE).write_text("{not json")
    with pytest.raises(ScanOutputError, match=r"summary\.json"):
        load_summary(tmp_path)
    (tmp_path / c.SUMMARY_FILE).write_text(json.dumps({"format_version": 99}))
    with pytest.raises(ScanOutputError, match="format_version 99"):
        write_html_report(tmp_path)
    assert not (tmp_path / c.REPORT_FILE).exists()


# -- tieredctl scan report ---------------------------------------------------------------------------------------


def test_scan_report_prints_the_topics_and_the_report_path(tmp_path: Path) -> None:
    out = _write_scan(tmp_path / "scan")
    result = CliRunner().invoke(cli, ["scan", "report", str(out)], env={"COLUMNS": "240"})  # rich reads COLUMNS
    assert result.exit_code == 0, result.output
    for text in ("orders", HOSTILE, "deleted_topic", "size_mismatch", "1.2 MiB", "ALERT (threshold 0)"):
        assert text in result.output
    assert result.output.rstrip().endswith(f"report: {out / c.REPORT_FILE}")
    assert (out / c.REPORT_FILE).is_file()


def test_scan_report_json_prints_the_summary(tmp_path: Path) -> None:
    out = _write_scan(tmp_path / "scan")
    result = CliRunner().invoke(cli, ["--output", "json", "scan", "report", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == _summary()
    assert (out / c.REPORT_FILE).is_file()


def test_scan_report_without_a_summary_exits_1_naming_the_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["scan", "report", str(tmp_path / "nowhere")])
    assert result.exit_code == 1
    assert str(tmp_path / "nowhere" / c.SUMMARY_FILE) in result.output
    assert "tieredctl scan run" in result.output
