"""A partition directory's small files beside its segments: ``partition.metadata`` (KIP-516: the topic id the
directory belongs to) and ``offsets.checkpoint`` (the log start and local log start offsets, JSON). Pure formats
and their one writer each; :mod:`orchestrator.broker.local_log` keeps them, :mod:`orchestrator.broker.log_recovery`
writes them for a rebuilt directory.

Invariants: ``partition.metadata`` is written once, atomically (written aside, renamed), and a directory whose file
names another topic id is refused with :class:`InconsistentTopicId` (it is stale, never served); a file that does
not follow the format reads as no topic id.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.errors import InconsistentTopicId
from orchestrator.ids import Uuid

OFFSETS_CHECKPOINT = "offsets.checkpoint"  # the start offsets, JSON


def offsets_checkpoint(log_start_offset: int, local_log_start_offset: int) -> bytes:
    """The contents of :data:`OFFSETS_CHECKPOINT` for these start offsets."""
    return json.dumps({"log_start_offset": log_start_offset, "local_log_start_offset": local_log_start_offset}).encode()


def check_partition_metadata(directory: Path, topic_id: Uuid) -> None:
    """Write ``partition.metadata`` on first use; refuse a directory that belongs to another topic id."""
    path = directory / "partition.metadata"
    if not path.exists():
        tmp = directory / "partition.metadata.tmp"
        tmp.write_text(f"version: 0\ntopic_id: {topic_id}\n")
        tmp.replace(path)
        return
    found = read_partition_metadata(path)
    if found != topic_id:
        raise InconsistentTopicId(f"{directory} belongs to topic id {found}, not {topic_id}: it is stale")


def read_partition_metadata(path: Path) -> Uuid | None:
    fields = dict(line.split(": ", 1) for line in path.read_text().splitlines() if ": " in line)
    if fields.get("version") != "0" or "topic_id" not in fields:
        return None
    return Uuid.from_string(fields["topic_id"].strip())
