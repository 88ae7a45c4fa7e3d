"""Aiven's remote segment format, as a pure library: the bytes Aiven's RemoteStorageManager writes and reads.

Owner: the format is Aiven's, defined by github.com/Aiven-Open/tiered-storage-for-apache-kafka at commit
:data:`SOURCE_COMMIT` (each module names the source files it follows). Nothing here does I/O: every function takes
and returns bytes, text or frozen values, and randomness (IVs, data keys) is injected.

One segment is three objects under the key layout of :mod:`remote_storage.keys`. The ``.log`` object is the segment
cut into chunks of ``chunk.size`` original bytes, each optionally zstd-compressed, then optionally AES-GCM-encrypted,
concatenated (:mod:`.transform`, :mod:`.compression`, :mod:`.encryption`); the chunk index (:mod:`.chunk_index`)
says where each transformed chunk lies, so a read GETs only the chunks it needs (:mod:`.range_read`); the data key
is wrapped with an RSA key pair of a key ring (:mod:`.key_ring`).

The package's layers (import-linter ``segment-format-layers``, in ``pyproject.toml``): range reads > the ``.log``
transforms > the chunk index, AES-GCM and the RSA key ring > the chunk-size codec > zstd and JSON text > errors.
Failures are :class:`.errors.SegmentFormatError` (bytes that do not follow the format) or
:class:`~orchestrator.errors.InvalidArgument` (a caller's value that cannot be used).
"""

SOURCE_REPOSITORY = "Aiven-Open/tiered-storage-for-apache-kafka"
SOURCE_COMMIT = "8fb15816df2d0b3f880b76e5ac0a14b64dd790d9"
