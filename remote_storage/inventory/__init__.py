"""The AWS S3 Inventory format: read one (local or ``s3://``), and build one by listing a bucket.

An inventory is a ``manifest.json`` (``sourceBucket``, ``destinationBucket``, ``fileFormat`` CSV or Parquet,
``fileSchema``, ``creationTimestamp`` in epoch milliseconds as a string, ``files`` each with ``key``, ``size`` and
``MD5checksum``) plus the data files it lists, gzip CSV without a header or Parquet, one row per object. A data
file's ``key`` is relative to the destination bucket's root.

The package in layers, each module importing only those above it in this list:

* :mod:`.manifest`: the manifest, its schema constants, the MD5 check of a data file and :class:`InventoryError`.
* :mod:`.location`: where the files live (local directory tree or ``s3://``) and how they are read, verified.
* :mod:`.reader`: :func:`read_inventory` opens and verifies an inventory; :class:`Inventory` streams its rows and
  counts malformed ones under stable reasons.
* :mod:`.builder`: :func:`build_inventory` lists a bucket through the storage layer and writes an inventory.

Each module's docstring states the invariants it keeps. This module names the public API; import from here.
"""

from remote_storage.inventory.builder import build_inventory, covering_prefixes, parquet_schema
from remote_storage.inventory.location import split_s3_uri
from remote_storage.inventory.manifest import DataFile, InventoryError, Manifest, parse_manifest
from remote_storage.inventory.reader import (
    BAD_KEY,
    BAD_LAST_MODIFIED,
    BAD_SIZE,
    DEFAULT_MAX_EXAMPLES,
    MISSING_KEY,
    WRONG_COLUMN_COUNT,
    Inventory,
    InventoryRow,
    MalformedExample,
    MalformedRows,
    read_inventory,
)

__all__ = [
    "BAD_KEY",
    "BAD_LAST_MODIFIED",
    "BAD_SIZE",
    "DEFAULT_MAX_EXAMPLES",
    "MISSING_KEY",
    "WRONG_COLUMN_COUNT",
    "DataFile",
    "Inventory",
    "InventoryError",
    "InventoryRow",
    "MalformedExample",
    "MalformedRows",
    "Manifest",
    "build_inventory",
    "covering_prefixes",
    "parquet_schema",
    "parse_manifest",
    "read_inventory",
    "split_s3_uri",
]
