"""The ``tieredctl`` root group: global options, the table of nouns, error translation and the entry point.

Each noun's commands live in their own module, imported only when that noun runs (click's "lazily loading
subcommands" pattern, :class:`LazyGroup`): ``tieredctl topic list`` loads neither boto3 nor the scan, and each
command module imports what it needs at its top. ``tieredctl --help`` loads them all, to list them.

The global options ``--output/-o``, ``--bootstrap-server`` and ``--command-config`` are accepted here, before the
command, and after it (see :mod:`orchestrator.cli.command`); a value given after the command wins.

Exit statuses: 0 success; 1 a request failed: any :class:`~orchestrator.errors.TieredError` a command raises
becomes :class:`RequestFailed`, printed on stderr as ``error: NAME (CODE): message. hint``; 2 a usage error
(click's own, printed with the usage line); 3 ``scan run`` found anomalies over its threshold; 4 ``tiering disable
--wait`` through Kafka's configs saw the remote data stop moving (:mod:`orchestrator.cli.tiering_kafka`).
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping
from typing import IO, Any

import click

from orchestrator import __version__
from orchestrator.cli.context import Ctx
from orchestrator.cli.options import global_options
from orchestrator.errors import TieredError
from orchestrator.logging import configure_logging

COMMANDS: Mapping[str, str] = {
    "acls": "orchestrator.cli.acls:acls",
    "broker": "orchestrator.cli.broker:broker",
    "cluster": "orchestrator.cli.local_cluster:cluster",
    "configs": "orchestrator.cli.configs:configs",
    "controller": "orchestrator.cli.controller:controller",
    "inventory": "orchestrator.cli.inventory:inventory",
    "reclaim": "orchestrator.cli.reclaim:reclaim",
    "rlmm": "orchestrator.cli.rlmm:rlmm",
    "scan": "orchestrator.cli.scan:scan",
    "tiering": "orchestrator.cli.tiering:tiering",
    "topic": "orchestrator.cli.topic:topic",
    "users": "orchestrator.cli.users:users",
}
"""Command name -> ``module:attribute`` of its click command or group."""


class RequestFailed(click.ClickException):
    """A tieredctl error, printed with its own name and hint: exit status 1 (ARCHITECTURE §8)."""

    exit_code = 1

    def __init__(self, error: TieredError) -> None:
        super().__init__(str(error))
        self.error = error

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.error}", err=True, file=file)


class LazyGroup(click.Group):
    """A group whose commands are ``module:attribute`` strings, imported when a command is first looked up."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy_commands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands:
            return self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def _load(self, cmd_name: str) -> click.Command:
        module_name, attribute = self.lazy_commands[cmd_name].split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy_commands[cmd_name]} is {command!r}, not a click command")
        return command


class TieredGroup(LazyGroup):
    """The root group: any error of ours raised by a command becomes :class:`RequestFailed`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TieredError as exc:
            raise RequestFailed(exc) from exc


@click.group(
    cls=TieredGroup,
    lazy_commands=COMMANDS,
    params=global_options(after_command=False),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="tieredctl")
@click.pass_context
def cli(ctx: click.Context, output: str, bootstrap_server: str | None, command_config: str | None) -> None:
    """Disable Kafka tiered storage per topic, safely (KIP-950), and reclaim what the bucket still holds.

    --output/-o, --bootstrap-server and --command-config may also follow the command (a value given there wins)."""
    ctx.obj = Ctx.from_global_options(output=output, bootstrap_server=bootstrap_server, command_config=command_config)


def main() -> None:
    """The ``tieredctl`` console script (and ``python -m orchestrator.cli``): logs on stderr at WARNING."""
    configure_logging("cli", level=logging.WARNING)
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
