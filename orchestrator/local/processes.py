"""The local cluster's OS processes: how each is started, waited on until it serves, and stopped.

Invariants:
* Every process runs in its own session (``start_new_session``), with stdin closed and stdout and stderr appended
  to its log, and creates files for its owner alone (umask 077).
* A child started by this process is kept (``_CHILDREN``) until it is stopped, killed or found dead, and is then
  reaped through its ``Popen``: no zombie, no ResourceWarning.
* A pid is only signalled while ``/proc/<pid>/cmdline`` still names the file that identifies that process
  (:func:`orchestrator.local.state.is_ours`), so a recycled pid is never hit.
* Waiting for a process to be ready never outlives it: one that exits while waited on, or does not get ready in
  time, is a :class:`LocalClusterError` that quotes the end of its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import LocalClusterError
from orchestrator.local.state import LocalClusterState, ProcessInfo, is_ours
from orchestrator.private_files import PRIVATE_UMASK, open_private_append, private_dir

S3_STOP_TIMEOUT_S = 300.0  # the embedded S3 writes its snapshot on SIGTERM before it exits
LOG_LINES_QUOTED = 15  # of a process that failed to start

# Children started by this process, kept so they are reaped through their Popen (no zombies, no warnings).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def controller_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", "controller", "start", "--config", str(config)]


def broker_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", "broker", "start", "--config", str(config)]


def embedded_s3_command(
    ready: Path, *, port: int = 0, snapshot_dir: Path | None = None, credentials_file: Path | None = None
) -> list[str]:
    """The embedded S3's command line; with ``credentials_file`` it serves only requests signed with that pair
    (the file's path is on the command line, never the key)."""
    command = [sys.executable, "-m", "orchestrator.local.embedded_s3", "--port", str(port), "--ready-file", str(ready)]
    command += ["--snapshot-dir", str(snapshot_dir)] if snapshot_dir is not None else []
    return command + (["--credentials-file", str(credentials_file)] if credentials_file is not None else [])


def process_env(state: LocalClusterState | None = None) -> dict[str, str]:
    """The environment a process of the cluster starts with: this one's, plus, on the embedded S3, the key pair
    that server takes. An unsecured cluster's takes any pair, so one the environment names is kept; a secured
    one's takes only its own, which replaces any in the environment. Another endpoint gets credentials the usual
    AWS way."""
    env = dict(os.environ)
    credentials = state.s3_credentials if state is not None else None
    if credentials is not None and state is not None and state.s3_auth:
        env.pop("AWS_SESSION_TOKEN", None)  # a session token would go with the pair: it is not the cluster's
        env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = credentials
    elif credentials is not None:
        env.setdefault("AWS_ACCESS_KEY_ID", credentials[0])
        env.setdefault("AWS_SECRET_ACCESS_KEY", credentials[1])
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return env


def spawn(args: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``args`` in the background, its output appended to ``log_path``."""
    private_dir(log_path.parent)
    with open_private_append(log_path) as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            umask=PRIVATE_UMASK,  # what it creates (store, segments, objects) is the owner's alone
        )
    _CHILDREN[proc.pid] = proc
    return proc


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout_s: float,
    log: Path | None = None,
    proc: subprocess.Popen[bytes] | None = None,
) -> None:
    """Poll ``check`` until it holds; a :class:`LocalClusterError` when ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not check():
        exited = proc is not None and proc.poll() is not None
        if exited or time.monotonic() > deadline:
            why = f"it exited with status {proc.returncode}" if exited and proc else f"timed out after {timeout_s:.0f}s"
            raise LocalClusterError(f"{why} waiting for {what}{_log_tail(log)}")
        time.sleep(0.1)


def _log_tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    last_lines = log.read_text().splitlines()[-LOG_LINES_QUOTED:]
    return "\n--- last lines of " + str(log) + " ---\n" + "\n".join(last_lines)


def start_embedded_s3(
    log: Path,
    *,
    snapshot_dir: Path | None = None,
    ready_file: Path | None = None,
    port: int = 0,
    credentials_file: Path | None = None,
    timeout_s: float = 30.0,
) -> ProcessInfo:
    """The embedded S3 (:mod:`.embedded_s3`) as its own process on loopback, bound to ``port`` (0: a free one of
    its choosing); returns once it serves, with the port it bound. With ``snapshot_dir`` its objects survive a
    stop and start (SIGTERM writes them there); with ``credentials_file`` (:mod:`.s3_keys`) it serves only requests
    signed with that pair. Stop it with :func:`stop_process`."""
    ready = ready_file or log.with_suffix(".ready")
    private_dir(ready.parent)
    ready.unlink(missing_ok=True)
    command = embedded_s3_command(ready, port=port, snapshot_dir=snapshot_dir, credentials_file=credentials_file)
    proc = spawn(command, log, process_env())
    info = ProcessInfo("s3", 0, proc.pid, port, str(ready), str(log))
    try:
        wait_for("the embedded S3 endpoint", ready.exists, timeout_s, log, proc)
        info.port = int(json.loads(ready.read_text())["port"])
    except BaseException:
        stop_process(info, timeout_s=5)
        raise
    return info


def stop_process(p: ProcessInfo, *, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``; only while the pid is still the process we started."""
    child = _CHILDREN.pop(p.pid, None)
    if not is_ours(p):
        if child is not None:
            child.wait(timeout=timeout_s)  # it is exiting or has exited: collect it
        return
    try:
        os.kill(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if child is not None:  # our own child: wait on it directly, which also reaps it
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
        return
    deadline = time.monotonic() + timeout_s
    while is_ours(p) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_ours(p):
        os.kill(p.pid, signal.SIGKILL)
        while is_ours(p) and time.monotonic() < deadline + 5:
            time.sleep(0.05)


def kill_process(p: ProcessInfo) -> None:
    """SIGKILL, only while the pid is still the process we started; reaps our own child."""
    child = _CHILDREN.pop(p.pid, None)
    if is_ours(p):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    if child is not None:
        child.wait(timeout=10)
    deadline = time.monotonic() + 10
    while is_ours(p) and time.monotonic() < deadline:
        time.sleep(0.05)


def reap_if_dead(p: ProcessInfo) -> None:
    """Collect ``p`` if it is our child and has died by itself (a crash, a crash point), so it is no zombie."""
    dead = _CHILDREN.pop(p.pid, None)
    if dead is not None:
        dead.wait(timeout=10)


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be bound now. A port a process bound with port 0 is an ephemeral port: while
    the process is down, any outgoing connection of the machine may be given it as its source port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a listener's TIME_WAIT leftovers do not count
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
