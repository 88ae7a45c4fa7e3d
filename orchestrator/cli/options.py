"""Options that more than one command takes, each declared once, and the parsers of option values.

The global options (``--output/-o``, ``--bootstrap-server``, ``--command-config``) are accepted before the command,
by the root group, and after it, by every leaf command (:class:`orchestrator.cli.command.LeafCommand`), as kubectl
and the AWS CLI do: one declaration, :func:`global_options`, for both places. A value given after the command wins.

Where two commands differ in a default, a help text or an environment variable, that difference is a parameter of
the one declaration (e.g. ``cluster up --s3-endpoint`` names another endpoint for a new cluster and reads no
environment variable; ``scan run --s3-endpoint`` reads ``TIEREDCTL_S3_ENDPOINT``). A bad value is a usage error
(exit status 2) naming the option.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from orchestrator.cli.context import DEFAULT_CLUSTER_DIR, Ctx
from orchestrator.cli.output import OUTPUT_FORMATS
from orchestrator.durations import parse_duration
from orchestrator.errors import TieredError

F = TypeVar("F", bound=Callable[..., Any])

S3_ENDPOINT_ENV = "TIEREDCTL_S3_ENDPOINT"
BOOTSTRAP_SERVER_ENV = "TIEREDCTL_BOOTSTRAP_SERVER"
COMMAND_CONFIG_ENV = "TIEREDCTL_COMMAND_CONFIG"


def _given_after_the_command(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """A global option given after the command replaces, for this command, the value given before it (or its
    default): the root group made ``ctx.obj`` from those."""
    if value is None:
        return
    before = ctx.obj if isinstance(ctx.obj, Ctx) else Ctx.from_global_options()
    ctx.obj = before.with_global_options(**{str(param.name): value})


def global_options(*, after_command: bool) -> list[click.Option]:
    """``--output/-o``, ``--bootstrap-server`` and ``--command-config``. Before the command (the root group) they
    carry the defaults (``text``; ``TIEREDCTL_BOOTSTRAP_SERVER``) and reach the root's callback; after it (every
    leaf command) they have no default, no environment variable and no parameter of the command's own: a value
    given there replaces the one in the command's context object, so the order of precedence is after > before >
    environment > default."""
    output_help = "text for people, or one JSON document on stdout"
    bootstrap_help = "host:port[,host:port] of the controllers"
    command_config_help = (
        "a Kafka client properties file (security.protocol, ssl.*, sasl.*; librdkafka's names) saying how to "
        "connect; default: the local cluster's client.properties when talking to the local cluster"
    )
    command_config_type = click.Path(exists=True, dir_okay=False)
    if not after_command:
        return [
            click.Option(
                ["--output", "-o"],
                type=click.Choice(OUTPUT_FORMATS),
                default="text",
                show_default=True,
                help=output_help,
            ),
            click.Option(["--bootstrap-server"], envvar=BOOTSTRAP_SERVER_ENV, help=bootstrap_help),
            click.Option(
                ["--command-config"], envvar=COMMAND_CONFIG_ENV, type=command_config_type, help=command_config_help
            ),
        ]

    def after(flags: list[str], **attrs: Any) -> click.Option:
        return click.Option(flags, default=None, expose_value=False, callback=_given_after_the_command, **attrs)

    return [
        after(["--output", "-o"], type=click.Choice(OUTPUT_FORMATS), help=output_help),
        after(["--bootstrap-server"], help=bootstrap_help),
        after(["--command-config"], type=command_config_type, help=command_config_help),
    ]


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
    """``--metadata-store PATH|URL``: a SQLite store file or a ``postgresql://`` URL (its password from
    ``$TIEREDCTL_STORE_PASSWORD`` or libpq's sources), passed as given; a missing file is refused when opened."""
    return click.option("--metadata-store", default=None, metavar="PATH|URL", help=help)


def _bucket_location(fn: F, *, defaults_from: str) -> F:
    options = [
        bucket(help=f"default: {defaults_from} bucket"),
        click.option("--prefix", default=None, help=f"key prefix of tiered storage (default: {defaults_from})"),
        s3_endpoint(help="MinIO/Ceph/moto URL (default: the local cluster's, else AWS)"),
        local_cluster_dir("--cluster-dir", help="a local cluster to take the defaults from"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def bucket_location(fn: F) -> F:
    """``--bucket``, ``--prefix``, ``--s3-endpoint`` and ``--cluster-dir``: where the bucket of tiered storage is
    (see :class:`orchestrator.cli.bucket.BucketTarget`), in this order in ``--help``."""
    return _bucket_location(fn, defaults_from="the local cluster's")


def scanned_bucket_location(fn: F) -> F:
    """:func:`bucket_location` for a command that acts on a scan's output (``reclaim``): the bucket and prefix
    default to those the scan was of, and the local cluster supplies the rest."""
    return _bucket_location(fn, defaults_from="the scan's")


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
