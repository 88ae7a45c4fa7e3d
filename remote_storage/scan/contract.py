"""What a scan decides and writes: the stable names and files every consumer (reclaim, report, alerts) relies on.

**Where a segment's objects are.** By the layout, ``<prefix><topic>-<topicId>/<partition>/<offset:20>-<segmentId>
.<suffix>`` under the scanned prefix; or, for a segment whose Aiven custom metadata (exported as ``object_prefix``
and ``object_key``) records where it is, ``<recorded prefix, else the scanned prefix><recorded key, else the
layout's main path>.<suffix>`` (:func:`remote_storage.segment_format.object_keys.segment_object_key`). A key that is
such a recorded location is that segment's object whatever prefix it is under (topic, partition, offsets and ids
come from the segment's row); if several segments record the same key, the one with the smallest (topic id, segment
id) owns it. Every other key is parsed by the layout under the scanned prefix. ``object_prefix`` in
``objects.parquet`` is the prefix the object was found under: the recorded one, or the scanned one.

Every well-formed inventory row gets exactly one **category**, decided in this order (the first that applies):

==================  ==========================================================================================
``outside_prefix``  not a recorded location, and not under the scanned prefix (not tiered storage's; never touched)
``unparseable``     under the prefix but not ``<topic>-<topicId>/<partition>/<offset:20>-<segmentId>.<suffix>``
``unknown_topic``   the key's topic id was never in the metadata log
``deleted_topic``   the key's topic id was deleted (RemoveTopicRecord; KIP-516: a re-created name is a new id)
``disabled_delete`` the topic is DISABLING or DISABLED with the ``delete`` policy
``no_rlmm_entry``   the RLMM has no segment with this segment id and topic id
``rlmm_deleted``    the RLMM says DELETE_SEGMENT_FINISHED
``pending_delete``  the RLMM says DELETE_SEGMENT_STARTED (a broker is deleting it: not an orphan)
``copy_unfinished`` the RLMM says COPY_SEGMENT_STARTED (in flight until the grace period has passed)
``past_retention``  COPY_SEGMENT_FINISHED and expired by ``retention.ms`` / ``retention.bytes`` (Kafka's rules)
``live``            COPY_SEGMENT_FINISHED and retained
==================  ==========================================================================================

An object is **reclaimable** when its category is in :data:`RECLAIMABLE` and, except for ``past_retention``
(which retention decides), its age (inventory creation time minus its last-modified time) is at least the grace
period; an object whose age is unknown is never reclaimable. ``past_retention`` objects belong to live segments:
the scan counts their bytes, but only the brokers' retention tasks delete them (:data:`RECLAIM_CAN_DELETE`).

Retention follows :func:`policies.retention.plan_remote_expiry` with no log start offset and no local bytes: per
(topic id, partition), COPY_SEGMENT_FINISHED segments in start-offset order expire oldest first while
``max_timestamp_ms < now - retention_ms`` (when ``retention_ms >= 0``) or the partition's remaining bytes exceed
``retention_bytes`` (when ``>= 0``); the first survivor keeps every later segment.

**The size rule** (judged per segment: COPY_SEGMENT_FINISHED, of a known topic id that is neither deleted nor
DISABLING/DISABLED with the ``delete`` policy, whose ``.log`` is in the inventory; with several ``.log`` objects,
the one with the smallest key). A ``.log`` stored compressed or encrypted is not the segment's size, so what it must
weigh comes from the format, the first of these that applies:

1. the custom metadata's ``remote_size`` (Aiven's REMOTE_SIZE: the bytes uploaded for the ``.log``, ``.indexes``
   and ``.rsm-manifest`` together): when all three are in the inventory, their sizes (every object of the
   segment) must add up to it; with one missing, sizes are not judged (the object set's anomaly says it);
2. the RLMM's ``size_bytes``: a ``.log`` of exactly that size is right (an untransformed segment);
3. otherwise the manifest decides, so it must be read: with no ``.rsm-manifest`` in the inventory sizes are not
   judged (``manifest_missing`` says it); with manifests not read (no access to the bucket, or
   ``max_manifest_reads`` 0) the ``.log`` is a mismatch, as when only the RLMM was known; read
   (:mod:`remote_storage.scan.manifest_reading`), an Aiven ``SegmentManifestV1`` says the ``.log`` must weigh its
   chunk index's transformed size; a legacy manifest of ours (flat JSON with ``tieredEpoch``, no ``version``)
   says the ``.log`` is raw, so it is a mismatch; an unreadable one is ``manifest_unreadable``; one gone since the
   inventory was taken is not judged.

The scan's executors read the manifests themselves, one GET per segment that reaches step 3 with its manifest in
the inventory and nothing else: none for untransformed segments or segments with ``remote_size``, at most one per
COPY_SEGMENT_FINISHED segment. More than ``max_manifest_reads`` of them stops the scan, saying so.

**Anomalies** (ARCHITECTURE §7), by type:

* object level (the ``anomaly`` column of ``objects.parquet``, at most one per object, in this order):
  ``unparseable_key``; ``delete_incomplete`` (an object of a DISABLED delete-policy topic, of a
  DELETE_SEGMENT_FINISHED segment, or of a DELETE_SEGMENT_STARTED segment whose delete began at least a grace
  period ago).
* segment level (COPY_SEGMENT_FINISHED segments of live topic ids), the object set: ``missing_objects`` (none of its
  three objects is in the inventory), ``manifest_missing`` (its ``.log`` is and its ``.rsm-manifest`` is not),
  ``incomplete_object_set`` (one or two are, otherwise); the chain: ``offset_gap`` / ``offset_overlap`` (against the
  previous segment of the same partition and tiered epoch, in start-offset order: a gap when
  ``start > previous end + 1``, an overlap when ``start <= previous end``); the size rule: ``size_mismatch`` (the
  row names the ``.log`` and its size) or ``manifest_unreadable`` (the row names the ``.rsm-manifest`` and its size).
* segment level, any known topic id: ``stale_epoch_copy`` (a COPY_SEGMENT_STARTED or _FINISHED segment whose tiered
  epoch is not one at which the topic was ENABLED, per the exported tiered-state history; a topic id without any
  history, as every topic of an export read from a Kafka cluster, gets no such verdict);
  ``custom_metadata_unreadable`` (custom metadata recorded for the segment did not decode: its objects are looked
  for by the layout and its size by rules 2 and 3).
* inventory level: ``malformed_inventory_row`` (rows the inventory reader could not use, by reason).

**Information** (rows of ``anomalies.parquet`` of :data:`INFORMATION_TYPES`, counted apart in ``summary.json``,
never alerting): ``overlap_after_leader_change``, an overlap as above in a topic id without any tiered-state
history (every topic of an export read from a Kafka cluster): Kafka's leaders may copy overlapping segments after a
leader change (KAFKA-15168), which is how Kafka works, not a fault.

Invariants: category and anomaly names never change (they are columns, JSON keys and CLI arguments); every
inventory row is counted exactly once (a category, or a malformed row); "now" is the inventory's creation time.

One source of truth: this module names the rules and :mod:`policies.orphans` is their reference implementation
in plain Python (reclaim re-checks objects with it). The Spark job (:mod:`remote_storage.scan.job`) and the
DuckDB SQL that ``make bench`` times it against implement the same rules for speed; each is checked object by
object against :mod:`policies.orphans` on generated buckets holding every category and anomaly type
(``test_scan_agreement`` and ``test_scan_sql_reference``), so neither can drift from it.
"""

from __future__ import annotations

from typing import Final

# -- categories -------------------------------------------------------------------------------------------------
OUTSIDE_PREFIX: Final = "outside_prefix"
UNPARSEABLE: Final = "unparseable"
UNKNOWN_TOPIC: Final = "unknown_topic"
DELETED_TOPIC: Final = "deleted_topic"
DISABLED_DELETE: Final = "disabled_delete"
NO_RLMM_ENTRY: Final = "no_rlmm_entry"
RLMM_DELETED: Final = "rlmm_deleted"
PENDING_DELETE: Final = "pending_delete"
COPY_UNFINISHED: Final = "copy_unfinished"
PAST_RETENTION: Final = "past_retention"
LIVE: Final = "live"

CATEGORIES: Final = (
    OUTSIDE_PREFIX,
    UNPARSEABLE,
    UNKNOWN_TOPIC,
    DELETED_TOPIC,
    DISABLED_DELETE,
    NO_RLMM_ENTRY,
    RLMM_DELETED,
    PENDING_DELETE,
    COPY_UNFINISHED,
    PAST_RETENTION,
    LIVE,
)
RECLAIMABLE: Final = frozenset(
    {UNKNOWN_TOPIC, DELETED_TOPIC, DISABLED_DELETE, NO_RLMM_ENTRY, RLMM_DELETED, COPY_UNFINISHED, PAST_RETENTION}
)
# Categories whose reclaimability does not wait for the grace period (retention decides it).
NO_GRACE: Final = frozenset({PAST_RETENTION})
# What `tieredctl reclaim` may delete: never a live segment, so never past_retention (the brokers expire those).
RECLAIM_CAN_DELETE: Final = RECLAIMABLE - {PAST_RETENTION}

# -- anomalies --------------------------------------------------------------------------------------------------
UNPARSEABLE_KEY: Final = "unparseable_key"
MALFORMED_INVENTORY_ROW: Final = "malformed_inventory_row"
MISSING_OBJECTS: Final = "missing_objects"
INCOMPLETE_OBJECT_SET: Final = "incomplete_object_set"
SIZE_MISMATCH: Final = "size_mismatch"
OFFSET_GAP: Final = "offset_gap"
OFFSET_OVERLAP: Final = "offset_overlap"
STALE_EPOCH_COPY: Final = "stale_epoch_copy"
DELETE_INCOMPLETE: Final = "delete_incomplete"
MANIFEST_MISSING: Final = "manifest_missing"
MANIFEST_UNREADABLE: Final = "manifest_unreadable"
CUSTOM_METADATA_UNREADABLE: Final = "custom_metadata_unreadable"

ANOMALY_TYPES: Final = (
    UNPARSEABLE_KEY,
    MALFORMED_INVENTORY_ROW,
    MISSING_OBJECTS,
    INCOMPLETE_OBJECT_SET,
    SIZE_MISMATCH,
    OFFSET_GAP,
    OFFSET_OVERLAP,
    STALE_EPOCH_COPY,
    DELETE_INCOMPLETE,
    MANIFEST_MISSING,
    MANIFEST_UNREADABLE,
    CUSTOM_METADATA_UNREADABLE,
)
OBJECT_ANOMALIES: Final = (UNPARSEABLE_KEY, DELETE_INCOMPLETE)

# -- information: rows of anomalies.parquet that are not anomalies (counted apart; never alert) --------------------
OVERLAP_AFTER_LEADER_CHANGE: Final = "overlap_after_leader_change"
INFORMATION_TYPES: Final = (OVERLAP_AFTER_LEADER_CHANGE,)
SEGMENT_ANOMALIES: Final = (
    MISSING_OBJECTS,
    MANIFEST_MISSING,
    INCOMPLETE_OBJECT_SET,
    OFFSET_GAP,
    OFFSET_OVERLAP,
    SIZE_MISMATCH,
    MANIFEST_UNREADABLE,
    STALE_EPOCH_COPY,
    CUSTOM_METADATA_UNREADABLE,
)

# -- output files of `scan run` (all under the output directory) -------------------------------------------------
OBJECTS_DIR: Final = "objects.parquet"  # a Spark Parquet directory, one row per well-formed inventory row
ANOMALIES_DIR: Final = "anomalies.parquet"  # a Spark Parquet directory, one row per segment/object anomaly
MANIFESTS_DIR: Final = "manifests.parquet"  # a Spark Parquet directory, one row per manifest read (when any was)
SUMMARY_FILE: Final = "summary.json"
REPORT_FILE: Final = "report.html"
UPLOADS_FILE: Final = "multipart_uploads.json"  # incomplete multipart uploads (when the bucket could be listed)
EXPORT_DIR: Final = "export"  # the metadata export the scan joined against (when the scan made it)

# Columns of objects.parquet, in order, with Spark SQL types.
OBJECT_COLUMNS: Final = (
    ("key", "string"),
    ("size", "bigint"),
    ("last_modified_ms", "bigint"),  # -1 when the inventory has no LastModifiedDate
    ("age_ms", "bigint"),  # inventory creation minus last modified; -1 when unknown
    ("topic", "string"),  # null for outside_prefix / unparseable
    ("topic_id", "string"),
    ("partition", "int"),
    ("start_offset", "bigint"),
    ("segment_id", "string"),
    ("suffix", "string"),
    ("segment_state", "string"),  # the RLMM state name, null without an RLMM entry
    ("segment_epoch", "int"),  # the RLMM segment's tiered epoch
    ("category", "string"),
    ("reclaimable", "boolean"),
    ("anomaly", "string"),  # null, or one of OBJECT_ANOMALIES
    ("object_prefix", "string"),  # the prefix it was found under (scanned or recorded); null when not parsed
)

# Columns of anomalies.parquet.
ANOMALY_COLUMNS: Final = (
    ("type", "string"),
    ("topic", "string"),  # null for unparseable keys
    ("topic_id", "string"),
    ("partition", "int"),
    ("segment_id", "string"),
    ("key", "string"),  # the object: for object-level anomalies, size_mismatch and manifest_unreadable
    ("bytes", "bigint"),  # the object's size when a key is named, else the segment's RLMM size
    ("detail", "string"),
)

# Exit status of `scan run` when the anomalies exceed the alert threshold (0, 1, 2 keep ARCHITECTURE §8's meanings).
EXIT_ANOMALIES: Final = 3

DEFAULT_GRACE_MS: Final = 3 * 24 * 3600 * 1000  # longer than an upload plus AWS inventory's up-to-48h lag
# Manifests the executors may GET in one scan (one small GET each; see "the size rule"): about 0.4 USD of requests
# on AWS, and a few minutes at the executors' parallelism.
DEFAULT_MAX_MANIFEST_READS: Final = 1_000_000
