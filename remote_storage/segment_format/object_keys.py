"""Where a segment's objects are: the configured layout, or the prefix and key its custom metadata records.

Owner: Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/ObjectKeyFactory.java`` (commit in
:mod:`remote_storage.segment_format`). A key is ``<prefix><main path>.<suffix>`` where the main path is
``<topic>-<topic id>/<partition>/<start offset, 20 digits>-<segment id>`` (:mod:`remote_storage.keys` builds the
same keys; :func:`main_path` is that layout without prefix and suffix). The prefix is concatenated raw (Aiven adds
no ``/``). A segment whose custom metadata (:mod:`.custom_metadata`) records OBJECT_PREFIX or OBJECT_KEY has its
objects there instead: the recorded prefix replaces the configured one, the recorded key the main path.

``key.prefix.mask`` only changes how a key is shown in logs: ``<prefix>/`` in place of the prefix actually used.

Aiven itself honours the recorded fields only when fetching a segment's ``.log`` and ``.indexes``; it writes,
fetches the manifest of, and deletes a segment under the configured prefix. :func:`segment_object_key` gives the
key the custom metadata says, for every suffix; which operations use it is the caller's choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from remote_storage.keys import OFFSET_WIDTH, SegmentKey, Suffix, partition_prefix
from remote_storage.segment_format.custom_metadata import SegmentCustomMetadata

MASKED_PREFIX = "<prefix>/"


def main_path(segment: SegmentKey) -> str:
    """``<topic>-<topic id>/<partition>/<start offset, 20 digits>-<segment id>``."""
    return (
        f"{partition_prefix('', segment.topic, segment.topic_id, segment.partition)}"
        f"{segment.start_offset:0{OFFSET_WIDTH}d}-{segment.segment_id}"
    )


@dataclass(frozen=True, slots=True)
class SegmentObjectKey:
    """One object's key, kept in its two parts so a log line can hide the prefix."""

    prefix: str
    main_path_and_suffix: str

    @property
    def value(self) -> str:
        return self.prefix + self.main_path_and_suffix

    def shown(self, *, mask_prefix: bool) -> str:
        """The key as a log line shows it (``key.prefix.mask``)."""
        return MASKED_PREFIX + self.main_path_and_suffix if mask_prefix else self.value


def segment_object_key(
    *,
    configured_prefix: str | None,
    segment: SegmentKey,
    suffix: Suffix,
    custom_metadata: SegmentCustomMetadata | None = None,
) -> SegmentObjectKey:
    """The key of ``segment``'s ``suffix`` object: under the recorded prefix and key if its custom metadata has
    them, else under ``configured_prefix`` (None is ``""``, as in Aiven) and the layout's main path."""
    prefix = configured_prefix or ""
    main = main_path(segment)
    if custom_metadata is not None:
        if custom_metadata.object_prefix is not None:
            prefix = custom_metadata.object_prefix
        if custom_metadata.object_key is not None:
            main = custom_metadata.object_key
    return SegmentObjectKey(prefix, f"{main}.{suffix.value}")
