"""``tieredctl configs``: alter and describe topic configs (IncrementalAlterConfigs / DescribeConfigs).

Changing ``remote.storage.enable`` or ``remote.log.disable.policy`` here starts the same disablement as
``tieredctl tiering disable`` (the Kafka 3.9 keys are accepted as aliases).
"""

from __future__ import annotations

import click

from orchestrator.cli.command import NounGroup
from orchestrator.cli.context import Ctx
from orchestrator.cli.options import parse_key_values
from orchestrator.cli.views import Message, TopicConfigs


@click.group(cls=NounGroup)
def configs() -> None:
    """Topic configs (IncrementalAlterConfigs / DescribeConfigs)."""


@configs.command("alter")
@click.argument("name")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="repeatable")
@click.option("--delete", "deletes", multiple=True, metavar="KEY", help="reset KEY to its default, repeatable")
@click.pass_obj
def configs_alter(obj: Ctx, name: str, sets: tuple[str, ...], deletes: tuple[str, ...]) -> None:
    """Change configs of topic NAME (the Kafka 3.9 tiering keys are accepted as aliases)."""
    if not sets and not deletes:
        raise click.UsageError("nothing to change: give --set KEY=VALUE or --delete KEY")
    kv = parse_key_values(sets, option="--set")
    obj.run(lambda c: c.alter_configs(name, kv, list(deletes)))
    obj.output.show(Message({"topic": name, "set": kv, "deleted": list(deletes)}, f"altered configs of {name}"))


@configs.command("describe")
@click.argument("name")
@click.pass_obj
def configs_describe(obj: Ctx, name: str) -> None:
    """Every config of topic NAME."""
    obj.output.show(TopicConfigs(obj.run(lambda c: c.describe_configs(name))))
