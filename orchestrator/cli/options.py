"""Options that more than one command takes, each declared once, and the parsers of option values.

Where two commands differ in a default, a help text or an environment variable, that difference is a parameter of
the one declaration (e.g. ``cluster up --s3-endpoint`` names another endpoint for a new cluster and reads no
environment variable; ``scan run --s3-endpoint`` reads ``TIEREDCTL_S3_ENDPOINT``). A bad value is a usage error
(exit status 2) naming the option.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from orchestrator.cli.context import DEFAULT_CLUSTER_DIR
from orchestrator.durations import parse_duration
from orchestrator.errors import TieredError

F = TypeVar("F", bound=Callable[..., Any])

S3_ENDPOINT_ENV = "TIEREDCTL_S3_ENDPOINT"

config_file = click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False))
"""``--config FILE``: the TOML settings of a controller or broker process."""


def local_cluster_dir(flag: str, *, help: str | None = None) -> Callable[[F], F]:
    """The directory of a local cluster (``tieredctl cluster up --dir``), passed to the command as ``cluster_dir``."""
    default = str(DEFAULT_CLUSTER_DIR)
    return click.option(flag, "cluster_dir", default=default, show_default=True, type=click.Path(), help=help)


def s3_endpoint(*, help: str, envvar: str | None = S3_ENDPOINT_ENV) -> Callable[[F], F]:
    """``--s3-endpoint URL``; ``envvar=None`` for a command that must not pick up the environment's endpoint."""
    return click.option("--s3-endpoint", envvar=envvar, default=None, help=help)


def bucket(*, help: str | None, default: str | None = None) -> Callable[[F], F]:
    """``--bucket NAME``; without a ``default`` the command finds one (the local cluster's, the scan's)."""
    return click.option("--bucket", default=default, show_default=default is not None, help=help)


def metadata_store(*, help: str) -> Callable[[F], F]:
    """``--metadata-store PATH``: an existing SQLite metadata store file, passed as a :class:`Path`."""
    store = click.Path(dir_okay=False, exists=True, path_type=Path)
    return click.option("--metadata-store", default=None, type=store, help=help)


def bucket_location(fn: F) -> F:
    """``--bucket``, ``--prefix``, ``--s3-endpoint`` and ``--cluster-dir``: where the bucket of tiered storage is
    (see :class:`orchestrator.cli.bucket.BucketTarget`), in this order in ``--help``."""
    options = [
        bucket(help="default: the local cluster's bucket"),
        click.option("--prefix", default=None, help="key prefix of tiered storage (default: the cluster's)"),
        s3_endpoint(help="MinIO/Ceph/moto URL (default: the local cluster's, else AWS)"),
        local_cluster_dir("--cluster-dir", help="a local cluster to take the defaults from"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def parse_duration_ms(_ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Option callback: ``72h``, ``30m``, ``3d``, ``0s`` -> milliseconds (None stays None)."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except TieredError as exc:
        raise click.BadParameter(exc.message, param=param) from exc


def parse_key_values(pairs: tuple[str, ...], *, option: str) -> dict[str, str]:
    """``("a=1", "b = 2")`` -> ``{"a": "1", "b": "2"}``; a pair without ``=`` or key is a usage error."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not key=value", param_hint=option)
        parsed[key.strip()] = value.strip()
    return parsed
