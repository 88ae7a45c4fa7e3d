"""``tieredctl``: the ops CLI (DESIGN §8).

Every command exits 0 on success, 1 when a request failed (stderr names the Kafka error and what to do) and 2 on
a usage error (click's own). ``--output json`` prints machine-readable JSON on stdout; text is for people.
``--bootstrap-server`` (or ``TIEREDCTL_BOOTSTRAP_SERVER``) is a Kafka-style list of controller addresses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from orchestrator import __version__
from orchestrator.errors import KafkaError

DEFAULT_CLUSTER_DIR = Path("./var/cluster")


class Ctx:
    def __init__(self, output: str, bootstrap: str | None) -> None:
        self.output = output
        self.bootstrap = bootstrap

    def emit(self, data: Any, text: str) -> None:
        if self.output == "json":
            click.echo(json.dumps(data, indent=2, default=str))
        else:
            click.echo(text)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tieredctl")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--bootstrap-server", envvar="TIEREDCTL_BOOTSTRAP_SERVER", help="host:port[,host:port] of the controllers"
)
@click.pass_context
def cli(ctx: click.Context, output: str, bootstrap_server: str | None) -> None:
    """Disable Kafka tiered storage per topic, safely (KIP-950), and reclaim what the bucket still holds."""
    ctx.obj = Ctx(output, bootstrap_server)


# -- processes ---------------------------------------------------------------------------------------------------


@cli.group()
def controller() -> None:
    """Controller processes."""


@controller.command("start")
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False))
def controller_start(config_path: str) -> None:
    """Run a controller in the foreground (one is active; the others wait as standbys)."""
    from orchestrator.controller.service import main as run_controller

    run_controller(config_path)


@cli.group()
def broker() -> None:
    """Broker agents."""


@broker.command("start")
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False))
def broker_start(config_path: str) -> None:
    """Run a broker agent in the foreground."""
    from orchestrator.broker.agent import main as run_broker

    run_broker(config_path)


# -- the local cluster -------------------------------------------------------------------------------------------


@cli.group()
def cluster() -> None:
    """A local cluster: embedded S3, the SQLite store, controllers and brokers as separate processes."""


@cluster.command("up")
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 64))
@click.option("--controllers", default=2, show_default=True, type=click.IntRange(1, 9))
@click.option("--dir", "directory", default=str(DEFAULT_CLUSTER_DIR), show_default=True, type=click.Path())
@click.option("--s3-endpoint", default=None, help="use this S3 endpoint (MinIO, AWS) instead of the embedded one")
@click.option("--bucket", default="tiered-storage", show_default=True)
@click.pass_obj
def cluster_up(obj: Ctx, brokers: int, controllers: int, directory: str, s3_endpoint: str | None, bucket: str) -> None:
    """Start a local cluster in the background and wait until it is healthy."""
    from orchestrator.local import cluster as lc

    say = (lambda m: click.echo(m, err=True)) if obj.output == "text" else (lambda m: None)
    state = lc.up(Path(directory), brokers=brokers, controllers=controllers, s3_endpoint=s3_endpoint, bucket=bucket,
                  progress=say)  # fmt: skip
    obj.emit(
        {"bootstrap_server": state.bootstrap_server, "s3_endpoint": state.s3_endpoint, "bucket": state.bucket,
         "dir": state.dir},
        f"bootstrap server: {state.bootstrap_server}\nS3 endpoint:      {state.s3_endpoint}\n"
        f"bucket:           {state.bucket}\nexport TIEREDCTL_BOOTSTRAP_SERVER={state.bootstrap_server}",
    )  # fmt: skip


@cluster.command("down")
@click.option("--dir", "directory", default=str(DEFAULT_CLUSTER_DIR), show_default=True, type=click.Path())
@click.pass_obj
def cluster_down(obj: Ctx, directory: str) -> None:
    """Stop exactly the processes of the local cluster in DIR."""
    from orchestrator.local import cluster as lc

    stopped = lc.down(Path(directory))
    obj.emit([{"role": p.role, "id": p.id, "pid": p.pid} for p in stopped],
             "\n".join(f"stopped {p.role} {p.id} (pid {p.pid})" for p in stopped) or "nothing was running")  # fmt: skip


@cluster.command("status")
@click.option("--dir", "directory", default=str(DEFAULT_CLUSTER_DIR), show_default=True, type=click.Path())
@click.pass_obj
def cluster_status(obj: Ctx, directory: str) -> None:
    """Every process of the local cluster: role, id, pid, alive, and which controller is active."""
    from orchestrator.local import cluster as lc

    st = lc.status(Path(directory))
    lines = [f"bootstrap server {st['bootstrap_server']}  S3 {st['s3_endpoint']}  bucket {st['bucket']}"]
    for p in st["processes"]:
        extra = " (active)" if p.get("active") else ""
        lines.append(f"{p['role']:<10} {p['id']:>5}  pid {p['pid']:>7}  {'alive' if p['alive'] else 'DEAD '}{extra}")
    obj.emit(st, "\n".join(lines))


def main() -> None:
    import logging

    from orchestrator.logging import configure_logging

    configure_logging("cli", level=logging.WARNING)
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KafkaError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
