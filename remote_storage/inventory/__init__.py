"""The AWS S3 Inventory format: read one (local or ``s3://``), and build one by listing a bucket (see
:mod:`.reader`)."""

from remote_storage.inventory.reader import (
    BAD_KEY,
    BAD_LAST_MODIFIED,
    BAD_SIZE,
    DEFAULT_MAX_EXAMPLES,
    MISSING_KEY,
    WRONG_COLUMN_COUNT,
    DataFile,
    Inventory,
    InventoryError,
    InventoryRow,
    MalformedExample,
    MalformedRows,
    Manifest,
    build_inventory,
    parquet_schema,
    parse_manifest,
    read_inventory,
    split_s3_uri,
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
    "parquet_schema",
    "parse_manifest",
    "read_inventory",
    "split_s3_uri",
]
