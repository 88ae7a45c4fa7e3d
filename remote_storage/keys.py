"""The object key layout of remote log segments, compatible with the most used open-source S3 RSM.

    <prefix><topic>-<topicId>/<partition>/<startOffset: 20 digits>-<segmentId>.<suffix>

``topicId`` and ``segmentId`` are 22-character KIP-516 strings; ``suffix`` is ``log``, ``indexes`` or
``rsm-manifest``. Topic names may contain ``-`` and ``.``, so a key is parsed from the fixed-width right-hand
parts inward: the 22-character topic id after the last ``-`` of the first path element, never by splitting the
name on ``-``. Digits are ASCII only, a partition fits Kafka's int32 and an offset its int64, so that the Spark
scan's fixed-width parser (:mod:`remote_storage.scan.job`) accepts exactly the keys this module accepts.

Invariants: ``parse_key(build_key(k)) == k`` for every valid key; :func:`topic_prefix` is the one prefix under
which a policy may delete for a topic id (ARCHITECTURE §4 invariant 5): two topics with the same name and different
ids have disjoint prefixes, and no topic's prefix is a prefix of another's (it ends with ``/``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from orchestrator.errors import InvalidArgument, InvalidRequest, InvalidTopic, ScanInputError
from orchestrator.ids import Uuid, validate_topic_name

OFFSET_WIDTH = 20
ID_WIDTH = 22


class Suffix(StrEnum):
    LOG = "log"
    INDEXES = "indexes"
    MANIFEST = "rsm-manifest"


SEGMENT_SUFFIXES = (Suffix.LOG, Suffix.INDEXES, Suffix.MANIFEST)
_ID = r"[A-Za-z0-9_-]{22}"
_FILE = re.compile(rf"([0-9]{{{OFFSET_WIDTH}}})-({_ID})\.(log|indexes|rsm-manifest)")
_PARTITION = re.compile(r"0|[1-9][0-9]*")
MAX_PARTITION = 2**31 - 1  # Kafka's partition is an int32
MAX_OFFSET = 2**63 - 1  # and its offsets int64


class KeyParseError(ScanInputError):
    """An object key that does not follow the layout; ``reason`` is a short stable category."""

    name, retriable = "INVALID_OBJECT_KEY", False

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"object key {key!r} does not parse: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True, slots=True, order=True)
class SegmentKey:
    """One remote segment's object set, without its suffix."""

    topic: str
    topic_id: Uuid
    partition: int
    start_offset: int
    segment_id: Uuid


@dataclass(frozen=True, slots=True)
class ObjectKey:
    segment: SegmentKey
    suffix: Suffix


def topic_prefix(prefix: str, topic: str, topic_id: Uuid) -> str:
    """Every object of this topic id, and nothing else, lives under this prefix."""
    return f"{prefix}{topic}-{topic_id}/"


def partition_prefix(prefix: str, topic: str, topic_id: Uuid, partition: int) -> str:
    return f"{topic_prefix(prefix, topic, topic_id)}{partition}/"


def build_key(prefix: str, segment: SegmentKey, suffix: Suffix) -> str:
    if segment.start_offset < 0 or segment.partition < 0:
        raise InvalidArgument(f"negative offset or partition in {segment}")
    return (
        f"{partition_prefix(prefix, segment.topic, segment.topic_id, segment.partition)}"
        f"{segment.start_offset:0{OFFSET_WIDTH}d}-{segment.segment_id}.{suffix.value}"
    )


def segment_keys(prefix: str, segment: SegmentKey) -> dict[Suffix, str]:
    return {s: build_key(prefix, segment, s) for s in SEGMENT_SUFFIXES}


def parse_key(key: str, prefix: str = "") -> ObjectKey:
    """Parse a key written under ``prefix``; raise :class:`KeyParseError` with a reason category otherwise."""
    if not key.startswith(prefix):
        raise KeyParseError(key, "outside the prefix")
    parts = key[len(prefix) :].split("/")
    if len(parts) != 3:
        raise KeyParseError(key, "wrong number of path elements")
    topic_part, partition_part, file_part = parts
    if len(topic_part) < ID_WIDTH + 2 or topic_part[-ID_WIDTH - 1] != "-":
        raise KeyParseError(key, "no topic id")
    topic = topic_part[: -ID_WIDTH - 1]
    try:
        validate_topic_name(topic)
        topic_id = Uuid.from_string(topic_part[-ID_WIDTH:])
    except (InvalidRequest, InvalidTopic) as exc:
        raise KeyParseError(key, "bad topic name or id") from exc
    if not _PARTITION.fullmatch(partition_part) or int(partition_part) > MAX_PARTITION:
        raise KeyParseError(key, "bad partition")
    m = _FILE.fullmatch(file_part)
    if m is None or int(m.group(1)) > MAX_OFFSET:
        raise KeyParseError(key, "bad file name")
    try:
        segment_id = Uuid.from_string(m.group(2))
    except InvalidRequest as exc:
        raise KeyParseError(key, "bad segment id") from exc
    segment = SegmentKey(topic, topic_id, int(partition_part), int(m.group(1)), segment_id)
    return ObjectKey(segment, Suffix(m.group(3)))
