"""The human side of a scan: ``report.html`` (one self-contained page) and the CLI's text tables.

The page is rendered from ``summary.json`` and the first rows of ``anomalies.parquet`` of a scan's output
directory (:mod:`.contract` names both), so ``tieredctl scan report DIR`` can re-render it at any time without
Spark. Invariants:

* **Self-contained.** No script, no external stylesheet, font or image: inline CSS and an inline SVG chart, so the
  page works offline, attached to a ticket or opened from an object store.
* **Escaped input.** Topic names, keys and inventory rows come from the bucket, which anyone with write access
  can fill with markup. The template is rendered with autoescaping on (and strict undefined variables), and
  nothing is ever marked safe.
* **Atomic write.** The page is written to a temporary file in the same directory and moved over ``report.html``
  with :func:`os.replace`: a reader sees the old page or the new one, never half of one.
* **Geometry in Python.** The chart's rectangles are computed by the pure :func:`chart_geometry`; the template
  only draws what it is given.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import jinja2
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from remote_storage.scan import contract as c
from remote_storage.scan.summary import ScanOutputError, load_summary

DEFAULT_MAX_ANOMALY_ROWS: Final = 200
DEFAULT_MAX_BARS: Final = 30

# The reclaimable categories in the contract's (decision) order: columns, legend and stacking order.
RECLAIMABLE_ORDER: Final = tuple(cat for cat in c.CATEGORIES if cat in c.RECLAIMABLE)

# One colour per reclaimable category (the Okabe-Ito palette: distinguishable with the common colour blindnesses).
CATEGORY_COLOURS: Final[Mapping[str, str]] = {
    c.UNKNOWN_TOPIC: "#CC79A7",
    c.DELETED_TOPIC: "#D55E00",
    c.DISABLED_DELETE: "#E69F00",
    c.NO_RLMM_ENTRY: "#0072B2",
    c.RLMM_DELETED: "#56B4E9",
    c.COPY_UNFINISHED: "#F0E442",
    c.PAST_RETENTION: "#009E73",
}
_FALLBACK_COLOUR: Final = "#999999"

# -- numbers people read -----------------------------------------------------------------------------------------


def human_bytes(n: int) -> str:
    """``1258291`` -> ``"1.2 MiB"`` (binary units, one decimal; plain bytes below 1 KiB)."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if round(value, 1) < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} EiB"


def human_duration_ms(ms: int) -> str:
    """The largest whole unit: ``259200000`` -> ``"72h"``, ``90000`` -> ``"90s"``."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def utc_time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "unknown"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- the chart ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """One category's part of a bar."""

    category: str
    bytes: int
    x: float
    y: float
    width: float
    height: float
    colour: str


@dataclass(frozen=True, slots=True)
class Bar:
    """One topic (or the "others" bar): its label on the left, stacked segments, its total on the right."""

    label: str
    total_bytes: int
    total_label: str
    y: float
    height: float
    text_y: float  # the baseline that centres the label and the total on the bar
    width: float
    value_x: float  # where the total is written, just right of the bar
    segments: tuple[Segment, ...]
    is_others: bool = False


@dataclass(frozen=True, slots=True)
class LegendItem:
    category: str
    colour: str
    x: float
    y: float
    text_x: float
    text_y: float
    size: float


@dataclass(frozen=True, slots=True)
class Chart:
    width: float
    height: float
    label_x: float  # labels are right-aligned here
    plot_x: float
    bars: tuple[Bar, ...]
    legend: tuple[LegendItem, ...]

    @property
    def empty(self) -> bool:
        return not self.bars


def chart_geometry(
    rows: Sequence[tuple[str, Mapping[str, int]]],
    *,
    categories: Sequence[str] = RECLAIMABLE_ORDER,
    max_bars: int = DEFAULT_MAX_BARS,
    plot_width: float = 560.0,
    label_width: float = 230.0,
    value_width: float = 90.0,
    bar_height: float = 18.0,
    bar_gap: float = 6.0,
    legend_row_height: float = 20.0,
    char_width: float = 7.0,
) -> Chart:
    """Horizontal stacked bars of reclaimable bytes, one per (label, bytes by category) row with a nonzero total.

    Bars are sorted by total descending (then label); past ``max_bars`` the rest are summed into one "others (N
    topics)" bar. Widths are proportional to bytes, the longest bar spanning ``plot_width``; a bar's segments
    follow ``categories`` and add up to the bar. The legend lists the categories that appear, wrapped to the
    chart's width. Pure: no I/O, every position is a number the template copies.
    """
    if max_bars < 1:
        raise ValueError(f"max_bars must be positive, got {max_bars}")
    totals = [(label, {cat: int(by_cat.get(cat, 0)) for cat in categories}) for label, by_cat in rows]
    nonzero = [(label, by_cat) for label, by_cat in totals if sum(by_cat.values()) > 0]
    nonzero.sort(key=lambda row: (-sum(row[1].values()), row[0]))
    shown: list[tuple[str, dict[str, int], bool]] = [(label, by_cat, False) for label, by_cat in nonzero[:max_bars]]
    rest = nonzero[max_bars:]
    if rest:
        others = {cat: sum(by_cat[cat] for _, by_cat in rest) for cat in categories}
        shown.append((f"others ({len(rest)} topics)", others, True))
    width = label_width + plot_width + value_width
    if not shown:
        return Chart(width=width, height=0.0, label_x=label_width - 8, plot_x=label_width, bars=(), legend=())

    present = [cat for cat in categories if any(by_cat[cat] for _, by_cat, _ in shown)]
    legend: list[LegendItem] = []
    x, y = 0.0, 4.0
    for cat in present:
        item_width = 14 + 6 + char_width * len(cat) + 18
        if x > 0 and x + item_width > width:
            x, y = 0.0, y + legend_row_height
        legend.append(LegendItem(cat, CATEGORY_COLOURS.get(cat, _FALLBACK_COLOUR), x, y, x + 20, y + 11, size=12.0))
        x += item_width
    top = y + legend_row_height + 8

    scale = max(sum(by_cat.values()) for _, by_cat, _ in shown)
    bars: list[Bar] = []
    for i, (label, by_cat, is_others) in enumerate(shown):
        bar_y = round(top + i * (bar_height + bar_gap), 2)
        total = sum(by_cat.values())
        seg_x = label_width
        segments: list[Segment] = []
        for cat in categories:
            if not by_cat[cat]:
                continue
            seg_width = by_cat[cat] / scale * plot_width
            colour = CATEGORY_COLOURS.get(cat, _FALLBACK_COLOUR)
            segments.append(Segment(cat, by_cat[cat], round(seg_x, 2), bar_y, round(seg_width, 2), bar_height, colour))
            seg_x += seg_width
        bar_width = total / scale * plot_width
        bars.append(
            Bar(
                label=label,
                total_bytes=total,
                total_label=human_bytes(total),
                y=bar_y,
                height=bar_height,
                text_y=round(bar_y + bar_height * 0.7, 2),
                width=round(bar_width, 2),
                value_x=round(label_width + bar_width + 6, 2),
                segments=tuple(segments),
                is_others=is_others,
            )
        )
    height = top + len(bars) * (bar_height + bar_gap)
    return Chart(width, height, label_width - 8, label_width, tuple(bars), tuple(legend))


def _short_label(label: str, limit: int = 32) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def topic_labels(topics: Sequence[Mapping[str, Any]]) -> list[str]:
    """A readable label per topic: its name, with the id's first characters when two ids share a name
    (a topic re-created under the same name is a new id, KIP-516), or the id when the name is unknown."""
    names = [t.get("topic") for t in topics]
    seen = Counter(names)
    labels = []
    for t, name in zip(topics, names, strict=True):
        tid = str(t.get("topic_id") or "?")
        if not name:
            labels.append(tid)
        elif seen[name] > 1:
            labels.append(f"{name} ({tid[:8]})")
        else:
            labels.append(str(name))
    return labels


# -- reading a scan's output -------------------------------------------------------------------------------------


def read_anomaly_rows(out_dir: Path, *, limit: int) -> list[dict[str, Any]] | None:
    """The first ``limit`` rows of ``out_dir``/anomalies.parquet (None when the scan wrote no such directory).

    pyarrow's dataset discovery skips Spark's ``_SUCCESS`` and dot files; only ``limit`` rows are materialised.
    """
    path = Path(out_dir) / c.ANOMALIES_DIR
    if not path.exists():
        return None
    import pyarrow.dataset as ds  # type: ignore[import-untyped]

    try:
        table = ds.dataset(str(path), format="parquet").head(max(limit, 0))
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise ScanOutputError(f"cannot read the anomalies of the scan at {path}: {exc}") from exc
    columns = [name for name, _ in c.ANOMALY_COLUMNS]
    rows: list[dict[str, Any]] = table.to_pylist()
    return [{col: row.get(col) for col in columns} for row in rows]


# -- the page ----------------------------------------------------------------------------------------------------


def _environment() -> jinja2.Environment:
    # PackageLoader also reads templates from a zip on sys.path (spark-submit --py-files).
    return jinja2.Environment(
        loader=jinja2.PackageLoader("remote_storage.scan", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _int_map(values: Mapping[str, Any] | None, keys: Sequence[str]) -> dict[str, int]:
    values = values or {}
    return {key: int(values.get(key) or 0) for key in keys}


def _topic_view(t: Mapping[str, Any], label: str) -> dict[str, Any]:
    reclaimable = _int_map(t.get("reclaimable_bytes"), RECLAIMABLE_ORDER)
    anomalies = _int_map(t.get("anomalies"), c.ANOMALY_TYPES)
    epoch = t.get("tiered_epoch")
    deleted = t.get("deleted")
    return {
        "label": label,
        "topic": t.get("topic") or "",
        "topic_id": t.get("topic_id") or "",
        "known": bool(t.get("known", True)),
        "state": t.get("state") or "-",
        "policy": t.get("policy") or "-",
        "epoch": "-" if epoch is None else str(epoch),
        "deleted": "-" if deleted is None else ("yes" if deleted else "no"),
        "objects": int(t.get("objects") or 0),
        "bytes": int(t.get("bytes") or 0),
        "reclaimable": reclaimable,
        "reclaimable_total": sum(reclaimable.values()),
        "reclaimable_objects": _int_map(t.get("reclaimable_objects"), RECLAIMABLE_ORDER),
        "anomalies": anomalies,
        "anomalies_total": sum(anomalies.values()),
    }


def report_context(
    summary: Mapping[str, Any], anomaly_rows: list[dict[str, Any]] | None, *, max_anomaly_rows: int
) -> dict[str, Any]:
    """Everything the template shows, as plain values (raises KeyError/TypeError/ValueError on a bad summary)."""
    inventory = summary["inventory"]
    params = summary["parameters"]
    totals = summary["totals"]
    alert = summary["alert"]
    topics: list[Mapping[str, Any]] = list(summary["topics"])
    labels = topic_labels(topics)
    views = [_topic_view(t, label) for t, label in zip(topics, labels, strict=True)]
    chart = chart_geometry([(v["label"], v["reclaimable"]) for v in views])
    reclaimable_bytes = _int_map(totals.get("reclaimable_bytes"), RECLAIMABLE_ORDER)
    reclaimable_objects = _int_map(totals.get("reclaimable_objects"), RECLAIMABLE_ORDER)
    anomalies = _int_map(totals.get("anomalies"), c.ANOMALY_TYPES)
    malformed = inventory.get("malformed_rows") or {}
    total_row = {
        "objects": sum(v["objects"] for v in views),
        "bytes": sum(v["bytes"] for v in views),
        "reclaimable": {cat: sum(v["reclaimable"][cat] for v in views) for cat in RECLAIMABLE_ORDER},
        "anomalies": {a: sum(v["anomalies"][a] for v in views) for a in c.ANOMALY_TYPES},
    }
    return {
        "generated_at": utc_time(summary.get("generated_at_ms")),
        "inventory": {
            "uri": inventory.get("uri") or "",
            "source_bucket": inventory.get("source_bucket") or "",
            "created": utc_time(inventory.get("creation_ms")),
            "format": inventory.get("format") or "",
            "files": int(inventory.get("files") or 0),
            "rows": int(inventory.get("rows") or 0),
        },
        "export_dir": (summary.get("export") or {}).get("dir") or "",
        "prefix": params.get("prefix") or "",
        "grace": human_duration_ms(int(params.get("grace_ms") or 0)),
        "now": utc_time(params.get("now_ms")),
        "objects": int(totals.get("objects") or 0),
        "bytes": int(totals.get("bytes") or 0),
        "outside_prefix_objects": int(totals.get("outside_prefix_objects") or 0),
        "within_grace_bytes": int(totals.get("within_grace_bytes") or 0),
        "categories": [
            {
                "name": cat,
                "colour": CATEGORY_COLOURS.get(cat, _FALLBACK_COLOUR),
                "bytes": reclaimable_bytes[cat],
                "objects": reclaimable_objects[cat],
                "reclaim_deletes": cat in c.RECLAIM_CAN_DELETE,
            }
            for cat in RECLAIMABLE_ORDER
        ],
        "reclaimable_total": sum(reclaimable_bytes.values()),
        "reclaimable_objects_total": sum(reclaimable_objects.values()),
        "anomaly_types": c.ANOMALY_TYPES,
        "anomalies": anomalies,
        "anomalies_total": int(totals.get("anomalies_total") or sum(anomalies.values())),
        "malformed": {
            "total": int(malformed.get("total") or 0),
            "by_reason": sorted((str(k), int(v)) for k, v in (malformed.get("by_reason") or {}).items()),
            "examples": [
                {"file": str(e.get("file", "")), "reason": str(e.get("reason", "")), "raw": str(e.get("raw", ""))}
                for e in malformed.get("examples") or []
            ],
        },
        "alert": {
            "exceeded": bool(alert.get("exceeded")),
            "threshold": int(alert.get("threshold") or 0),
            "anomalies_total": int(alert.get("anomalies_total") or 0),
        },
        "reclaimable_order": RECLAIMABLE_ORDER,
        "chart": chart,
        "topics": views,
        "total_row": total_row,
        "anomaly_columns": [name for name, _ in c.ANOMALY_COLUMNS],
        "anomaly_rows": anomaly_rows,
        "max_anomaly_rows": max_anomaly_rows,
        "human_bytes": human_bytes,
        "short_label": _short_label,
    }


def render_html(summary: Mapping[str, Any], anomaly_rows: list[dict[str, Any]] | None, *, max_anomaly_rows: int) -> str:
    context = report_context(summary, anomaly_rows, max_anomaly_rows=max_anomaly_rows)
    return _environment().get_template("report.html.j2").render(context)


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the report from the people it is for
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_html_report(out_dir: Path, *, max_anomaly_rows: int = DEFAULT_MAX_ANOMALY_ROWS) -> Path:
    """Render ``out_dir``/report.html from the scan's summary.json and first anomalies; return its path."""
    out_dir = Path(out_dir)
    summary = load_summary(out_dir)
    rows = read_anomaly_rows(out_dir, limit=max_anomaly_rows)
    try:
        html = render_html(summary, rows, max_anomaly_rows=max_anomaly_rows)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ScanOutputError(
            f"{out_dir / c.SUMMARY_FILE} is not a scan summary this version can render: {exc!r}"
        ) from exc
    path = out_dir / c.REPORT_FILE
    try:
        _write_atomically(path, html)
    except OSError as exc:
        raise ScanOutputError(f"cannot write the report {path}: {exc}") from exc
    return path


# -- text for the CLI --------------------------------------------------------------------------------------------


def render_text(summary: Mapping[str, Any]) -> RenderableType:
    """Per topic: reclaimable bytes by category and anomaly counts (only the columns that are nonzero somewhere),
    a totals row, and a line with the scan's totals and alert status."""
    topics: list[Mapping[str, Any]] = list(summary["topics"])
    views = [_topic_view(t, label) for t, label in zip(topics, topic_labels(topics), strict=True)]
    totals = summary["totals"]
    reclaimable = _int_map(totals.get("reclaimable_bytes"), RECLAIMABLE_ORDER)
    anomalies = _int_map(totals.get("anomalies"), c.ANOMALY_TYPES)
    cats = [cat for cat in RECLAIMABLE_ORDER if reclaimable[cat] or any(v["reclaimable"][cat] for v in views)]
    types = [a for a in c.ANOMALY_TYPES if anomalies[a] or any(v["anomalies"][a] for v in views)]

    table = Table(title="reclaimable bytes and anomalies per topic", title_justify="left")
    # Long format (a row per topic and category or anomaly type) so that it fits a terminal of 80 columns; fold
    # rather than truncate: a cut topic name or number is worse than a taller table.
    table.add_column("topic", overflow="fold")
    table.add_column("state", overflow="fold")
    table.add_column("reclaimable / anomaly", overflow="fold")
    table.add_column("objects", justify="right", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    for v in views:
        state = v["state"] if v["known"] else "not in metadata"
        first = [Text(v["label"]), "deleted" if v["deleted"] == "yes" else state]  # Text: never parsed as markup
        reclaimable_cats = [cat for cat in cats if v["reclaimable"][cat]]
        rows: list[tuple[str, int, str, str | None]] = [
            (cat, v["reclaimable_objects"][cat], human_bytes(v["reclaimable"][cat]), None) for cat in reclaimable_cats
        ]
        rows += [(a, v["anomalies"][a], "", "red") for a in types if v["anomalies"][a]]
        for i, (what, count, size, style) in enumerate(rows or [("nothing to reclaim", 0, "", "dim")]):
            table.add_row(*(first if i == 0 else ["", ""]), Text(what, style=style or ""), str(count), size)
    table.add_section()
    reclaimable_objects = _int_map(totals.get("reclaimable_objects"), RECLAIMABLE_ORDER)
    total_objects = str(sum(reclaimable_objects.values()))
    total_bytes = human_bytes(sum(reclaimable.values()))
    table.add_row("total", "", "reclaimable", total_objects, total_bytes, style="bold")
    if types:
        table.add_row("", "", Text("anomalies", style="red"), str(sum(anomalies[a] for a in types)), "", style="bold")

    alert = summary["alert"]
    malformed = (summary["inventory"].get("malformed_rows") or {}).get("total") or 0
    within_grace = int(totals.get("within_grace_bytes") or 0)
    line = Text(
        f"{int(totals.get('objects') or 0)} objects, {human_bytes(int(totals.get('bytes') or 0))}; "
        f"reclaimable {human_bytes(sum(reclaimable.values()))} "
        f"(+{human_bytes(within_grace)} not yet past the grace period); "
    )
    line.append(f"{malformed} malformed inventory rows; ")
    total_anomalies = int(totals.get("anomalies_total") or 0)
    if alert.get("exceeded"):
        line.append(
            f"{total_anomalies} anomalies: ALERT (threshold {int(alert.get('threshold') or 0)})", style="bold red"
        )
    else:
        line.append(f"{total_anomalies} anomalies (threshold {int(alert.get('threshold') or 0)}, not exceeded)")
    parts: list[RenderableType] = [table if views else Text("no topics in this scan"), line]
    return Group(*parts)


__all__ = [
    "CATEGORY_COLOURS",
    "RECLAIMABLE_ORDER",
    "Bar",
    "Chart",
    "LegendItem",
    "ScanOutputError",
    "Segment",
    "chart_geometry",
    "human_bytes",
    "human_duration_ms",
    "read_anomaly_rows",
    "render_html",
    "render_text",
    "report_context",
    "topic_labels",
    "write_html_report",
]
