"""Which segment each object belongs to, in Spark: the key layout parsed, and the locations segments record.

Two ways, as the contract says (:mod:`remote_storage.scan.contract`, "where a segment's objects are"):

* **The layout.** Keys are parsed with fixed widths (ids are 22 characters, offsets 20 digits), ``get``/``try_cast``
  and anchored character-class patterns, never a backtracking regex: Spark 4 runs with ANSI mode on, and one junk
  key must not fail the job. A key this parser accepts is one :func:`remote_storage.keys.parse_key` accepts.
* **Recorded locations.** A segment whose custom metadata records a prefix or a key (the export's ``object_prefix``
  and ``object_key``) has its three keys computed from its row, as
  :func:`remote_storage.segment_format.object_keys.segment_object_key` builds them; a key several segments record
  goes to the smallest (topic id, segment id). Objects join them on the whole key (broadcast when small), and a key
  found there takes its parts from the segment, whatever prefix it is under.

Invariant: a key gets the same segment, suffix and ``object_prefix`` here as :meth:`policies.orphans.Metadata.locate`
and :func:`remote_storage.keys.parse_key` give it.
"""

from __future__ import annotations

from typing import Any

from remote_storage.keys import ID_WIDTH, OFFSET_WIDTH, SEGMENT_SUFFIXES

_SUFFIXES = tuple(s.value for s in SEGMENT_SUFFIXES)


def _F() -> Any:
    from pyspark.sql import functions

    return functions


def java_quote(text: str) -> str:
    """``text`` as a literal in a Java regex (what ``Pattern.quote`` does)."""
    return "\\Q" + text.replace("\\E", "\\E\\\\E\\Q") + "\\E" if text else ""


def key_pattern(prefix: str) -> str:
    """One anchored pattern for a whole key. Character classes cannot cross ``/``, so the only backtracking is the
    topic name giving back the 23 characters of ``-<topic id>``; ``\\z`` (not ``$``, which Java also matches before
    a final newline) ends it."""
    id_ = f"[A-Za-z0-9_-]{{{ID_WIDTH - 1}}}[AQgw]"  # canonical: the last character's 4 spare bits are 0
    return (
        f"^{java_quote(prefix)}[a-zA-Z0-9._-]{{1,249}}-{id_}/(?:0|[1-9][0-9]{{0,9}})/[0-9]{{{OFFSET_WIDTH}}}-{id_}"
        f"\\.(?:{'|'.join(_SUFFIXES)})\\z"
    )


def parse_keys(rows: Any, prefix: str) -> Any:
    """Add ``under_prefix``, ``parsed`` and the key's parts (null unless parsed).

    One regex match decides the shape; the parts are then cut at fixed places (``substring_index`` and widths), and
    ``try_cast`` runs only on keys that matched (it is slow on input that fails). The match and the casts are
    projected once and referred to by name: Spark does not share them between the conditions of ``when`` (inlined,
    they ran once per output column, and parsing took 70% longer).
    """
    F = _F()
    key = F.col("key")
    under = key.startswith(prefix) if prefix else F.lit(True)
    # The key below the prefix, cut by bytes (a binary substring): a string substring counts characters from the
    # start to the end of the key, and was a quarter of the parse's CPU. Only a key that starts with the prefix is
    # ever parsed, and it is cut at a character boundary; another key's cut may split a character, and nothing taken
    # from it is kept (its parts are null: it does not match the pattern).
    rest = F.substring(key.cast("binary"), len(prefix.encode()) + 1, 1 << 30).cast("string")
    row_columns = ["key", "size", "last_modified_ms"]
    shape_columns = [
        F.coalesce(under, F.lit(False)).alias("under_prefix"),
        F.coalesce(key.rlike(key_pattern(prefix)), F.lit(False)).alias("shaped"),
    ]
    # <topic>-<topic id>, <partition> and the file name: the key below the prefix cut at its slashes.
    split_columns = [
        F.substring_index(rest, "/", 1).alias("topic_part"),
        F.substring_index(F.substring_index(rest, "/", 2), "/", -1).alias("partition_text"),
        F.substring_index(rest, "/", -1).alias("file"),
    ]
    cut = rows.select(*row_columns, *shape_columns, *split_columns)
    shaped, tlen = F.col("shaped"), F.length("topic_part")
    cast = cut.select(
        "*",
        F.substring("topic_part", F.lit(1), tlen - (ID_WIDTH + 1)).alias("name"),
        F.when(shaped, F.col("partition_text").try_cast("int")).alias("partition_number"),
        F.when(shaped, F.substring("file", 1, OFFSET_WIDTH).try_cast("bigint")).alias("offset"),
    )
    ok = shaped & F.col("partition_number").isNotNull() & F.col("offset").isNotNull() & ~F.col("name").isin(".", "..")
    checked = cast.select("*", F.coalesce(ok, F.lit(False)).alias("parsed"))

    def when_ok(col: Any) -> Any:
        return F.when(F.col("parsed"), col)

    kept_columns = ["key", "size", "last_modified_ms", "under_prefix", "parsed"]
    part_columns = [
        when_ok(F.col("name")).alias("topic"),
        when_ok(F.substring("topic_part", tlen - ID_WIDTH + 1, ID_WIDTH)).alias("topic_id"),
        when_ok(F.col("partition_number")).alias("partition"),
        when_ok(F.col("offset")).alias("start_offset"),
        when_ok(F.substring("file", OFFSET_WIDTH + 2, ID_WIDTH)).alias("segment_id"),
        when_ok(F.substring("file", OFFSET_WIDTH + ID_WIDTH + 3, 1 << 20)).alias("suffix"),
    ]
    return checked.select(*kept_columns, *part_columns)


def recorded_locations(segments: Any, prefix: str) -> Any:
    """One row per key a segment's custom metadata records (``key`` and the segment's ``r_*`` parts), one owner per
    key: the smallest (topic id, segment id)."""
    F = _F()
    offset = F.col("start_offset")
    digits = F.lpad(F.abs(offset).cast("string"), OFFSET_WIDTH - 1, "0")
    padded = F.when(offset >= 0, F.lpad(offset.cast("string"), OFFSET_WIDTH, "0")).otherwise(
        F.concat(F.lit("-"), digits)
    )
    main = F.concat_ws(
        "",
        "topic",
        F.lit("-"),
        "topic_id",
        F.lit("/"),
        F.col("partition").cast("string"),
        F.lit("/"),
        padded,
        F.lit("-"),
        "segment_id",
    )
    recorded = segments.filter(F.col("object_prefix").isNotNull() | F.col("object_key").isNotNull())
    under = F.coalesce(F.col("object_prefix"), F.lit(prefix))
    base = F.concat(under, F.coalesce(F.col("object_key"), main))
    per_suffix = recorded.select(
        "topic_id",
        "segment_id",
        "topic",
        "partition",
        "start_offset",
        under.alias("found_under"),
        base.alias("base"),
        F.explode(F.array(*[F.lit(s) for s in _SUFFIXES])).alias("suffix"),
    )
    owner = F.struct("topic_id", "segment_id", "topic", "partition", "start_offset", "suffix", "found_under")
    keyed = per_suffix.select(F.concat("base", F.lit("."), "suffix").alias("key"), owner.alias("owner"))
    owned = keyed.groupBy("key").agg(F.min("owner").alias("r"))
    return owned.select("key", *[F.col(f"r.{name}").alias(f"r_{name}") for name in owner_fields()])


def owner_fields() -> tuple[str, ...]:
    return ("topic_id", "segment_id", "topic", "partition", "start_offset", "suffix", "found_under")


def locate(keyed: Any, recorded: Any | None, prefix: str, *, broadcast: bool) -> Any:
    """:func:`parse_keys`' rows with recorded locations applied (``recorded`` None: no segment records one), and
    ``object_prefix``: the prefix each object was found under."""
    F = _F()
    parts = ("topic", "topic_id", "partition", "start_offset", "segment_id", "suffix")
    if recorded is None:
        object_prefix = F.when(F.col("parsed"), F.lit(prefix)).alias("object_prefix")
        return keyed.select("*", object_prefix)
    joined = keyed.join(F.broadcast(recorded) if broadcast else recorded, "key", "left")
    found = F.col("r_segment_id").isNotNull()
    return joined.select(
        "key",
        "size",
        "last_modified_ms",
        (found | F.col("under_prefix")).alias("under_prefix"),
        (found | F.col("parsed")).alias("parsed"),
        *[F.when(found, F.col(f"r_{p}")).otherwise(F.col(p)).alias(p) for p in parts],
        F.when(found, F.col("r_found_under")).when(F.col("parsed"), F.lit(prefix)).alias("object_prefix"),
    )
