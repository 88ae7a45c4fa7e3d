"""``tieredctl controller start``: a controller process in the foreground (how the local cluster, systemd and
Kubernetes run one). It logs JSON lines on stderr and prints nothing on stdout."""

from __future__ import annotations

import click

from orchestrator.cli import options
from orchestrator.cli.command import NounGroup


@click.group(cls=NounGroup)
def controller() -> None:
    """Controller processes."""


@controller.command("start")
@options.config_file
def controller_start(config_path: str) -> None:
    """Run a controller in the foreground (one is active; the others wait as standbys)."""
    from orchestrator.controller.service import main as run_controller  # imported when run: the others start fast

    run_controller(config_path)
