"""``tieredctl``: the ops CLI (DESIGN §8).

Every command exits 0 on success, 1 when a request failed (stderr names the Kafka error and what to do) and 2 on
a usage error (click's own). ``--output json`` prints machine-readable JSON on stdout; text is for people.
``--bootstrap-server`` (or ``TIEREDCTL_BOOTSTRAP_SERVER``) is a Kafka-style list of controller addresses.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator import __version__
from orchestrator.errors import KafkaError, RequestTimedOut
from orchestrator.ops import Cluster

T = TypeVar("T")

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


# -- cluster operations over the Kafka protocol ------------------------------------------------------------------


def _bootstrap(obj: Ctx) -> str:
    """--bootstrap-server, TIEREDCTL_BOOTSTRAP_SERVER, or the local cluster in the default directory."""
    if obj.bootstrap:
        return obj.bootstrap
    state = DEFAULT_CLUSTER_DIR / "cluster.json"
    if state.exists():
        return str(json.loads(state.read_text())["bootstrap_server"])
    raise click.UsageError(
        "no cluster to talk to: pass --bootstrap-server HOST:PORT, set TIEREDCTL_BOOTSTRAP_SERVER, "
        "or start a local cluster with 'tieredctl cluster up'"
    )


def _run(obj: Ctx, fn: Callable[[Cluster], Coroutine[Any, Any, T]], timeout_s: float = 30.0) -> T:
    async def go() -> T:
        async with Cluster(_bootstrap(obj), timeout_s=timeout_s) as c:
            return await fn(c)

    return asyncio.run(go())


def _parse_kv(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not key=value", param_hint=what)
        out[key.strip()] = value.strip()
    return out


STATE_STYLE = {"ENABLED": "green", "DISABLING": "yellow", "DISABLED": "cyan", "NOT_TIERED": "dim"}


@cli.group()
def topic() -> None:
    """Create, inspect, delete topics; produce and consume records."""


@topic.command("create")
@click.argument("name")
@click.option("--partitions", default=1, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--replication-factor", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="a topic config, repeatable")
@click.pass_obj
def topic_create(obj: Ctx, name: str, partitions: int, replication_factor: int, configs: tuple[str, ...]) -> None:
    """Create topic NAME (tiering on with --config remote.storage.enable=true)."""
    cfg = _parse_kv(configs, "--config")
    tid = _run(obj, lambda c: c.create_topic(name, partitions=partitions, replication_factor=replication_factor,
                                             configs=cfg))  # fmt: skip
    obj.emit({"topic": name, "topic_id": str(tid), "partitions": partitions}, f"created topic {name} ({tid})")


@topic.command("list")
@click.pass_obj
def topic_list(obj: Ctx) -> None:
    """Every topic with its id, partitions and tiered state."""
    statuses = _run(obj, lambda c: c.tiering_status())
    rows = [s.as_json() for s in statuses]
    if obj.output == "json":
        obj.emit(rows, "")
        return
    table = Table("topic", "topic id", "partitions", "tiered state", "epoch")
    for s in statuses:
        table.add_row(s.topic, str(s.topic_id), str(s.partition_count),
                      f"[{STATE_STYLE[s.state.name]}]{s.state.name}[/]", str(s.tiered_epoch))  # fmt: skip
    Console().print(table if statuses else "no topics")


@topic.command("describe")
@click.argument("name")
@click.pass_obj
def topic_describe(obj: Ctx, name: str) -> None:
    """Partitions (leader, replicas, ISR), configs and tiered state of topic NAME."""

    async def go(c: Cluster) -> tuple[dict[str, Any], dict[str, str | None], Any]:
        return await c.topic(name), await c.describe_configs(name), (await c.tiering_status([name]))[0]

    t, configs, st = _run(obj, go)
    parts = [{"partition": p["partition_index"], "leader": p["leader_id"], "replicas": p["replica_nodes"],
              "isr": p["isr_nodes"]} for p in sorted(t["partitions"], key=lambda p: p["partition_index"])]  # fmt: skip
    data = {**st.as_json(), "partitions": parts, "configs": configs}
    lines = [f"topic {name}  id {st.topic_id}  tiered {st.state.name} (epoch {st.tiered_epoch})"]
    lines += [
        f"  partition {p['partition']}: leader {p['leader']} replicas {p['replicas']} isr {p['isr']}" for p in parts
    ]
    lines += [f"  {k} = {v}" for k, v in sorted(configs.items())]
    obj.emit(data, "\n".join(lines))


@topic.command("delete")
@click.argument("name")
@click.pass_obj
def topic_delete(obj: Ctx, name: str) -> None:
    """Delete topic NAME (its remote data becomes orphaned; 'tieredctl scan' finds it, 'reclaim' removes it)."""
    _run(obj, lambda c: c.delete_topic(name))
    obj.emit({"topic": name, "deleted": True}, f"deleted topic {name}")


@topic.command("add-partitions")
@click.argument("name")
@click.option("--total", required=True, type=click.IntRange(1, 10_000), help="the new partition count")
@click.pass_obj
def topic_add_partitions(obj: Ctx, name: str, total: int) -> None:
    """Grow topic NAME to --total partitions (new ones inherit its tiered state)."""
    _run(obj, lambda c: c.add_partitions(name, total))
    obj.emit({"topic": name, "partitions": total}, f"topic {name} now has {total} partitions")


@topic.command("produce")
@click.argument("name")
@click.option("--records", required=True, type=click.IntRange(1, 10_000_000))
@click.option("--record-size", default=100, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 10_000), help="records per request")
@click.pass_obj
def topic_produce(obj: Ctx, name: str, records: int, record_size: int, batch: int) -> None:
    """Produce --records synthetic records to NAME, spread over its partitions."""

    async def go(c: Cluster) -> dict[int, tuple[int, int]]:
        parts = sorted(p["partition_index"] for p in (await c.topic(name))["partitions"])
        ranges: dict[int, tuple[int, int]] = {}
        sent = 0
        with Progress(TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      disable=obj.output == "json", console=Console(stderr=True)) as bar:  # fmt: skip
            task = bar.add_task("produce", total=records)
            i = 0
            while sent < records:
                n = min(batch, records - sent)
                p = parts[i % len(parts)]
                values = [f"{name}-{sent + k}:".encode().ljust(record_size, b".")[:record_size] for k in range(n)]
                first, last = await c.produce(name, values, partition=p)
                lo, _ = ranges.get(p, (first, last))
                ranges[p] = (lo, last)
                sent += n
                i += 1
                bar.update(task, completed=sent)
        return ranges

    ranges = _run(obj, go, timeout_s=60)
    obj.emit({"topic": name, "records": records, "partitions": {str(p): list(r) for p, r in ranges.items()}},
             f"produced {records} records to {name} ({len(ranges)} partitions)")  # fmt: skip


@topic.command("consume")
@click.argument("name")
@click.option("--from-beginning", is_flag=True, help="start at the log start offset (reads across tiers)")
@click.option("--max-records", default=None, type=click.IntRange(1, None))
@click.option("--partition", "partitions", multiple=True, type=int, help="only these partitions (repeatable)")
@click.pass_obj
def topic_consume(
    obj: Ctx, name: str, from_beginning: bool, max_records: int | None, partitions: tuple[int, ...]
) -> None:
    """Read NAME's records up to the current end; says how many came from remote storage."""

    async def go(c: Cluster) -> dict[str, Any]:
        parts = sorted(p["partition_index"] for p in (await c.topic(name))["partitions"])
        wanted = [p for p in parts if not partitions or p in partitions]
        total = remote = 0
        per: dict[str, dict[str, int]] = {}
        for p in wanted:
            first = last = -1
            n = r = 0
            left = None if max_records is None else max_records - total
            if left is not None and left <= 0:
                break
            async for rec in c.consume(name, p, from_beginning=from_beginning, max_records=left):
                if obj.output == "text" and total + n < 20:
                    click.echo(f"{p}:{rec.offset} {'remote' if rec.remote else 'local '} {rec.value[:60]!r}")
                first = rec.offset if first < 0 else first
                last = rec.offset
                n += 1
                r += rec.remote
            per[str(p)] = {"records": n, "remote": r, "first_offset": first, "last_offset": last}
            total += n
            remote += r
        return {"topic": name, "records": total, "remote_records": remote, "partitions": per}

    data = _run(obj, go, timeout_s=60)
    obj.emit(
        data, f"consumed {data['records']} records from {name} ({data['remote_records']} read from remote storage)"
    )


# -- tiering -----------------------------------------------------------------------------------------------------


@cli.group()
def tiering() -> None:
    """KIP-950: disable and re-enable tiered storage per topic, and watch it happen."""


def _status_rows(statuses: list[Any]) -> Table:
    table = Table("topic", "state", "epoch", "policy", "pending brokers (attempts, last error)")
    for s in statuses:
        pending = "; ".join(
            f"{p.broker_id}{' fenced' if p.fenced else ''}{' STALLED' if p.stalled else ''} ({p.attempts}"
            f"{', ' + p.last_error if p.last_error else ''})"
            for p in s.pending_brokers
        )
        policy = s.policy.name.lower() if s.policy.value else "-"
        table.add_row(s.topic, f"[{STATE_STYLE[s.state.name]}]{s.state.name}[/]", str(s.tiered_epoch), policy,
                      pending or "-")  # fmt: skip
    return table


def _wait_for(obj: Ctx, name: str, target: str, timeout: float) -> Any:
    """Poll DescribeTieredState with a live progress bar until NAME reaches ``target`` or the timeout."""

    async def go(c: Cluster) -> Any:
        deadline = time.monotonic() + timeout
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[extra]}"), TimeElapsedColumn())  # fmt: skip
        with Progress(*columns, disable=obj.output == "json", console=Console(stderr=True)) as bar:
            task = bar.add_task(f"{name}: brokers acknowledged", total=None, extra="")
            while True:
                st = (await c.tiering_status([name]))[0]
                required = st.acknowledged_brokers + len(st.pending_brokers)
                extra = f"segments deleted {st.segments_deleted}" + (
                    f", {st.segments_remaining} to go" if st.segments_remaining else "")  # fmt: skip
                bar.update(task, completed=st.acknowledged_brokers, total=max(required, 1), extra=extra)
                if st.state.name == target:
                    bar.update(task, completed=max(required, 1))
                    return st
                if time.monotonic() > deadline:
                    return st
                await asyncio.sleep(0.25)

    return _run(obj, go, timeout_s=30)


@tiering.command("disable")
@click.argument("name")
@click.option("--policy", type=click.Choice(["retain", "delete"]), default="retain", show_default=True,
              help="retain: remote data stays readable until retention; delete: remove it all now")  # fmt: skip
@click.option("--wait", is_flag=True, help="show progress and return when DISABLED (or at the timeout)")
@click.option(
    "--timeout", default=300.0, show_default=True, type=click.FloatRange(0.1, None), help="seconds, with --wait"
)
@click.pass_obj
def tiering_disable(obj: Ctx, name: str, policy: str, wait: bool, timeout: float) -> None:
    """Disable tiered storage on NAME (ENABLED -> DISABLING, epoch+1; DISABLED once every broker acknowledged)."""
    _run(obj, lambda c: c.disable_tiering(name, policy))
    if not wait:
        st = _run(obj, lambda c: c.tiering_status([name]))[0]
        obj.emit(st.as_json(), f"{name}: {st.state.name} at tiered epoch {st.tiered_epoch} (policy {policy})")
        return
    st = _wait_for(obj, name, "DISABLED", timeout)
    _finish_wait(obj, st, "DISABLED", timeout)


def _finish_wait(obj: Ctx, st: Any, target: str, timeout: float) -> None:
    if st.state.name == target:
        obj.emit(st.as_json(), f"{st.topic}: {target} at tiered epoch {st.tiered_epoch}")
        return
    if obj.output == "json":
        click.echo(json.dumps(st.as_json(), indent=2))
    else:
        Console(stderr=True).print(_status_rows([st]))
    pending = ", ".join(f"broker {p.broker_id}: {p.last_error or 'no answer yet'}" for p in st.pending_brokers)
    raise RequestTimedOut(
        f"{st.topic} is still {st.state.name} after {timeout:g}s; pending {pending or 'none'}. It keeps going in the "
        "background; follow it with 'tieredctl tiering status' (a dead broker can be removed with "
        "'tieredctl broker decommission ID')"
    )


@tiering.command("enable")
@click.argument("name")
@click.option("--wait", is_flag=True, help="return once the topic is ENABLED")
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(0.1, None))
@click.pass_obj
def tiering_enable(obj: Ctx, name: str, wait: bool, timeout: float) -> None:
    """Re-enable tiered storage on NAME (DISABLED -> ENABLED, epoch+1)."""
    _run(obj, lambda c: c.enable_tiering(name))
    st = _wait_for(obj, name, "ENABLED", timeout) if wait else _run(obj, lambda c: c.tiering_status([name]))[0]
    if wait:
        _finish_wait(obj, st, "ENABLED", timeout)
    else:
        obj.emit(st.as_json(), f"{name}: {st.state.name} at tiered epoch {st.tiered_epoch}")


@tiering.command("status")
@click.argument("name", required=False)
@click.pass_obj
def tiering_status(obj: Ctx, name: str | None) -> None:
    """State, tiered epoch, policy and pending brokers (attempts, last error, fenced) of one or every topic."""
    statuses = _run(obj, lambda c: c.tiering_status(None if name is None else [name]))
    if obj.output == "json":
        obj.emit([s.as_json() for s in statuses], "")
    else:
        Console().print(_status_rows(statuses) if statuses else "no topics")


# -- configs and brokers -----------------------------------------------------------------------------------------


@cli.group()
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
    kv = _parse_kv(sets, "--set")
    _run(obj, lambda c: c.alter_configs(name, kv, list(deletes)))
    obj.emit({"topic": name, "set": kv, "deleted": list(deletes)}, f"altered configs of {name}")


@configs.command("describe")
@click.argument("name")
@click.pass_obj
def configs_describe(obj: Ctx, name: str) -> None:
    """Every config of topic NAME."""
    cfg = _run(obj, lambda c: c.describe_configs(name))
    obj.emit(cfg, "\n".join(f"{k} = {v}" for k, v in sorted(cfg.items())))


@broker.command("list")
@click.pass_obj
def broker_list(obj: Ctx) -> None:
    """Live (unfenced) brokers and the controllers, with the active controller marked."""
    md = _run(obj, lambda c: c.metadata([]))
    rows = [{"node_id": b["node_id"], "host": b["host"], "port": b["port"],
             "controller": b["node_id"] == md["controller_id"]} for b in md["brokers"]]  # fmt: skip
    lines = [f"{r['node_id']:>5}  {r['host']}:{r['port']}" + ("  (active controller)" if r["controller"] else "")
             for r in rows]  # fmt: skip
    obj.emit(rows, "\n".join(lines))


@broker.command("decommission")
@click.argument("broker_id", type=int)
@click.pass_obj
def broker_decommission(obj: Ctx, broker_id: int) -> None:
    """Remove a dead broker for good: it leaves every pending disablement (UnregisterBroker)."""
    _run(obj, lambda c: c.decommission_broker(broker_id))
    obj.emit({"broker_id": broker_id, "decommissioned": True}, f"decommissioned broker {broker_id}")


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
