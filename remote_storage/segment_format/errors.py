"""The errors of Aiven's segment format: data that does not follow it, and a data key no key pair here can open.

Owner: ours (Aiven's plugin throws Java runtime exceptions; these name the same failures). Both are
:class:`~orchestrator.errors.RemoteStorageError`s, since the bytes came from the object store and are unusable
as they are; neither is retriable (reading the same bytes again gives the same answer). A value given by a caller
that cannot be used (a chunk size of 0, an unknown custom-metadata field name) is an
:class:`~orchestrator.errors.InvalidArgument` instead: nothing was read.
"""

from __future__ import annotations

from orchestrator.errors import RemoteStorageError


class SegmentFormatError(RemoteStorageError):
    """A manifest, chunk index, chunk, index or custom-metadata blob that does not follow Aiven's format, or that
    does not decrypt or decompress; the message names what and where."""

    name, retriable = "SEGMENT_FORMAT_ERROR", False


class UnknownKeyPair(SegmentFormatError):
    """A manifest's data key was wrapped with a key pair id that the key ring does not hold (or holds without its
    private key): the segment cannot be decrypted here."""

    name, retriable = "UNKNOWN_ENCRYPTION_KEY_PAIR", False
    hint = "Add the key pair the manifest names to the key ring (Aiven: encryption.key.pairs)"
