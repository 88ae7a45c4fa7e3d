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
from orchestrator.client import TieredClient
from orchestrator.errors import RequestTimedOut, TieredError
from orchestrator.ids import Uuid

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


class RequestFailed(click.ClickException):
    """A tieredctl error, printed with its own name and hint: exit status 1 (DESIGN §8)."""

    exit_code = 1

    def __init__(self, error: TieredError) -> None:
        super().__init__(str(error))
        self.error = error

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.error}", err=True, file=file)


class TieredGroup(click.Group):
    """The root group: any error of ours raised by a command becomes :class:`RequestFailed`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TieredError as exc:
            raise RequestFailed(exc) from exc


@click.group(cls=TieredGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
    state = lc.up(
        Path(directory), brokers=brokers, controllers=controllers, s3_endpoint=s3_endpoint, bucket=bucket, progress=say
    )
    data = {
        "bootstrap_server": state.bootstrap_server,
        "s3_endpoint": state.s3_endpoint,
        "bucket": state.bucket,
        "dir": state.dir,
    }
    lines = [
        f"bootstrap server: {state.bootstrap_server}",
        f"S3 endpoint:      {state.s3_endpoint}",
        f"bucket:           {state.bucket}",
        f"export TIEREDCTL_BOOTSTRAP_SERVER={state.bootstrap_server}",
    ]
    obj.emit(data, "\n".join(lines))


@cluster.command("down")
@click.option("--dir", "directory", default=str(DEFAULT_CLUSTER_DIR), show_default=True, type=click.Path())
@click.pass_obj
def cluster_down(obj: Ctx, directory: str) -> None:
    """Stop exactly the processes of the local cluster in DIR."""
    from orchestrator.local import cluster as lc

    stopped = lc.down(Path(directory))
    data = [{"role": p.role, "id": p.id, "pid": p.pid} for p in stopped]
    text = "\n".join(f"stopped {p.role} {p.id} (pid {p.pid})" for p in stopped) or "nothing was running"
    obj.emit(data, text)


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


def _run(obj: Ctx, fn: Callable[[TieredClient], Coroutine[Any, Any, T]], timeout_s: float = 30.0) -> T:
    async def go() -> T:
        async with TieredClient(_bootstrap(obj), timeout_s=timeout_s) as c:
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

    async def create(c: TieredClient) -> Uuid:
        return await c.create_topic(name, partitions=partitions, replication_factor=replication_factor, configs=cfg)

    tid = _run(obj, create)
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
        state = f"[{STATE_STYLE[s.state.name]}]{s.state.name}[/]"
        table.add_row(s.topic, str(s.topic_id), str(s.partition_count), state, str(s.tiered_epoch))
    Console().print(table if statuses else "no topics")


@topic.command("describe")
@click.argument("name")
@click.pass_obj
def topic_describe(obj: Ctx, name: str) -> None:
    """Partitions (leader, replicas, ISR), configs and tiered state of topic NAME."""

    async def go(c: TieredClient) -> tuple[dict[str, Any], dict[str, str | None], Any]:
        return await c.topic(name), await c.describe_configs(name), (await c.tiering_status([name]))[0]

    t, configs, st = _run(obj, go)
    by_index = sorted(t["partitions"], key=lambda p: p["partition_index"])
    parts = [
        {
            "partition": p["partition_index"],
            "leader": p["leader_id"],
            "replicas": p["replica_nodes"],
            "isr": p["isr_nodes"],
        }
        for p in by_index
    ]
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

    async def go(c: TieredClient) -> dict[int, tuple[int, int]]:
        parts = sorted(p["partition_index"] for p in (await c.topic(name))["partitions"])
        ranges: dict[int, tuple[int, int]] = {}
        sent = 0
        columns = (TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, disable=obj.output == "json", console=Console(stderr=True)) as bar:
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
    offset_ranges = {str(p): list(r) for p, r in ranges.items()}
    data = {"topic": name, "records": records, "partitions": offset_ranges}
    obj.emit(data, f"produced {records} records to {name} ({len(ranges)} partitions)")


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

    async def go(c: TieredClient) -> dict[str, Any]:
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
        state = f"[{STATE_STYLE[s.state.name]}]{s.state.name}[/]"
        table.add_row(s.topic, state, str(s.tiered_epoch), policy, pending or "-")
    return table


def _wait_for(obj: Ctx, name: str, target: str, timeout: float) -> Any:
    """Poll DescribeTieredState with a live progress bar until NAME reaches ``target`` or the timeout."""

    async def go(c: TieredClient) -> Any:
        deadline = time.monotonic() + timeout
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[extra]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, disable=obj.output == "json", console=Console(stderr=True)) as bar:
            task = bar.add_task(f"{name}: brokers acknowledged", total=None, extra="")
            while True:
                st = (await c.tiering_status([name]))[0]
                required = st.acknowledged_brokers + len(st.pending_brokers)
                to_go = f", {st.segments_remaining} to go" if st.segments_remaining else ""
                extra = f"segments deleted {st.segments_deleted}" + to_go
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
@click.option(
    "--policy",
    type=click.Choice(["retain", "delete"]),
    default="retain",
    show_default=True,
    help="retain: remote data stays readable until retention; delete: remove it all now",
)
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
    rows = [
        {
            "node_id": b["node_id"],
            "host": b["host"],
            "port": b["port"],
            "controller": b["node_id"] == md["controller_id"],
        }
        for b in md["brokers"]
    ]
    lines = [
        f"{r['node_id']:>5}  {r['host']}:{r['port']}" + ("  (active controller)" if r["controller"] else "")
        for r in rows
    ]
    obj.emit(rows, "\n".join(lines))


@broker.command("decommission")
@click.argument("broker_id", type=int)
@click.pass_obj
def broker_decommission(obj: Ctx, broker_id: int) -> None:
    """Remove a dead broker for good: it leaves every pending disablement (UnregisterBroker)."""
    _run(obj, lambda c: c.decommission_broker(broker_id))
    obj.emit({"broker_id": broker_id, "decommissioned": True}, f"decommissioned broker {broker_id}")


# -- the bucket: inventory, scan, reclaim ------------------------------------------------------------------------


@cli.group()
def inventory() -> None:
    """Bucket inventories in the AWS S3 Inventory format."""


class BucketTarget:
    """Where the bucket is: explicit options, else the local cluster in --cluster-dir (when one was started)."""

    def __init__(self, cluster_dir: str, s3_endpoint: str | None, bucket: str | None, prefix: str | None) -> None:
        from orchestrator.local.cluster import STATE_FILE, LocalClusterState

        state = LocalClusterState.load(Path(cluster_dir)) if (Path(cluster_dir) / STATE_FILE).exists() else None
        self.cluster_dir = cluster_dir
        self.s3_endpoint = s3_endpoint or (state.s3_endpoint if state else None)
        self.prefix = prefix if prefix is not None else (state.prefix if state else "tiered/")
        self.metadata_store = Path(state.dir) / "metadata.db" if state else None
        self._bucket = bucket or (state.bucket if state else None)

    @property
    def bucket(self) -> str:
        """Asked for only by what lists or reads the bucket itself."""
        if not self._bucket:
            raise click.UsageError(
                f"which bucket? pass --bucket (no local cluster in {self.cluster_dir} to take it from)"
            )
        return self._bucket

    def client(self) -> Any:
        from remote_storage.s3 import make_s3_client

        return make_s3_client(endpoint_url=self.s3_endpoint)


def _bucket_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    endpoint_help = "MinIO/Ceph/moto URL (default: the local cluster's, else AWS)"
    cluster_dir_help = "a local cluster to take the defaults from"
    default_dir = str(DEFAULT_CLUSTER_DIR)
    options = [
        click.option("--bucket", default=None, help="default: the local cluster's bucket"),
        click.option("--prefix", default=None, help="key prefix of tiered storage (default: the cluster's)"),
        click.option("--s3-endpoint", envvar="TIEREDCTL_S3_ENDPOINT", default=None, help=endpoint_help),
        click.option("--cluster-dir", default=default_dir, show_default=True, type=click.Path(), help=cluster_dir_help),
    ]
    for opt in reversed(options):
        fn = opt(fn)
    return fn


def _duration_ms(_ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    from orchestrator.durations import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except TieredError as exc:
        raise click.BadParameter(exc.message, param=param) from exc


def _build_inventory(obj: Ctx, target: BucketTarget, dest: str, fmt: str, rows_per_file: int) -> str:
    from remote_storage.inventory import build_inventory

    client = target.client()
    listing = TextColumn(f"listing s3://{target.bucket}/{target.prefix}")
    columns = (listing, TextColumn("{task.completed:,} objects"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=obj.output != "text", transient=True) as bar:
        task = bar.add_task("list", total=None)

        def progress(n: int) -> None:
            bar.update(task, completed=n)

        now_ms = int(time.time() * 1000)
        return build_inventory(
            client,
            bucket=target.bucket,
            prefix=target.prefix,
            dest=dest,
            fmt=fmt,  # type: ignore[arg-type]
            now_ms=now_ms,
            rows_per_file=rows_per_file,
            progress=progress,
        )


@inventory.command("build")
@_bucket_options
@click.option("--dest", required=True, help="a local directory or s3://bucket/path/ for manifest.json and data/")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True)
@click.option("--rows-per-file", default=1_000_000, show_default=True, type=click.IntRange(1, None))
@click.pass_obj
def inventory_build(
    obj: Ctx,
    bucket: str | None,
    prefix: str | None,
    s3_endpoint: str | None,
    cluster_dir: str,
    dest: str,
    fmt: str,
    rows_per_file: int,
) -> None:
    """List a bucket and write an inventory in the AWS S3 Inventory format (for stores with no inventory service)."""
    target = BucketTarget(cluster_dir, s3_endpoint, bucket, prefix)
    manifest = _build_inventory(obj, target, dest, fmt, rows_per_file)
    data = {"manifest": manifest, "bucket": target.bucket, "prefix": target.prefix, "format": fmt}
    obj.emit(data, f"inventory of s3://{target.bucket}/{target.prefix} written: {manifest}")


@cli.group()
def scan() -> None:
    """The Spark scan: reclaimable bytes and anomalies, per object and per topic."""


def _show_scan(obj: Ctx, summary: dict[str, Any], report: Path | None) -> None:
    """A scan's summary: the JSON document, or the per-topic table and the report's path."""
    from remote_storage.scan.report import render_text

    if obj.output == "json":
        obj.emit(summary, "")
        return
    Console().print(render_text(summary))
    click.echo(f"report: {report}")


@scan.command("run")
@_bucket_options
@click.option(
    "--inventory",
    "inventory_uri",
    default=None,
    help="manifest.json (or its directory), local or s3://; default: build one by listing the bucket",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--export",
    "export_dir",
    default=None,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="a metadata export directory; default: export --metadata-store now",
)
@click.option(
    "--metadata-store",
    default=None,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="the SQLite metadata store (default: the local cluster's)",
)
@click.option(
    "--grace",
    "grace_ms",
    default="3d",
    show_default=True,
    callback=_duration_ms,
    help="objects younger than this are never reclaimable (longer than an upload plus the inventory lag)",
)
@click.option(
    "--max-anomalies",
    default=0,
    show_default=True,
    type=click.IntRange(0, None),
    help="exit 3 when the anomalies exceed this",
)
@click.option("--spark-master", default=None, help="default: local[2]")
@click.option("--driver-memory", default=None, help="default: 4g (local mode)")
@click.pass_obj
def scan_run(
    obj: Ctx,
    bucket: str | None,
    prefix: str | None,
    s3_endpoint: str | None,
    cluster_dir: str,
    inventory_uri: str | None,
    out_dir: Path,
    export_dir: Path | None,
    metadata_store: Path | None,
    grace_ms: int,
    max_anomalies: int,
    spark_master: str | None,
    driver_memory: str | None,
) -> None:
    """Classify every object of the bucket's inventory: reclaimable bytes and anomalies, per object and per topic.

    Writes OUT/objects.parquet, OUT/anomalies.parquet, OUT/summary.json and OUT/report.html. Exit status 3 when the
    anomalies exceed --max-anomalies (so a scheduler alerts).
    """
    from remote_storage.scan.job import ScanSettings
    from remote_storage.scan.run import export_store, scan

    def say(message: str) -> None:
        if obj.output == "text":
            click.echo(f"  {message}", err=True)

    target = BucketTarget(cluster_dir, s3_endpoint, bucket, prefix)
    if export_dir is None:
        store = metadata_store or target.metadata_store
        if store is None:
            raise click.UsageError("pass --export DIR or --metadata-store PATH (no local cluster to take it from)")
        say(f"exporting the metadata of {store}")
        export_dir = export_store(store, out_dir)
    if inventory_uri is None:
        say(f"building an inventory of s3://{target.bucket}/{target.prefix}")
        inventory_uri = _build_inventory(obj, target, str(out_dir / "inventory"), "parquet", 1_000_000)
    client = target.client() if inventory_uri.startswith("s3://") else None
    settings = ScanSettings(prefix=target.prefix, grace_ms=grace_ms, max_anomalies=max_anomalies)
    outcome = scan(
        inventory_uri=inventory_uri,
        export_dir=export_dir,
        out_dir=out_dir,
        settings=settings,
        s3_client=client,
        spark_master=spark_master,
        driver_memory=driver_memory,
        progress=say,
    )
    _show_scan(obj, outcome.summary, outcome.report)
    if obj.output == "text" and outcome.exit_status:
        anomalies = outcome.summary["alert"]["anomalies_total"]
        message = f"anomalies {anomalies} exceed the threshold {max_anomalies}: exit status {outcome.exit_status}"
        click.echo(message, err=True)
    sys.exit(outcome.exit_status)


@scan.command("report")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--max-anomaly-rows",
    default=200,
    show_default=True,
    type=click.IntRange(0, None),
    help="anomaly rows shown in the page (all are in anomalies.parquet)",
)
@click.pass_obj
def scan_report(obj: Ctx, directory: Path, max_anomaly_rows: int) -> None:
    """Re-render DIRECTORY/report.html from a scan's summary.json; print the per-topic totals."""
    from remote_storage.scan.report import write_html_report
    from remote_storage.scan.summary import load_summary

    summary = load_summary(directory)
    path = write_html_report(directory, max_anomaly_rows=max_anomaly_rows)
    _show_scan(obj, summary, path)


# -- reclaim -----------------------------------------------------------------------------------------------------


def _reclaim_text(result: Any) -> None:
    from orchestrator.durations import format_duration

    out = Console()
    verb = "planned" if result.executed else "would delete"
    mode = "(executed)" if result.executed else "(dry run)"
    older_than = format_duration(result.older_than_ms)
    out.print(
        f"reclaim {mode}: bucket {result.bucket}, objects older than {older_than}, metadata: {result.metadata_source}"
    )
    if result.planned_by_category:
        table = Table(f"{verb}: category", "objects", "bytes")
        for name, t in result.planned_by_category.items():
            table.add_row(name, f"{t.objects:,}", f"{t.bytes:,}")
        out.print(table)
        table = Table(f"{verb}: topic", "objects", "bytes")
        for name, t in result.planned_by_topic.items():
            table.add_row(name, f"{t.objects:,}", f"{t.bytes:,}")
        out.print(table)
    if result.skipped:
        table = Table("skipped: reason", "objects")
        for reason, n in result.skipped.items():
            table.add_row(reason, f"{n:,}")
        out.print(table)
    if result.executed:
        failed = f", {len(result.failed_keys):,} failed" if result.failed_keys else ""
        out.print(f"deleted {result.deleted_objects:,} objects ({result.deleted_bytes:,} bytes){failed}")
    elif not result.run_refused:
        planned = f"{result.planned_objects:,} objects ({result.planned_bytes:,} bytes)"
        out.print(f"would delete {planned}; nothing was deleted (pass --execute to delete them)")


@cli.command("reclaim")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--execute", is_flag=True, help="delete; without it this is a dry run that deletes nothing")
@click.option(
    "--older-than",
    callback=_duration_ms,
    metavar="DURATION",
    help="only objects last modified at least this long ago: 72h, 30m, 3d, 0s [default: the scan's grace]",
)
@click.option(
    "--category",
    "categories",
    multiple=True,
    metavar="C",
    help="reclaim only this category, repeatable [default: every category reclaim may delete]",
)
@click.option(
    "--metadata-store",
    type=click.Path(exists=True, dir_okay=False),
    help="the cluster's SQLite metadata store, to re-check against current metadata [default: the scan's "
    "export, with a warning]",
)
@click.option("--s3-endpoint", envvar="TIEREDCTL_S3_ENDPOINT", default=None, help="S3 endpoint URL [default: AWS]")
@click.option("--bucket", default=None, help="[default: the scan's source bucket]")
@click.option(
    "--max-orphan-ratio",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="refuse a live topic (or the whole run, for unknown topic ids) above this share of orphans",
)
@click.option("--force", is_flag=True, help="delete even when an orphan-ratio guard refuses")
@click.pass_obj
def reclaim_command(
    obj: Ctx,
    directory: str,
    execute: bool,
    older_than: int | None,
    categories: tuple[str, ...],
    metadata_store: str | None,
    s3_endpoint: str | None,
    bucket: str | None,
    max_orphan_ratio: float,
    force: bool,
) -> None:
    """Delete what the scan in DIR found reclaimable, after re-checking each object now (a dry run unless --execute).

    Each object is looked up again (HEAD) and re-classified against current metadata; objects that changed, became
    live, are younger than --older-than or lie outside their topic's prefix are skipped with a reason. Deletes
    are batched per topic prefix and journaled in DIR/reclaim-journal.jsonl; a second run deletes nothing more.
    Exit status 1 when an object could not be re-checked or deleted, or a guard refused the whole run.
    """
    from policies import reclaim_executor as rx
    from policies.reclaim import reclaim_categories
    from remote_storage.s3 import S3RemoteStorage, make_s3_client

    try:
        wanted = reclaim_categories(categories)
    except TieredError as exc:
        raise click.BadParameter(exc.message, param_hint="--category") from exc

    def now_ms() -> int:
        return int(time.time() * 1000)

    scan_out = rx.ScanOutput.load(directory)
    store_path = Path(metadata_store) if metadata_store else None
    metadata = rx.load_current_metadata(store_path=store_path, scan_export_dir=scan_out.export_dir, now_ms=now_ms())
    client = make_s3_client(endpoint_url=s3_endpoint)
    rsm = S3RemoteStorage(client=client, bucket=bucket or scan_out.bucket, prefix=scan_out.prefix)
    options = rx.ReclaimOptions(
        execute=execute, older_than_ms=older_than, categories=wanted, max_orphan_ratio=max_orphan_ratio, force=force
    )
    labels = {"recheck": "re-checking objects", "delete": "deleting"}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=obj.output == "json", console=Console(stderr=True), transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(labels.get(phase, phase), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        result = rx.reclaim(scan_out, rsm=rsm, metadata=metadata, options=options, now_ms=now_ms, on_progress=progress)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if obj.output == "json":
        obj.emit(result.as_json(), "")
    else:
        _reclaim_text(result)
    for refusal in result.refusals:
        click.echo(f"error: {refusal}", err=True)
    if result.failed_keys:
        key, why = next(iter(result.failed_keys.items()))
        failure = f"{len(result.failed_keys)} object(s) could not be re-checked or deleted, e.g. {key}: {why}"
        click.echo(f"error: {failure}; they were not deleted: run the same command again to retry them", err=True)
    if not result.ok:
        sys.exit(1)


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


if __name__ == "__main__":
    main()
