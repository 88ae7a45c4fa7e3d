"""The reclaim planner: each skip reason, batching per topic prefix, the orphan-ratio guards, and a property."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.durations import format_duration, parse_duration
from orchestrator.errors import InvalidArgument
from orchestrator.ids import Uuid
from policies.orphans import Metadata, ObjectVerdict
from policies.reclaim import (
    DELETE_BATCH,
    Candidate,
    CurrentObject,
    ReclaimPlan,
    ScanCounts,
    ScanRow,
    current_verdict,
    live_topic_ids,
    plan_reclaim,
    reclaim_categories,
)
from remote_storage.export_format import SegmentMeta, TopicMeta
from remote_storage.keys import SegmentKey, Suffix, build_key, parse_key, topic_prefix
from remote_storage.scan import contract as c

pytestmark = pytest.mark.unit

PREFIX = "tiered/"
NOW = 1_700_000_000_000
DAY = 86_400_000
OLD = NOW - 10 * DAY  # comfortably past a 3-day grace
_RNG = random.Random(405)
IDS = [Uuid.random(_RNG.randbytes) for _ in range(12)]


def _key(topic: str, tid: Uuid, *, offset: int = 0, partition: int = 0, suffix: Suffix = Suffix.LOG) -> str:
    return build_key(PREFIX, SegmentKey(topic, tid, partition, offset, Uuid.random(_RNG.randbytes)), suffix)


def _cand(
    key: str,
    *,
    topic: str | None = None,
    tid: str | None = None,
    size: int = 100,
    lm: int = OLD,
    category: str = c.DELETED_TOPIC,
    now_category: str | None = None,
    now_reclaimable: bool = True,
    current: CurrentObject | str | None = "same",
    reclaimable: bool = True,
) -> Candidate:
    if topic is None or tid is None:
        parsed = parse_key(key, PREFIX).segment
        topic, tid = topic or parsed.topic, tid or str(parsed.topic_id)
    row = ScanRow(key, size, lm, topic, tid, category, reclaimable)
    cur = CurrentObject(size, lm) if current == "same" else current
    assert not isinstance(cur, str)
    verdict = None
    if cur is not None:
        verdict = ObjectVerdict(key, cur.size, now_category or category, now_reclaimable, None, tid, None, PREFIX)
    return Candidate(row, cur, verdict)


def _plan(cands, *, live=frozenset(), counts=None, **kw) -> ReclaimPlan:
    if counts is None:  # plenty of other objects everywhere: the guards stay quiet unless a test says otherwise
        counts = ScanCounts({}, 1_000_000)
    kw.setdefault("older_than_ms", 3 * DAY)
    return plan_reclaim(cands, counts=counts, live_topics=live, prefix=PREFIX, now_ms=NOW, **kw)


def _planned(plan: ReclaimPlan) -> list[str]:
    return [k for b in plan.batches for k in b.keys]


def _reasons(plan: ReclaimPlan) -> dict[str, str]:
    return {s.key: s.reason for s in plan.skipped}


def test_a_reclaimable_object_is_planned_under_its_own_topic_prefix():
    key = _key("orders", IDS[0])
    plan = _plan([_cand(key)])
    assert _planned(plan) == [key] and plan.skipped == ()
    (batch,) = plan.batches
    assert batch.prefix == topic_prefix(PREFIX, "orders", IDS[0]) == f"tiered/orders-{IDS[0]}/"
    assert (batch.topic, batch.topic_id, batch.bytes) == ("orders", str(IDS[0]), 100)
    assert plan.totals_by_category()[c.DELETED_TOPIC].objects == 1
    assert plan.totals_by_topic()[f"orders-{IDS[0]}"].bytes == 100


def test_an_object_that_is_gone_is_skipped():
    plan = _plan([_cand(_key("orders", IDS[0]), current=None)])
    assert _planned(plan) == [] and list(_reasons(plan).values()) == ["gone"]


def test_an_object_the_journal_records_as_deleted_is_skipped_even_if_head_finds_it():
    key = _key("orders", IDS[0])
    plan = _plan([_cand(key)], already_deleted={key})
    assert _planned(plan) == [] and _reasons(plan) == {key: "already_deleted"}


@pytest.mark.parametrize(
    "current",
    [CurrentObject(101, OLD), CurrentObject(100, OLD + 1000), CurrentObject(100, OLD - 1000)],
    ids=["size", "later", "earlier"],
)
def test_an_object_changed_since_the_scan_is_skipped(current):
    plan = _plan([_cand(_key("orders", IDS[0]), current=current)])
    assert list(_reasons(plan).values()) == ["changed_since_scan"]


def test_last_modified_is_compared_to_the_second_because_head_has_no_milliseconds():
    lm = OLD + 123  # inventory time with milliseconds; HEAD says the same second
    plan = _plan([_cand(_key("orders", IDS[0]), lm=lm, current=CurrentObject(100, OLD))])
    assert len(_planned(plan)) == 1


def test_a_scan_row_without_a_last_modified_time_is_never_trusted():
    plan = _plan([_cand(_key("orders", IDS[0]), lm=-1, current=CurrentObject(100, OLD))])
    assert list(_reasons(plan).values()) == ["changed_since_scan"]


@pytest.mark.parametrize("now_category", [c.LIVE, c.PAST_RETENTION, c.PENDING_DELETE])
def test_an_object_that_is_no_longer_deletable_is_skipped(now_category):
    plan = _plan([_cand(_key("orders", IDS[0]), category=c.NO_RLMM_ENTRY, now_category=now_category)])
    assert list(_reasons(plan).values()) == ["no_longer_reclaimable"]


def test_a_current_verdict_that_is_not_reclaimable_is_skipped():
    plan = _plan([_cand(_key("orders", IDS[0]), now_reclaimable=False)])
    assert list(_reasons(plan).values()) == ["no_longer_reclaimable"]


def test_an_object_whose_current_category_is_not_being_reclaimed_is_skipped():
    cand = _cand(_key("orders", IDS[0]), category=c.NO_RLMM_ENTRY, now_category=c.DELETED_TOPIC)
    plan = _plan([cand], categories=frozenset({c.NO_RLMM_ENTRY}))
    assert list(_reasons(plan).values()) == ["no_longer_reclaimable"]


def test_an_object_younger_than_older_than_is_skipped_and_the_boundary_is_inclusive():
    young = _key("orders", IDS[0], offset=0)
    exact = _key("orders", IDS[0], offset=10)
    plan = _plan([_cand(young, lm=NOW - DAY + 1000), _cand(exact, lm=NOW - DAY)], older_than_ms=DAY)
    assert _reasons(plan) == {young: "too_young"} and _planned(plan) == [exact]
    assert _planned(_plan([_cand(young, lm=NOW)], older_than_ms=0)) == [young]


def test_keys_outside_the_prefix_of_the_topic_id_they_were_classified_under_are_never_planned():
    a, b = IDS[0], IDS[1]
    other_id = _cand(_key("orders", a), topic="orders", tid=str(b))  # classified under another id
    other_name = _cand(_key("orders", a), topic="orderz", tid=str(a))
    outside = _cand(f"elsewhere/orders-{a}/0/{0:020d}-{IDS[2]}.log", topic="orders", tid=str(a))
    unparseable = _cand(f"tiered/orders-{a}/0/not-a-segment.log", topic="orders", tid=str(a))
    nothing = _cand(_key("orders", a), topic="orders", tid=None)
    nothing = Candidate(ScanRow(nothing.row.key, 100, OLD, None, None, c.UNKNOWN_TOPIC, True), None, None)
    plan = _plan([other_id, other_name, outside, unparseable, nothing])
    assert _planned(plan) == []
    assert set(_reasons(plan).values()) == {"outside_topic_prefix"} and len(plan.skipped) == 5


def _recorded(key: str, tid: Uuid, *, found_under: str | None, now_under: str | None) -> Candidate:
    """A deleted topic's object the scan found under ``found_under`` (its segment's recorded prefix)."""
    row = ScanRow(key, 100, OLD, "orders", str(tid), c.DELETED_TOPIC, True, found_under)
    verdict = ObjectVerdict(key, 100, c.DELETED_TOPIC, True, None, str(tid), None, now_under)
    return Candidate(row, CurrentObject(100, OLD), verdict)


def test_an_object_found_under_the_prefix_its_segment_records_is_planned_under_that_prefix_only():
    tid = IDS[3]
    key = build_key("old-cluster/", SegmentKey("orders", tid, 0, 0, Uuid.random(_RNG.randbytes)), Suffix.LOG)
    plan = _plan([_recorded(key, tid, found_under="old-cluster/", now_under="old-cluster/")])
    assert _planned(plan) == [key]
    (batch,) = plan.batches
    assert batch.prefix == topic_prefix("old-cluster/", "orders", tid) == f"old-cluster/orders-{tid}/"


def test_a_recorded_prefix_never_lets_a_key_outside_its_topic_prefix_be_planned():
    tid = IDS[3]
    under_scanned = _key("orders", tid)  # a key under tiered/, said to be found under old-cluster/
    elsewhere = build_key("other/", SegmentKey("orders", tid, 0, 0, Uuid.random(_RNG.randbytes)), Suffix.LOG)
    cands = [
        _recorded(under_scanned, tid, found_under="old-cluster/", now_under="old-cluster/"),
        _recorded(elsewhere, tid, found_under="old-cluster/", now_under="old-cluster/"),
    ]
    plan = _plan(cands)
    assert _planned(plan) == [] and set(_reasons(plan).values()) == {"outside_topic_prefix"}


def test_an_object_the_current_metadata_no_longer_places_where_the_scan_found_it_is_skipped():
    tid = IDS[3]
    key = build_key("old-cluster/", SegmentKey("orders", tid, 0, 0, Uuid.random(_RNG.randbytes)), Suffix.LOG)
    plan = _plan([_recorded(key, tid, found_under="old-cluster/", now_under=None)])
    assert _planned(plan) == [] and _reasons(plan) == {key: "no_longer_reclaimable"}
    layout = _key("orders", tid)  # found under the scanned prefix, now attributed to a recorded prefix
    plan = _plan([_recorded(layout, tid, found_under=None, now_under="old-cluster/")])
    assert _planned(plan) == [] and _reasons(plan) == {layout: "no_longer_reclaimable"}


def test_a_key_repeated_in_the_scan_is_planned_once():
    key = _key("orders", IDS[0])
    plan = _plan([_cand(key), _cand(key)])
    assert _planned(plan) == [key] and _reasons(plan) == {key: "duplicate_row"}


def test_rows_that_are_not_candidates_are_ignored():
    live = _cand(_key("orders", IDS[0]), category=c.LIVE)
    expired = _cand(_key("orders", IDS[0]), category=c.PAST_RETENTION)
    young = _cand(_key("orders", IDS[0]), reclaimable=False)
    plan = _plan([live, expired, young])
    assert plan.batches == () and plan.skipped == ()


def test_batches_hold_at_most_1000_keys_of_one_topic_prefix_each():
    big = [_cand(_key("orders", IDS[0], offset=i)) for i in range(2500)]
    small = [_cand(_key("clicks", IDS[1], offset=i)) for i in range(3)]
    same_name = [_cand(_key("orders", IDS[2], offset=i)) for i in range(2)]  # a re-created "orders": another id
    plan = _plan(big[:1200] + small + same_name + big[1200:])
    assert sorted(len(b.keys) for b in plan.batches) == [2, 3, 500, 1000, 1000]
    for batch in plan.batches:
        assert len(batch.keys) <= DELETE_BATCH
        assert all(k.startswith(batch.prefix) for k in batch.keys)
        assert {str(parse_key(k, PREFIX).segment.topic_id) for k in batch.keys} == {batch.topic_id}
    assert plan.object_count == 2505 and len(set(_planned(plan))) == 2505
    assert [len(b.keys) for b in _plan(small, batch_size=2).batches] == [2, 1]
    with pytest.raises(ValueError):
        _plan(small, batch_size=1001)


def test_a_live_topic_whose_objects_mostly_look_orphaned_is_refused_unless_forced():
    tid = IDS[0]
    cands = [_cand(_key("orders", tid, offset=i), category=c.NO_RLMM_ENTRY) for i in range(6)]
    other = _cand(_key("gone", IDS[1]))
    counts = ScanCounts({str(tid): 10, str(IDS[1]): 1}, 11)
    plan = _plan([*cands, other], live=frozenset({str(tid)}), counts=counts)
    assert _planned(plan) == [other.row.key]  # the rest of the run goes ahead
    assert plan.skipped_by_reason() == {"ratio_guard": 6} and not plan.run_refused
    (msg,) = plan.refusals
    assert f"orders-{tid}/" in msg and "6 of the 10" in msg and "--force" in msg

    forced = _plan([*cands, other], live=frozenset({str(tid)}), counts=counts, force=True)
    assert forced.object_count == 7 and forced.refusals == () and len(forced.forced) == 1

    at_ratio = _plan(cands[:5], live=frozenset({str(tid)}), counts=counts)  # 5 of 10 is not more than 0.5
    assert at_ratio.object_count == 5 and at_ratio.refusals == ()
    not_live = _plan(cands, live=frozenset(), counts=counts)  # a deleted or delete-policy topic: all may go
    assert not_live.object_count == 6
    stricter = _plan(cands[:2], live=frozenset({str(tid)}), counts=counts, max_orphan_ratio=0.1)
    assert stricter.object_count == 0 and stricter.skipped_by_reason() == {"ratio_guard": 2}


def test_mostly_unknown_topic_ids_refuse_the_whole_run_unless_forced():
    unknown = [_cand(_key("mystery", IDS[3], offset=i), category=c.UNKNOWN_TOPIC) for i in range(6)]
    deleted = _cand(_key("gone", IDS[1]))
    counts = ScanCounts({str(IDS[3]): 6, str(IDS[1]): 1, str(IDS[4]): 3}, 10)
    plan = _plan([*unknown, deleted], counts=counts)
    assert plan.run_refused and plan.batches == ()
    assert plan.skipped_by_reason() == {"ratio_guard": 7}
    assert "whole run" in plan.refusals[0] and "6 of the scan's 10" in plan.refusals[0]

    forced = _plan([*unknown, deleted], counts=counts, force=True)
    assert not forced.run_refused and forced.object_count == 7 and forced.forced
    assert _plan(unknown[:5], counts=counts).object_count == 5


def test_a_category_reclaim_may_not_delete_is_a_clear_error():
    with pytest.raises(InvalidArgument) as err:
        reclaim_categories(["deleted_topic", "past_retention"])
    text = str(err.value)
    assert "'past_retention'" in text and "live segments" in text
    assert all(cat in text for cat in c.RECLAIM_CAN_DELETE)
    with pytest.raises(InvalidArgument, match="'bogus'"):
        reclaim_categories(["bogus"])
    with pytest.raises(InvalidArgument, match="'live'"):
        _plan([], categories=frozenset({c.LIVE}))
    assert reclaim_categories([]) == c.RECLAIM_CAN_DELETE
    assert reclaim_categories(["unknown_topic"]) == {"unknown_topic"}
    assert c.PAST_RETENTION not in c.RECLAIM_CAN_DELETE and c.LIVE not in c.RECLAIM_CAN_DELETE


DURATION_TEXTS = [
    ("72h", 72 * 3_600_000),
    ("30m", 1_800_000),
    ("3d", 3 * DAY),
    ("0s", 0),
    ("1d12h", 36 * 3_600_000),
    ("500ms", 500),
    (" 5s ", 5000),
]


@pytest.mark.parametrize(("text", "ms"), DURATION_TEXTS)
def test_durations_parse(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "72", "h", "-1h", "1.5h", "3 days", "1w", "1h 30m", "h1"])
def test_bad_durations_are_refused_with_examples(text):
    with pytest.raises(InvalidArgument, match="72h"):
        parse_duration(text)


def test_the_current_verdict_and_live_topics_come_from_current_metadata():
    def topic(tid, name, *, state="ENABLED", policy="NONE", deleted=False):
        return TopicMeta(str(tid), name, state, 1, policy, -1, -1, deleted)

    seg = Uuid.random(_RNG.randbytes)
    topics = [
        topic(IDS[0], "orders"),
        topic(IDS[1], "old", deleted=True),
        topic(IDS[2], "purged", state="DISABLING", policy="DELETE"),
        topic(IDS[3], "kept", state="DISABLED", policy="RETAIN"),
    ]
    segs = [SegmentMeta(str(IDS[0]), "orders", 0, str(seg), 0, 9, 100, 1, "COPY_SEGMENT_FINISHED", NOW, NOW)]
    meta = Metadata.build(topics, segs, [(str(IDS[0]), 1, "ENABLED")], now_ms=NOW)
    assert live_topic_ids(meta) == {str(IDS[0]), str(IDS[3])}

    key = build_key(PREFIX, SegmentKey("orders", IDS[0], 0, 0, seg), Suffix.LOG)
    row = ScanRow(key, 100, OLD, "orders", str(IDS[0]), c.NO_RLMM_ENTRY, True)
    now = current_verdict(row, CurrentObject(100, OLD), meta, prefix=PREFIX, now_ms=NOW, grace_ms=DAY)
    assert (now.category, now.reclaimable) == (c.LIVE, False)  # the segment was registered since the scan
    plan = _plan([Candidate(row, CurrentObject(100, OLD), now)], live=live_topic_ids(meta))
    assert _reasons(plan) == {key: "no_longer_reclaimable"}


# -- the property ------------------------------------------------------------------------------------------------

TOPICS = [("orders", IDS[0]), ("orders", IDS[1]), ("clicks", IDS[2]), ("a.b-c", IDS[3])]


def _mostly(draw, usual, *others):
    """``usual`` most of the time (so that many examples plan something), each of ``others`` now and then."""
    pick = draw(st.integers(0, 9))  # hypothesis favours small integers, so the small ones mean "usual"
    return usual if pick < 10 - len(others) else others[pick - 10 + len(others)]


@st.composite
def candidates(draw):
    deletable, other = sorted(c.RECLAIM_CAN_DELETE), sorted(set(c.CATEGORIES) - c.RECLAIM_CAN_DELETE)
    out = []
    for i in range(draw(st.integers(0, 40))):
        topic, tid = draw(st.sampled_from(TOPICS))
        key = _key(topic, tid, offset=i, suffix=draw(st.sampled_from(list(Suffix))))
        shape = _mostly(draw, "own", "other_id", "outside", "unparseable")
        row_topic, row_tid = topic, str(tid)
        if shape == "other_id":
            row_tid = str(draw(st.sampled_from([t for _, t in TOPICS])))
        elif shape == "outside":
            key = "other/" + key[len(PREFIX) :]
        elif shape == "unparseable":
            key = key.replace("/0/", "/x/")
        size = draw(st.integers(0, 1000))
        lm = NOW - draw(st.sampled_from([10 * DAY, 4 * DAY, 2 * DAY, DAY, DAY - 1000, 0, -1000]))
        category = draw(st.sampled_from(deletable)) if _mostly(draw, True, False) else draw(st.sampled_from(other))
        row = ScanRow(key, size, lm, row_topic, row_tid, category, _mostly(draw, True, False))
        cur = _mostly(draw, CurrentObject(size, lm), None, CurrentObject(size + 1, lm), CurrentObject(size, lm + 5000))
        verdict = None
        if cur is not None:
            now_cat = _mostly(draw, category, draw(st.sampled_from(c.CATEGORIES)))
            verdict = ObjectVerdict(key, cur.size, now_cat, _mostly(draw, True, False), None, row_tid, None, PREFIX)
        out.append(Candidate(row, cur, verdict))
        if draw(st.integers(0, 9)) == 0:
            out.append(out[-1])  # a repeated row
    return out


@settings(max_examples=300, deadline=None)
@given(
    cands=candidates(),
    cats=st.sets(st.sampled_from(sorted(c.RECLAIM_CAN_DELETE)), min_size=1),
    live=st.sets(st.sampled_from([str(t) for _, t in TOPICS])),
    older_than=st.integers(0, 4 * DAY),
    ratio=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
    force=st.booleans(),
    deleted=st.sets(st.integers(0, 40), max_size=5),
)
def test_every_planned_key_is_under_its_own_topic_prefix_and_reclaimable_now(
    cands, cats, live, older_than, ratio, force, deleted
):
    by_key = {}
    for cand in cands:
        by_key.setdefault(cand.row.key, cand)
    already = {cands[i].row.key for i in deleted if i < len(cands)}
    counts = ScanCounts({str(t): 20 for _, t in TOPICS}, 80)
    selection = {"older_than_ms": older_than, "categories": frozenset(cats), "already_deleted": already}
    guards = {"max_orphan_ratio": ratio, "force": force}
    plan = _plan(cands, live=frozenset(live), counts=counts, **selection, **guards)
    planned = _planned(plan)
    assert len(planned) == len(set(planned))
    for batch in plan.batches:
        assert 1 <= len(batch.keys) <= DELETE_BATCH
        for key in batch.keys:
            seg = parse_key(key, PREFIX).segment
            assert key.startswith(batch.prefix) and batch.prefix == topic_prefix(PREFIX, seg.topic, seg.topic_id)
            cand = by_key[key]
            assert cand.row.topic_id == str(seg.topic_id) == batch.topic_id
            assert cand.verdict is not None and cand.current is not None
            assert cand.verdict.reclaimable and cand.verdict.category in c.RECLAIM_CAN_DELETE & cats
            assert cand.row.category in cats and cand.row.reclaimable
            assert NOW - cand.current.last_modified_ms >= older_than
            assert key not in already
    if plan.run_refused:
        assert plan.batches == () and not force
    # every candidate is accounted for exactly once: planned or skipped with a reason (repeats as duplicate_row)
    considered = [x for x in cands if x.row.reclaimable and x.row.category in cats]
    assert len(planned) + len(plan.skipped) == len(considered)


FORMATTED_DURATIONS = [
    (0, "0s"),
    (3 * DAY, "3d"),
    (72 * 3_600_000, "3d"),
    (90_000, "90s"),
    (1_800_000, "30m"),
    (1500, "1500ms"),
]


@pytest.mark.parametrize(("ms", "text"), FORMATTED_DURATIONS)
def test_durations_format_back_to_the_same_value(ms, text):
    assert format_duration(ms) == text and parse_duration(text) == ms
