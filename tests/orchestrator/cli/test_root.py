"""The root group: every noun loads when asked for, and only its own module comes with it."""

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.cli.root import COMMANDS
from tests.support import REPO_ROOT


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_noun_loads_as_a_click_command_and_shows_its_help(name):
    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, name)
    assert isinstance(command, click.Command) and command.name == name
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0 and f"Usage: cli {name}" in result.output


@pytest.mark.unit
def test_the_root_help_lists_every_noun():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert all(f"  {name} " in result.output for name in COMMANDS)


# What a command that talks to the cluster never needs, each imported by the commands that do: the S3 client, the
# scan (Spark's driver, the report's templates), reclaim, the processes' own code (broker agent, controller), the
# local cluster's process control and certificates, PostgreSQL's driver (a postgresql:// store only) and SCRAM's
# library (an exchange only), and the store probe with the store's code (a request that went unanswered only).
# Together they were two thirds of tieredctl's start-up.
NOT_LOADED_BY_A_TOPIC_COMMAND = (
    "boto3",
    "botocore",
    "remote_storage.s3",
    "remote_storage.scan.job",
    "jinja2",
    "policies.reclaim",
    "orchestrator.broker.agent",
    "orchestrator.controller.service",
    "orchestrator.local.cluster",
    "cryptography.x509",
    "psycopg",
    "scramp",
    "orchestrator.local.store_probe",
    "orchestrator.metadata.sqlite.store",
)


@pytest.mark.integration
def test_a_topic_command_does_not_load_the_object_store_client_or_the_scan():
    probe = (
        "import sys; from orchestrator.cli import cli; from click.testing import CliRunner; "
        "CliRunner().invoke(cli, ['topic', 'list', '--help']); "
        f"print(sorted(m for m in {NOT_LOADED_BY_A_TOPIC_COMMAND!r} if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# What a broker or controller process (``tieredctl broker|controller start``) never needs: the CLI's views and
# renderers and the admin client they know, loaded by the commands that show a result. Every process of a cluster
# once loaded them too, about 0.08 s of CPU each at start-up here.
NOT_LOADED_BY_A_PROCESS = (
    "orchestrator.client",
    "orchestrator.cli.views",
    "orchestrator.cli.render_text",
    "orchestrator.cli.render_json",
)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("noun", "module"), [("broker", "orchestrator.broker.agent"), ("controller", "orchestrator.controller.service")]
)
def test_a_broker_or_controller_process_does_not_load_the_clis_views_or_client(noun, module):
    probe = (
        "import sys; from orchestrator.cli import cli; from click.testing import CliRunner; "
        f"CliRunner().invoke(cli, [{noun!r}, 'start', '--help']); import {module}; "
        f"print(sorted(m for m in {NOT_LOADED_BY_A_PROCESS!r} if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
