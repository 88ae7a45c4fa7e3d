"""What a segment's ``.rsm-manifest`` says about the size of its ``.log``: one small, pure verdict per manifest read.

Pure (bytes in, a frozen value out): the scan's executors call :func:`read_manifest` on the bodies they GET
(:mod:`.manifest_fetch`), and the reference classifier (:mod:`policies.orphans`) takes the same readings as input, so
both judge sizes from the same facts. Four outcomes, by ``kind`` (stable names: they are summary keys):

==============  =================================================================================================
``aiven``       Aiven's ``SegmentManifestV1`` (:func:`remote_storage.segment_format.manifest.manifest_from_json`):
                ``transformed_size`` is the chunk index's stored size, what the ``.log`` must weigh (compressed,
                encrypted or neither); no key ring is needed, the chunk index is not encrypted
``legacy``      a manifest written before the format was Aiven's: a flat JSON object of our own with
                ``tieredEpoch`` and no ``version``; its ``.log`` is the raw segment, so it must weigh the RLMM's size
``unreadable``  anything else (not UTF-8 JSON, another version, a member missing or of the wrong type, a chunk
                index that does not hold together): ``detail`` says what, as the library's error does
``gone``        the GET found no object: deleted since the inventory was taken (only :mod:`.manifest_fetch` makes it)
==============  =================================================================================================

Invariant: :func:`read_manifest` never raises on any bytes; its detail is at most :data:`MAX_DETAIL` characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from orchestrator.errors import TieredError
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.manifest import manifest_from_json

AIVEN: Final = "aiven"
LEGACY: Final = "legacy"
UNREADABLE: Final = "unreadable"
GONE: Final = "gone"
KINDS: Final = (AIVEN, LEGACY, UNREADABLE, GONE)

MAX_DETAIL: Final = 300
LEGACY_MARK: Final = "tieredEpoch"  # the member every manifest of ours carried


@dataclass(frozen=True, slots=True)
class ManifestReading:
    kind: str  # one of KINDS
    transformed_size: int | None = None  # for AIVEN: the stored size of the .log its chunk index describes
    detail: str | None = None  # for UNREADABLE: why


def _unreadable(why: str) -> ManifestReading:
    return ManifestReading(UNREADABLE, detail=why[:MAX_DETAIL])


def _is_legacy(body: bytes) -> bool:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested deeper than the reader goes
        return False
    return isinstance(doc, dict) and "version" not in doc and LEGACY_MARK in doc


def read_manifest(body: bytes) -> ManifestReading:
    """What the manifest ``body`` says the segment's ``.log`` must weigh."""
    if _is_legacy(body):
        return ManifestReading(LEGACY)
    try:
        manifest = manifest_from_json(body)
    except SegmentFormatError as exc:
        return _unreadable(exc.message)
    except TieredError as exc:  # a value the format's own types refuse (e.g. an illegal topic name in it)
        return _unreadable(f"manifest: {exc.message}")
    except (ValueError, RecursionError) as exc:  # the JSON reader's own limits: never a crash of the scan
        return _unreadable(f"manifest: {type(exc).__name__}: {exc}")
    return ManifestReading(AIVEN, transformed_size=manifest.chunk_index.transformed_file_size)
