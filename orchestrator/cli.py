"""``tieredctl``: the ops CLI (DESIGN §8). Commands grow with later work; every one exits 0 on success, 1 when a
request failed (stderr names the error code and what to do) and 2 on a usage error."""

from __future__ import annotations

import sys

import click

from orchestrator import __version__
from orchestrator.errors import KafkaError
from orchestrator.ids import Uuid, validate_topic_name


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tieredctl")
def cli() -> None:
    """Disable Kafka tiered storage per topic, safely (KIP-950), and reclaim what the bucket still holds."""


@cli.group()
def ids() -> None:
    """KIP-516 topic ids and topic names."""


@ids.command("new")
def ids_new() -> None:
    """Print a fresh random topic id."""
    click.echo(str(Uuid.random()))


@ids.command("check-name")
@click.argument("name")
def ids_check_name(name: str) -> None:
    """Check NAME against Kafka's topic-name rules."""
    validate_topic_name(name)
    click.echo(f"'{name}' is a legal topic name")


def main() -> None:
    try:
        cli(standalone_mode=True)
    except KafkaError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
