"""The compiled replay loops (``orchestrator/metadata/_replay_c.pyx``) are held to their Python references.

* The page reader (:func:`~orchestrator.metadata.sql.tables.page_entries`) against
  :func:`~orchestrator.metadata.sql.tables.page_entries_py`: for pages of stored rows, well-formed or not (bytes
  overwritten, cut or appended with the checksum made to match or not, a wrong checksum, another frame version, an
  unknown type, a legacy RLMM record, a gap in the offsets, bytes held in another type), the same entries or the
  same error text.
* The fold (:func:`~orchestrator.metadata.image.replay`) against :func:`~orchestrator.metadata.image.replay_py`:
  for runs of records over a few topics (creations, partitions, changes, configs set and removed, tiered states
  with stale epochs and unknown codes, removals, records for unknown topics, offsets out of order), the same image,
  the same maps left as the very objects of the image replayed onto, or the same error text.

``make`` builds the compiled module: a build without it fails the first test here, rather than passing the others
against the references themselves.
"""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from orchestrator.ids import Uuid
from orchestrator.metadata import image as image_module
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, from_snapshot, replay, replay_py
from orchestrator.metadata.records import MetadataRecord, encode_record, make_record
from orchestrator.metadata.sql import tables
from orchestrator.metadata.sql.tables import page_entries, page_entries_py
from orchestrator.metadata.store import checksum

pytestmark = pytest.mark.unit

TOPIC_IDS = [Uuid.random() for _ in range(3)]
NAMES = ["orders", "payments", "audit"]

broker_ids = st.lists(st.integers(0, 5), max_size=3)
# mostly the three known ids (so records meet the topics they name), sometimes one no record created: a replay
# stops at its first refused record, so refusals are kept rare enough for the runs to go on past them
topic_ids = st.sampled_from([*TOPIC_IDS] * 10 + [None]).map(lambda tid: tid or Uuid.random())
codes = st.sampled_from([0, 1, 2, 3] * 10 + [9])


def partition_record(tid: Uuid, pid: int, replicas: list[int], leader: int, epoch: int, elr: list[int] | None) -> Any:
    return make_record(
        "PartitionRecord",
        partition_id=pid,
        topic_id=tid,
        replicas=replicas,
        isr=replicas[:2],
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=epoch,
        eligible_leader_replicas=elr,
    )


topic_records = st.builds(
    lambda i, tid: make_record("TopicRecord", name=NAMES[i], topic_id=tid), st.integers(0, 2), topic_ids
)
partition_records = st.builds(
    partition_record,
    topic_ids,
    st.integers(0, 3),
    broker_ids,
    st.integers(-1, 5),
    st.integers(0, 3),
    st.none() | broker_ids,
)
change_records = st.builds(
    lambda tid, pid, leader, isr: make_record(
        "PartitionChangeRecord", partition_id=pid, topic_id=tid, leader=leader, isr=isr
    ),
    topic_ids,
    st.integers(0, 3),
    st.integers(-2, 5),
    st.none() | broker_ids,
)
config_records = st.builds(
    lambda rtype, i, name, value: make_record(
        "ConfigRecord", resource_type=rtype, resource_name=NAMES[i], name=name, value=value
    ),
    st.sampled_from([2, 4]),
    st.integers(0, 2),
    st.sampled_from(["retention.ms", "remote.storage.enable"]),
    st.none() | st.sampled_from(["1", "true", "604800000"]),
)
tiered_records = st.builds(
    lambda tid, epoch, state, policy: make_record(
        "TieredStateRecord", topic_id=tid, tiered_epoch=epoch, tiered_state=state, policy=policy
    ),
    topic_ids,
    st.integers(0, 4),
    codes,
    codes,
)
other_records = st.builds(lambda bid: make_record("FenceBrokerRecord", id=bid, epoch=10), st.integers(0, 2))
removals = st.builds(lambda tid: make_record("RemoveTopicRecord", topic_id=tid), topic_ids)
# weighted by repetition: removals (after which records naming the topic are refused) are rarer
records = st.one_of(
    topic_records,
    *[partition_records] * 3,
    *[change_records] * 2,
    *[config_records] * 2,
    *[tiered_records] * 3,
    other_records,
    removals,
)

IMAGE_MAPS = tuple(f.name for f in dataclasses.fields(MetadataImage) if f.name != "offset")


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return ("value", fn(*args, **kwargs))
    except Exception as exc:  # the outcome compared: the error's type and text
        return ("error", type(exc).__name__, str(exc))


def _same_maps(base: MetadataImage, image: MetadataImage) -> list[str]:
    """Which of the image's maps are the very objects of the image it was replayed onto."""
    return [name for name in IMAGE_MAPS if getattr(image, name) is getattr(base, name)]


def test_the_compiled_loops_are_built() -> None:
    assert image_module.COMPILED, "orchestrator/metadata/_replay_c.pyx is not built: run make"
    assert tables.COMPILED, "orchestrator/metadata/_replay_c.pyx is not built: run make"


@settings(max_examples=300, deadline=None)
@given(
    base=st.lists(records, max_size=12),
    batch=st.lists(records, max_size=30),
    swaps=st.lists(st.integers(0, 29), max_size=2),
)
def test_fold_matches_the_reference(base: list[MetadataRecord], batch: list[MetadataRecord], swaps: list[int]) -> None:
    created = [
        r
        for name, tid in zip(NAMES, TOPIC_IDS, strict=True)
        for r in [make_record("TopicRecord", name=name, topic_id=tid)]
        + [partition_record(tid, p, [1, 2], 1, 0, None) for p in range(4)]
    ]
    start = _outcome(replay_py, EMPTY_IMAGE, list(enumerate(created + base)))
    start_image = start[1] if start[0] == "value" else EMPTY_IMAGE
    offsets = list(range(start_image.offset + 1, start_image.offset + 1 + len(batch)))
    for i in swaps:  # an offset out of order
        if 0 < i < len(offsets):
            offsets[i] = offsets[i - 1]
    entries = list(zip(offsets, batch, strict=True))
    compiled = _outcome(replay, start_image, iter(entries))
    reference = _outcome(replay_py, start_image, iter(entries))
    assert compiled == reference
    if compiled[0] == "value":
        assert _same_maps(start_image, compiled[1]) == _same_maps(start_image, reference[1])


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(records, max_size=30))
def test_a_snapshot_of_a_replayed_image_loads_back_to_it(batch: list[MetadataRecord]) -> None:
    # A log the controller can write: each topic id created once (KIP-516), and never two topics of one name. (The
    # image of a log that breaks either rule keeps a name its snapshot does not: not a log this test is about.)
    created = [r for r in batch if r.name == "TopicRecord"]
    assume(len({r["topic_id"] for r in created}) == len({r["name"] for r in created}) == len(created))
    outcome = _outcome(replay_py, EMPTY_IMAGE, list(enumerate(batch)))
    if outcome[0] == "value":
        image = outcome[1]
        assert from_snapshot(image.offset, image.to_records()) == image


def test_fold_of_a_cluster_matches_the_reference() -> None:
    """Many topics and partitions (the compiled fold's remembered topic), then a second batch onto the result."""
    recs: list[MetadataRecord] = []
    for t in range(20):
        tid = Uuid.random()
        recs.append(make_record("TopicRecord", name=f"t{t}", topic_id=tid))
        recs += [partition_record(tid, p, [p % 3, (p + 1) % 3], p % 3, 0, None) for p in range(6)]
        recs.append(make_record("TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=1, policy=0))
        if t % 3 == 0:
            recs += [partition_record(tid, 2, [4, 5], 4, 1, [5])]  # a partition of an earlier topic again
    first = list(enumerate(recs))
    assert replay(EMPTY_IMAGE, first) == replay_py(EMPTY_IMAGE, first)
    image = replay(EMPTY_IMAGE, first)
    tid = next(iter(image.topics))
    more = list(enumerate([partition_record(tid, 9, [1], 1, 0, None)], image.offset + 1))
    assert replay(image, more) == replay_py(image, more)
    assert _same_maps(image, replay(image, more)) == _same_maps(image, replay_py(image, more))


def test_fold_refuses_what_the_reference_refuses() -> None:
    tid = Uuid.random()
    topic = make_record("TopicRecord", name="t", topic_id=tid)

    def tiered(epoch: int, state: int = 1, policy: int = 0) -> MetadataRecord:
        return make_record("TieredStateRecord", topic_id=tid, tiered_epoch=epoch, tiered_state=state, policy=policy)

    for batch in (
        [topic, tiered(3), tiered(2)],  # a stale tiered epoch
        [topic, tiered(1, state=9)],  # an unknown state
        [topic, tiered(1, policy=9)],  # an unknown policy
        [tiered(1)],  # an unknown topic
        [partition_record(tid, 0, [1], 1, 0, None)],
    ):
        compiled = _outcome(replay, EMPTY_IMAGE, list(enumerate(batch)))
        assert compiled[0] == "error"
        assert compiled == _outcome(replay_py, EMPTY_IMAGE, list(enumerate(batch)))


def test_a_partition_of_ints_is_left_to_reference_counting() -> None:
    tid = Uuid.random()
    topic = make_record("TopicRecord", name="t", topic_id=tid)
    ints = partition_record(tid, 0, [1, 2], 1, 0, [3])
    image = replay(EMPTY_IMAGE, [(0, topic), (1, ints)])
    p = image.topics[tid].partitions[0]
    assert not gc.is_tracked(p) and not gc.is_tracked(p.replicas) and not gc.is_tracked(p.elr)
    odd = MetadataRecord(ints.name, ints.version, {**ints.fields, "partition_id": 1, "replicas": [1, [2]]})
    image = replay(EMPTY_IMAGE, [(0, topic), (1, odd)])
    assert gc.is_tracked(image.topics[tid].partitions[1])  # a list inside: it stays the collector's to see


# --- the page reader -------------------------------------------------------------------------------------------


def _row(offset: int, record: MetadataRecord) -> tuple[int, int, bytes, int]:
    data = encode_record(record)
    return (offset, 7, data, checksum(data))


def _damage(row: tuple[int, int, bytes, int], how: str, at: int, byte: int) -> tuple[Any, ...]:
    offset, epoch, data, crc = row
    at %= max(len(data), 1)
    if how == "overwrite":
        data = data[:at] + bytes([byte]) + data[at + 1 :]
    elif how == "cut":
        data = data[:at]
    elif how == "append":
        data = data + bytes([byte])
    elif how == "frame":
        data = bytes([byte]) + data[1:]
    elif how == "bytearray":
        return (offset, epoch, bytearray(data), crc)
    elif how == "crc":
        return (offset, epoch, data, crc ^ (byte + 1))
    elif how == "gap":
        return (offset + 1 + byte % 3, epoch, data, crc)
    return (offset, epoch, data, checksum(data))


damages = st.tuples(
    st.sampled_from(["overwrite", "cut", "append", "frame", "bytearray", "crc", "gap"]),
    st.integers(0, 200),
    st.integers(0, 255),
    st.booleans(),  # whether the checksum is made to match afterwards (else the stored one is kept)
)


@settings(max_examples=300, deadline=None)
@given(
    batch=st.lists(records, min_size=1, max_size=20),
    damaged=st.lists(st.tuples(st.integers(0, 19), damages), max_size=3),
    expected=st.integers(0, 3),
)
def test_page_reader_matches_the_reference(
    batch: list[MetadataRecord], damaged: list[tuple[int, tuple[str, int, int, bool]]], expected: int
) -> None:
    rows: list[tuple[Any, ...]] = [_row(expected + i, r) for i, r in enumerate(batch)]
    for i, (how, at, byte, rechecked) in damaged:
        if i < len(rows):
            row = _damage(rows[i], how, at, byte)  # type: ignore[arg-type]
            if how in ("overwrite", "cut", "append", "frame") and not rechecked:
                row = (*row[:3], rows[i][3])
            rows[i] = row
    compiled = _outcome(page_entries, rows, expected, store="test")
    reference = _outcome(page_entries_py, rows, expected, store="test")
    assert compiled == reference


def test_page_reader_reads_multi_byte_frame_headers_and_unknown_types_as_the_reference() -> None:
    tid = Uuid.random()
    tiered = make_record("TieredStateRecord", topic_id=tid, tiered_epoch=1, tiered_state=1, policy=0)
    data = encode_record(tiered)
    assert data[1] >= 0x80, "TieredStateRecord's type takes two bytes: the case under test"
    rows = [_row(0, tiered), _row(1, make_record("TopicRecord", name="t", topic_id=tid))]
    assert page_entries(rows, 0, store="test") == page_entries_py(rows, 0, store="test")
    unknown = bytes([1, 0x7F, 0]) + data[3:]
    bad = [(0, 7, unknown, checksum(unknown))]
    assert _outcome(page_entries, bad, 0, store="test") == _outcome(page_entries_py, bad, 0, store="test")
    assert _outcome(page_entries, bad, 0, store="test")[0] == "error"
