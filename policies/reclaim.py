"""The reclaim planner: which objects of a scan's output may be deleted now, decided from facts and time alone.

A scan (``objects.parquet``) says which objects looked reclaimable when its inventory was taken. An inventory lags
the bucket and metadata moves on, so nothing is deleted on the scan's word alone (ARCHITECTURE §7): each candidate is
re-checked against what is true *now* (a HEAD of the object, and :func:`policies.orphans.classify_object` run on
current metadata at the current time). :func:`plan_reclaim` takes those facts as arguments and returns an immutable
:class:`ReclaimPlan`: batches of keys to delete, grouped by topic prefix, and every other candidate with a stable
skip reason. :mod:`policies.reclaim_executor` gathers the facts and applies the plan.

Skip reasons (stable names: JSON keys and journal values), checked in this order, the first that applies:

=========================  ==================================================================================
``outside_topic_prefix``   the key does not parse under the prefix it was found under (the scanned prefix, or the
                           one its segment's custom metadata records), or not as an object of the topic (name and
                           id) its scan row was classified under
``duplicate_row``          the same key appeared earlier in the scan output
``already_deleted``        a previous run's journal records the key as deleted
``gone``                   HEAD found no object
``changed_since_scan``     the object's size or last-modified time is not the scan row's
``no_longer_reclaimable``  the current verdict is not reclaimable, or its category is not one being reclaimed, or
                           it was not found under the prefix the scan found it under
``too_young``              ``now - last_modified < older_than`` (or the last-modified time is unknown)
``ratio_guard``            refused by a safety guard (below), unless forced
=========================  ==================================================================================

Safety guards. A wrong path or a mismatched metadata export makes *everything* look orphaned (the lesson of
Iceberg's and Delta's orphan-file removal), so the planner refuses, unless ``force``: every planned key of a
*live* topic id (known, not deleted, not DISABLING/DISABLED with the delete policy) when they are more than
``max_orphan_ratio`` of that topic id's objects in the scan; and the whole run when the planned ``unknown_topic``
keys are more than ``max_orphan_ratio`` of all parsed objects in the scan.

Invariants:
* A planned key is under :func:`remote_storage.keys.topic_prefix` of its own parsed topic name and id, which is
  the topic id its scan row was classified under, below the prefix it was found under: the scanned prefix, or for a
  segment whose custom metadata records another prefix, that one (then the object is re-checked as found there, by
  the current metadata's record); each batch holds the keys of one such prefix only, and at most
  ``batch_size`` (<= 1000, S3's DeleteObjects limit) of them. The executor passes that prefix to the storage
  layer, which refuses anything outside it (ARCHITECTURE §4 invariant 5).
* Never a live segment: a planned key's current category is in :data:`remote_storage.scan.contract.RECLAIM_CAN_DELETE`
  (which excludes ``live`` and ``past_retention``) and its current verdict is reclaimable.
* Never an object younger than ``older_than_ms`` at ``now_ms``, by its current last-modified time.
* A plan is data: building one deletes nothing, so a dry run deletes nothing. After a complete run every planned
  key is journaled as deleted (and HEAD finds it gone), so a second run plans nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from orchestrator.errors import InvalidArgument
from policies.orphans import BucketObject, Metadata, ObjectVerdict, classify_object, deletes_everything
from remote_storage.keys import KeyParseError, parse_key, topic_prefix
from remote_storage.scan import contract as c

DELETE_BATCH = 1000  # S3's DeleteObjects limit
DEFAULT_MAX_ORPHAN_RATIO = 0.5

# -- skip reasons ------------------------------------------------------------------------------------------------
OUTSIDE_TOPIC_PREFIX = "outside_topic_prefix"
DUPLICATE_ROW = "duplicate_row"
ALREADY_DELETED = "already_deleted"
GONE = "gone"
CHANGED_SINCE_SCAN = "changed_since_scan"
NO_LONGER_RECLAIMABLE = "no_longer_reclaimable"
TOO_YOUNG = "too_young"
RATIO_GUARD = "ratio_guard"
SKIP_REASONS = (
    OUTSIDE_TOPIC_PREFIX,
    DUPLICATE_ROW,
    ALREADY_DELETED,
    GONE,
    CHANGED_SINCE_SCAN,
    NO_LONGER_RECLAIMABLE,
    TOO_YOUNG,
    RATIO_GUARD,
)


def reclaim_categories(requested: Iterable[str]) -> frozenset[str]:
    """The categories to reclaim: ``requested``, each of which must be deletable; all deletable ones if empty."""
    wanted = frozenset(requested)
    bad = sorted(wanted - c.RECLAIM_CAN_DELETE)
    if bad:
        why = (
            " (past_retention objects are live segments: the brokers' retention deletes them, never reclaim)"
            if c.PAST_RETENTION in bad
            else ""
        )
        raise InvalidArgument(
            f"cannot reclaim category {', '.join(repr(b) for b in bad)}{why}; "
            f"choose among {', '.join(sorted(c.RECLAIM_CAN_DELETE))}"
        )
    return wanted or c.RECLAIM_CAN_DELETE


@dataclass(frozen=True, slots=True)
class ScanRow:
    """The columns of one ``objects.parquet`` row that reclaim uses."""

    key: str
    size: int
    last_modified_ms: int  # -1 when the inventory had none
    topic: str | None
    topic_id: str | None
    category: str
    reclaimable: bool
    object_prefix: str | None = None  # the prefix the scan found it under; None: the scanned prefix (older scans)


@dataclass(frozen=True, slots=True)
class CurrentObject:
    """What a HEAD of the object says now."""

    size: int
    last_modified_ms: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """A scan row and its re-check: ``current`` is None when the object is gone (or was not looked up because the
    journal says it is deleted); ``verdict`` is the current classification, None exactly when ``current`` is."""

    row: ScanRow
    current: CurrentObject | None
    verdict: ObjectVerdict | None


@dataclass(frozen=True, slots=True)
class ScanCounts:
    """Totals over *every* row of the scan output, not only the candidates (the ratio guards' denominators)."""

    objects_by_topic_id: Mapping[str, int]
    parsed_objects: int  # rows with a topic id (neither outside_prefix nor unparseable)


@dataclass(frozen=True, slots=True)
class PlannedObject:
    key: str
    size: int
    category: str  # the current category


@dataclass(frozen=True, slots=True)
class ReclaimBatch:
    """Keys of one topic id, all under ``prefix``; at most ``DELETE_BATCH`` of them."""

    prefix: str
    topic: str
    topic_id: str
    objects: tuple[PlannedObject, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(o.key for o in self.objects)

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)


@dataclass(frozen=True, slots=True)
class SkippedKey:
    key: str
    reason: str  # one of SKIP_REASONS


@dataclass(frozen=True, slots=True)
class Totals:
    objects: int = 0
    bytes: int = 0

    def add(self, size: int, count: int = 1) -> Totals:
        return Totals(self.objects + count, self.bytes + size)


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    batches: tuple[ReclaimBatch, ...]
    skipped: tuple[SkippedKey, ...]
    refusals: tuple[str, ...] = ()  # one message per guard that refused
    run_refused: bool = False  # the unknown_topic guard refused the whole run
    forced: tuple[str, ...] = ()  # one message per guard that would have refused but was overridden

    @property
    def object_count(self) -> int:
        return sum(len(b.objects) for b in self.batches)

    @property
    def byte_count(self) -> int:
        return sum(b.bytes for b in self.batches)

    def skipped_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(s.reason for s in self.skipped).items()))

    def totals_by_category(self) -> dict[str, Totals]:
        out: dict[str, Totals] = defaultdict(Totals)
        for b in self.batches:
            for o in b.objects:
                out[o.category] = out[o.category].add(o.size)
        return dict(sorted(out.items()))

    def totals_by_topic(self) -> dict[str, Totals]:
        """Keyed by ``<topic>-<topicId>`` (the topic prefix without the scanned prefix): names can be reused."""
        out: dict[str, Totals] = defaultdict(Totals)
        for b in self.batches:
            name = f"{b.topic}-{b.topic_id}"
            for o in b.objects:
                out[name] = out[name].add(o.size)
        return dict(sorted(out.items()))


def is_candidate(row: ScanRow, categories: frozenset[str]) -> bool:
    """A row the scan found reclaimable, in a category being reclaimed (never ``past_retention``)."""
    return row.reclaimable is True and row.category in categories and row.category in c.RECLAIM_CAN_DELETE


def live_topic_ids(meta: Metadata) -> frozenset[str]:
    """Topic ids whose data is meant to stay: known, not deleted, not being disabled with the delete policy."""
    return frozenset(tid for tid, t in meta.topics.items() if not t.deleted and not deletes_everything(t))


def current_verdict(
    row: ScanRow, current: CurrentObject, meta: Metadata, *, prefix: str, now_ms: int, grace_ms: int
) -> ObjectVerdict:
    """The object as it is now (HEAD's size and last-modified time), classified against current metadata."""
    obj = BucketObject(row.key, current.size, current.last_modified_ms)
    verdict, _ = classify_object(obj, meta, prefix=prefix, now_ms=now_ms, grace_ms=grace_ms)
    return verdict


def _same_object(row: ScanRow, current: CurrentObject) -> bool:
    # HEAD's Last-Modified is an HTTP date (whole seconds) while inventories and listings carry milliseconds, so
    # times are compared to the second. An unknown time in the scan never matches: such a row is not trusted.
    if row.last_modified_ms < 0 or current.size != row.size:
        return False
    return row.last_modified_ms // 1000 == current.last_modified_ms // 1000


def found_under(row: ScanRow, prefix: str) -> str:
    """The prefix the scan found the row's object under: its own, or the scanned one."""
    return prefix if row.object_prefix is None else row.object_prefix


def _own_prefix(row: ScanRow, prefix: str) -> tuple[str, str, str] | None:
    """(topic prefix, topic, topic id) of the key's own parsed topic, below the prefix it was found under, if that
    is the topic id the row names."""
    base = found_under(row, prefix)
    try:
        parsed = parse_key(row.key, base)
    except KeyParseError:
        return None
    seg = parsed.segment
    if row.topic_id is None or row.topic is None or str(seg.topic_id) != row.topic_id or seg.topic != row.topic:
        return None
    own = topic_prefix(base, seg.topic, seg.topic_id)
    return (own, row.topic, row.topic_id) if row.key.startswith(own) else None


def _skip_reason(
    cand: Candidate,
    *,
    prefix: str,
    now_ms: int,
    older_than_ms: int,
    categories: frozenset[str],
    already_deleted: Collection[str],
) -> str | None:
    row = cand.row
    if row.key in already_deleted:
        return ALREADY_DELETED
    if cand.current is None or cand.verdict is None:
        return GONE
    v = cand.verdict
    if v.key != row.key or v.topic_id != row.topic_id:
        raise ValueError(f"the verdict for {v.key!r} ({v.topic_id}) was given for {row.key!r} ({row.topic_id})")
    if not _same_object(row, cand.current):
        return CHANGED_SINCE_SCAN
    if v.category not in c.RECLAIM_CAN_DELETE or v.category not in categories:
        return NO_LONGER_RECLAIMABLE
    if v.object_prefix != found_under(row, prefix):  # the metadata no longer records it where the scan found it
        return NO_LONGER_RECLAIMABLE
    lm = cand.current.last_modified_ms
    if lm < 0 or now_ms - lm < older_than_ms:
        return TOO_YOUNG
    if not v.reclaimable:  # e.g. classified with a longer grace than older_than
        return NO_LONGER_RECLAIMABLE
    return None


def plan_reclaim(
    candidates: Iterable[Candidate],
    *,
    counts: ScanCounts,
    live_topics: frozenset[str],
    prefix: str,
    now_ms: int,
    older_than_ms: int,
    categories: frozenset[str] = c.RECLAIM_CAN_DELETE,
    already_deleted: Collection[str] = frozenset(),
    max_orphan_ratio: float = DEFAULT_MAX_ORPHAN_RATIO,
    force: bool = False,
    batch_size: int = DELETE_BATCH,
) -> ReclaimPlan:
    """What to delete among ``candidates``: their rows that are not :func:`is_candidate` are ignored.

    ``live_topics`` is :func:`live_topic_ids` of the current metadata; ``counts`` covers the whole scan output.
    """
    if not 1 <= batch_size <= DELETE_BATCH:
        raise ValueError(f"batch_size must be 1..{DELETE_BATCH}, got {batch_size}")
    if not 0.0 <= max_orphan_ratio <= 1.0:
        raise InvalidArgument(f"max orphan ratio must be between 0 and 1, got {max_orphan_ratio}")
    bad = categories - c.RECLAIM_CAN_DELETE
    if bad:
        reclaim_categories(bad)  # raises, naming them
    skipped: list[SkippedKey] = []
    seen: set[str] = set()
    # prefix -> (topic, topic id, objects), in first-seen order; keys are sorted within a prefix below
    planned: dict[str, tuple[str, str, list[PlannedObject]]] = {}
    for cand in candidates:
        row = cand.row
        if not is_candidate(row, categories):
            continue
        owner = _own_prefix(row, prefix)
        if owner is None:
            skipped.append(SkippedKey(row.key, OUTSIDE_TOPIC_PREFIX))
            continue
        if row.key in seen:
            skipped.append(SkippedKey(row.key, DUPLICATE_ROW))
            continue
        seen.add(row.key)
        reason = _skip_reason(
            cand,
            prefix=prefix,
            now_ms=now_ms,
            older_than_ms=older_than_ms,
            categories=categories,
            already_deleted=already_deleted,
        )
        if reason is not None or cand.current is None or cand.verdict is None:
            skipped.append(SkippedKey(row.key, reason or GONE))
            continue
        own, topic, tid = owner
        planned.setdefault(own, (topic, tid, []))[2].append(
            PlannedObject(row.key, cand.current.size, cand.verdict.category)
        )

    refusals: list[str] = []
    forced: list[str] = []
    refused_prefixes: set[str] = set()
    unknown = sum(1 for _, _, objs in planned.values() for o in objs if o.category == c.UNKNOWN_TOPIC)
    run_refused = counts.parsed_objects > 0 and unknown / counts.parsed_objects > max_orphan_ratio
    if run_refused:
        msg = (
            f"{unknown} of the scan's {counts.parsed_objects} objects would be deleted as unknown_topic, more than "
            f"the max orphan ratio {max_orphan_ratio:g}: is the metadata the one of this bucket and prefix?"
        )
        if force:
            forced.append(f"--force: {msg}")
            run_refused = False
        else:
            refusals.append(f"refusing the whole run: {msg} Check it, then pass --force to delete anyway")
            refused_prefixes.update(planned)
    for own, (topic, tid, objs) in planned.items():
        if own in refused_prefixes or tid not in live_topics:
            continue
        total = counts.objects_by_topic_id.get(tid, 0)
        if total > 0 and len(objs) / total > max_orphan_ratio:
            msg = (
                f"{len(objs)} of the {total} objects under {own} would be deleted but topic {topic} ({tid}) is live, "
                f"more than the max orphan ratio {max_orphan_ratio:g}"
            )
            if force:
                forced.append(f"--force: {msg}")
            else:
                refused_prefixes.add(own)
                refusals.append(f"refusing {own}: {msg}; check the scan's metadata, then pass --force to delete anyway")

    batches: list[ReclaimBatch] = []
    for own in sorted(planned):
        topic, tid, objs = planned[own]
        if own in refused_prefixes:
            skipped.extend(SkippedKey(o.key, RATIO_GUARD) for o in objs)
            continue
        objs.sort(key=lambda o: o.key)
        for i in range(0, len(objs), batch_size):
            batches.append(ReclaimBatch(own, topic, tid, tuple(objs[i : i + batch_size])))
    return ReclaimPlan(tuple(batches), tuple(skipped), tuple(refusals), run_refused, tuple(forced))
