"""Aiven's remote segment format, as a pure library: the bytes Aiven's RemoteStorageManager writes and reads.

Owner: the format is Aiven's, defined by github.com/Aiven-Open/tiered-storage-for-apache-kafka at commit
:data:`SOURCE_COMMIT` (each module names the source files it follows). Nothing here does I/O: every function takes
and returns bytes, text or frozen values, and randomness (IVs, data keys) is injected.

One segment is three objects under the key layout of :mod:`remote_storage.keys`:

* ``.log``: the segment cut into chunks of ``chunk.size`` original bytes, each optionally zstd-compressed, then
  optionally AES-GCM-encrypted, concatenated (:mod:`.transform`, :mod:`.compression`, :mod:`.encryption`); the
  chunk index (:mod:`.chunk_index`) says where each transformed chunk lies, so a read GETs only the chunks it needs
  (:mod:`.range_read`).
* ``.indexes``: the five indexes a RemoteStorageManager serves, concatenated, each encrypted on its own when
  encryption is on, never compressed (:mod:`.segment_indexes`).
* ``.rsm-manifest``: ``SegmentManifestV1`` JSON (:mod:`.manifest`), with the chunk index, where each index lies in
  ``.indexes``, whether the chunks are compressed, the RSA-wrapped data key (:mod:`.key_ring`) and Kafka's
  segment metadata (:mod:`.kafka_metadata`).

:mod:`.object_set` builds the three together in memory and reads them back. Beside the objects: the custom
metadata Aiven adds to the RLMM's COPY_SEGMENT_FINISHED record (:mod:`.custom_metadata`) and the per-segment
prefix or key it can record (:mod:`.object_keys`).

The package's layers (import-linter ``segment-format-layers``, in ``pyproject.toml``): the object set > the manifest
and range reads > the ``.log`` transforms, the ``.indexes`` object, Kafka's segment metadata and object keys > the
chunk index, custom metadata, AES-GCM and the RSA key ring > the chunk-size codec > zstd and JSON text > errors.
Failures are :class:`.errors.SegmentFormatError` (bytes that do not follow the format) or
:class:`~orchestrator.errors.InvalidArgument` (a caller's value that cannot be used).
"""

SOURCE_REPOSITORY = "Aiven-Open/tiered-storage-for-apache-kafka"
SOURCE_COMMIT = "8fb15816df2d0b3f880b76e5ac0a14b64dd790d9"
