"""``--output/-o`` and ``--bootstrap-server`` are accepted before the command and after it, a value after it
winning; every command of every noun takes them (one declaration, :class:`orchestrator.cli.command.LeafCommand`).
The same on a live cluster: ``tests/orchestrator/cli/test_newcomer.py``."""

import json

import click
import pytest
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.cli.command import LeafCommand
from orchestrator.cli.root import COMMANDS

pytestmark = pytest.mark.unit


def _leaves(command: click.Command, path: tuple[str, ...]) -> list[tuple[str, click.Command]]:
    if isinstance(command, click.Group):
        with click.Context(command) as ctx:
            children = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
        return [leaf for name, child in children if child for leaf in _leaves(child, (*path, name))]
    return [(" ".join(path), command)]


LEAVES = [leaf for name in sorted(COMMANDS) for leaf in _leaves(cli.get_command(click.Context(cli), name), (name,))]


@pytest.mark.parametrize(("name", "command"), LEAVES, ids=[name for name, _ in LEAVES])
def test_every_command_takes_the_global_options_after_its_name(name, command):
    assert isinstance(command, LeafCommand), f"'tieredctl {name}' is a {type(command).__name__}"
    result = CliRunner().invoke(cli, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert "-o, --output [text|json]" in result.output and "--bootstrap-server" in result.output


def test_the_table_covers_the_commands_a_newcomer_types_first():
    names = {name for name, _ in LEAVES}
    assert {"tiering status", "topic describe", "reclaim", "inventory build", "scan run", "cluster status"} <= names


def _purge(tmp_path, before=(), after=()):
    """``cluster down --purge`` on an empty directory: a command that answers without any cluster."""
    args = [*before, "cluster", "down", "--dir", str(tmp_path), "--purge", *after]
    return CliRunner().invoke(cli, args)


def test_output_after_the_command_is_the_same_as_before_it(tmp_path):
    before = _purge(tmp_path, before=["--output", "json"])
    after = _purge(tmp_path, after=["--output", "json"])
    short = _purge(tmp_path, after=["-o", "json"])
    for result in (before, after, short):
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["purged"] is True


def test_a_value_after_the_command_wins_over_one_before_it(tmp_path):
    json_after_text = _purge(tmp_path, before=["-o", "text"], after=["--output", "json"])
    assert json.loads(json_after_text.stdout)["dir"] == str(tmp_path)
    text_after_json = _purge(tmp_path, before=["--output", "json"], after=["-o", "text"])
    assert text_after_json.stdout.startswith("nothing was running")


def test_a_bad_value_after_the_command_is_a_usage_error_naming_the_option(tmp_path):
    result = _purge(tmp_path, after=["--output", "yaml"])
    assert result.exit_code == 2 and "'yaml' is not one of 'text', 'json'" in result.output


def test_a_command_declaring_a_global_option_itself_is_refused_when_defined():
    with pytest.raises(TypeError, match="--output"):
        LeafCommand("clash", params=[click.Option(["--output"])])
