"""``summary.json``: per-topic reclaimable bytes by category and anomaly counts by type, and the alert decision.

:func:`build_summary` is pure: it turns the aggregates the Spark job collected into the document below, so the
format is tested without Spark. :func:`write_summary` writes it atomically (temporary file, then rename).

Format (every key always present; every category of ``contract.RECLAIMABLE`` and every type of
``contract.ANOMALY_TYPES`` appears in each map, 0 when none)::

    {"format_version": 1, "generated_at_ms": int,
     "inventory": {"uri", "source_bucket", "creation_ms", "format", "files", "rows",
                   "malformed_rows": {"total", "by_reason": {reason: n}, "examples": [{"file", "reason", "raw"}]}},
     "export": {"dir", "source": {"source", "bootstrap_servers", "rlmm_topic", "records"}},  # source.json's
     "parameters": {"prefix", "grace_ms", "now_ms", "max_anomalies", "max_manifest_reads",
                    "object_prefixes"},                # prefixes segments record besides "prefix" (custom metadata)
     "totals": {"objects", "bytes", "outside_prefix_objects", "reclaimable_bytes": {category: n},
                "reclaimable_objects": {category: n}, "within_grace_bytes", "anomalies": {type: n}, "anomalies_total",
                "information": {type: n}},                       # contract.INFORMATION_TYPES: not anomalies
     "topics": [{"topic", "topic_id", "state", "policy", "tiered_epoch", "deleted", "known", "objects", "bytes",
                 "reclaimable_bytes", "reclaimable_objects", "anomalies", "information"}],  # by name, then id
     "alert": {"anomalies_total", "threshold", "exceeded"},
     "manifests": {"read", "cap", "needed", "by_kind": {kind: n}, "file"},   # the size rule's manifest reads
     "multipart_uploads": {"listed", "count", "bytes", "file"},   # incomplete uploads (scan.uploads), apart
     "files": {"objects", "anomalies", "report"}}

``manifests.read`` is false when the scan had no access to the bucket (or a cap of 0): then no manifest was read
and ``needed`` is 0; otherwise ``needed`` is the number of manifests the executors read (one GET each), and
``by_kind`` counts what they said (:data:`remote_storage.scan.manifest_reading.KINDS`).

Invariants: ``totals.objects`` plus ``inventory.malformed_rows.total`` is ``inventory.rows`` (every row counted
once); malformed inventory rows count as anomalies (``malformed_inventory_row``), so a broken inventory alerts;
the alert fires when ``anomalies_total`` is greater than the threshold.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from orchestrator.errors import ScanInputError
from remote_storage.export_format import ExportSource
from remote_storage.scan import contract as c
from remote_storage.scan.job import ScanAggregates, ScanSettings
from remote_storage.scan.sources import InventorySource
from remote_storage.scan.uploads import UploadsListing

FORMAT_VERSION = 1


def _zeros(names: tuple[str, ...] | frozenset[str]) -> dict[str, int]:
    return {n: 0 for n in sorted(names)}


def summarise_totals(
    objects: list[dict[str, Any]],
    anomalies_by_topic: list[dict[str, Any]],
    malformed_by_reason: dict[str, int],
) -> dict[str, Any]:
    """The summary's ``totals`` from object counts by category and reclaimable (grouped further, by topic id for
    instance, or not) and anomaly counts by type (and topic id)."""
    totals: dict[str, Any] = {
        "objects": 0,
        "bytes": 0,
        "outside_prefix_objects": 0,
        "reclaimable_bytes": _zeros(c.RECLAIMABLE),
        "reclaimable_objects": _zeros(c.RECLAIMABLE),
        "within_grace_bytes": 0,
        "anomalies": _zeros(c.ANOMALY_TYPES),
        "anomalies_total": 0,
        "information": _zeros(c.INFORMATION_TYPES),
    }
    for r in objects:
        totals["objects"] += r["objects"]
        totals["bytes"] += r["bytes"]
        if r["category"] == c.OUTSIDE_PREFIX:
            totals["outside_prefix_objects"] += r["objects"]
        if r["category"] in c.RECLAIMABLE:
            if r["reclaimable"]:
                totals["reclaimable_bytes"][r["category"]] += r["bytes"]
                totals["reclaimable_objects"][r["category"]] += r["objects"]
            else:
                totals["within_grace_bytes"] += r["bytes"]
    for r in anomalies_by_topic:
        kind = "information" if r["type"] in c.INFORMATION_TYPES else "anomalies"
        totals[kind][r["type"]] += r["count"]
    totals["anomalies"][c.MALFORMED_INVENTORY_ROW] = sum(malformed_by_reason.values())
    totals["anomalies_total"] = sum(totals["anomalies"].values())
    return totals


def build_summary(
    agg: ScanAggregates,
    *,
    source: InventorySource,
    export_dir: Path,
    settings: ScanSettings,
    generated_at_ms: int,
    metadata_source: ExportSource | None = None,
    uploads: UploadsListing | None = None,
) -> dict[str, Any]:
    totals = summarise_totals(agg.objects, agg.anomalies_by_topic, agg.malformed_by_reason)

    meta = {t["topic_id"]: t for t in agg.topics}
    topics: dict[str, dict[str, Any]] = {}

    def topic(topic_id: str, key_name: str | None = None) -> dict[str, Any]:
        if topic_id not in topics:
            t = meta.get(topic_id)
            topics[topic_id] = {
                "topic": t["name"] if t else key_name,  # an unknown id's name is the one its keys carry
                "topic_id": topic_id,
                "state": t["state"] if t else None,
                "policy": t["policy"] if t else None,
                "tiered_epoch": t["tiered_epoch"] if t else None,
                "deleted": t["deleted"] if t else None,
                "known": t is not None,
                "objects": 0,
                "bytes": 0,
                "reclaimable_bytes": _zeros(c.RECLAIMABLE),
                "reclaimable_objects": _zeros(c.RECLAIMABLE),
                "anomalies": _zeros(c.ANOMALY_TYPES),
                "information": _zeros(c.INFORMATION_TYPES),
            }
        return topics[topic_id]

    for r in agg.objects:
        if r["topic_id"] is None:
            continue
        entry = topic(r["topic_id"], r.get("topic"))
        entry["objects"] += r["objects"]
        entry["bytes"] += r["bytes"]
        if r["reclaimable"] and r["category"] in c.RECLAIMABLE:
            entry["reclaimable_bytes"][r["category"]] += r["bytes"]
            entry["reclaimable_objects"][r["category"]] += r["objects"]
    for r in agg.anomalies_by_topic:
        if r["topic_id"] is not None:
            kind = "information" if r["type"] in c.INFORMATION_TYPES else "anomalies"
            topic(r["topic_id"])[kind][r["type"]] += r["count"]
    malformed_total = totals["anomalies"][c.MALFORMED_INVENTORY_ROW]
    return {
        "format_version": FORMAT_VERSION,
        "generated_at_ms": generated_at_ms,
        "inventory": {
            "uri": source.uri,
            "source_bucket": source.source_bucket,
            "creation_ms": source.creation_ms,
            "format": source.file_format,
            "files": len(source.files),
            "rows": agg.rows,
            "malformed_rows": {
                "total": malformed_total,
                "by_reason": dict(sorted(agg.malformed_by_reason.items())),
                "examples": agg.malformed_examples,
            },
        },
        "export": {"dir": str(export_dir), "source": dataclasses.asdict(metadata_source or ExportSource())},
        "parameters": {
            "prefix": settings.prefix,
            "grace_ms": settings.grace_ms,
            "now_ms": source.creation_ms,
            "max_anomalies": settings.max_anomalies,
            "max_manifest_reads": settings.max_manifest_reads,
            "object_prefixes": list(agg.object_prefixes),
        },
        "totals": totals,
        "topics": sorted(topics.values(), key=lambda t: (t["topic"] or "", t["topic_id"])),
        "alert": {
            "anomalies_total": totals["anomalies_total"],
            "threshold": settings.max_anomalies,
            "exceeded": totals["anomalies_total"] > settings.max_anomalies,
        },
        "manifests": agg.manifests.as_json(),
        "multipart_uploads": {
            "listed": uploads is not None,
            "count": 0 if uploads is None else len(uploads.uploads),
            "bytes": 0 if uploads is None else uploads.bytes,
            "file": None if uploads is None else c.UPLOADS_FILE,
        },
        "files": {"objects": c.OBJECTS_DIR, "anomalies": c.ANOMALIES_DIR, "report": c.REPORT_FILE},
    }


def write_summary(summary: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / c.SUMMARY_FILE
    tmp = path.with_name(f".{c.SUMMARY_FILE}.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


REQUIRED_KEYS = ("inventory", "parameters", "totals", "topics", "alert")


class ScanOutputError(ScanInputError):
    """A scan's output directory cannot be used (no summary, an unreadable one, a missing output); names the file."""

    name, retriable = "INVALID_SCAN_OUTPUT", False


def load_summary(out_dir: Path) -> dict[str, Any]:
    """``out_dir``/summary.json, checked to be a complete summary of this version, or :class:`ScanOutputError`."""
    path = Path(out_dir) / c.SUMMARY_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScanOutputError(f"no scan summary at {path}: run `tieredctl scan run --out {out_dir}` first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScanOutputError(
            f"cannot read the scan summary {path} ({exc}): run `tieredctl scan run --out {out_dir}` again"
        ) from exc
    if not isinstance(doc, dict):
        raise ScanOutputError(f"{path} is not a scan summary (a JSON object is expected)")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ScanOutputError(
            f"{path} has format_version {doc.get('format_version')!r}; this tieredctl reads {FORMAT_VERSION}"
        )
    missing = [key for key in REQUIRED_KEYS if key not in doc]
    if missing:
        raise ScanOutputError(f"{path} is not a complete scan summary: missing {', '.join(missing)}")
    return doc
