"""Every file of deploy/ is checked: the Kubernetes manifests parse and hold the objects the README promises, every
controller and broker TOML they or deploy/config ship is accepted by the settings loader and names the PostgreSQL
store, and every systemd unit parses and starts a command that exists (checked against the CLI's own ``--help``)."""

from __future__ import annotations

import configparser
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.settings import load_broker_settings, load_controller_settings
from tests.support import REPO_ROOT

pytestmark = pytest.mark.unit

DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
SYSTEMD = DEPLOY / "systemd"
STORE_DSN = "postgresql://tieredctl@postgres:5432/tieredctl"
LOADERS = {"controller": load_controller_settings, "broker": load_broker_settings}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _all_docs() -> list[dict[str, Any]]:
    return [d for path in sorted(KUBERNETES.glob("*.yaml")) for d in _docs(path)]


def _one(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in _all_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _tieredctl_argv(script: str) -> list[str]:
    """The argv of the ``exec tieredctl ...`` line of a container's start script."""
    (line,) = [ln.strip() for ln in script.splitlines() if ln.strip().startswith("exec tieredctl ")]
    return shlex.split(line)[1:]


def _assert_real_command(argv: list[str]) -> None:
    """``argv`` (starting at ``tieredctl``) names a CLI command that takes every option it is given."""
    words = [w for w in argv[1:] if not w.startswith("-")]
    options = [w for w in argv[1:] if w.startswith("--")]
    # The command's words are the leading non-option words (option values come after an option).
    first_option = next((i for i, w in enumerate(argv[1:]) if w.startswith("-")), len(argv) - 1)
    command = argv[1 : 1 + first_option]
    assert command and set(command) <= set(words)
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.output
    for option in options:
        assert re.search(rf"(^|\s){re.escape(option)}[\s,=]", result.output), (command, option, result.output)


# -- Kubernetes ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(KUBERNETES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_manifest_parses_into_named_kubernetes_objects(path: Path) -> None:
    docs = _docs(path)
    assert docs
    for doc in docs:
        assert isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str), doc
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
        labels = doc["metadata"].get("labels", {})
        assert all(isinstance(v, str) for v in labels.values())
        if doc["kind"] in ("Deployment", "StatefulSet"):
            selector = doc["spec"]["selector"]["matchLabels"]
            assert selector.items() <= doc["spec"]["template"]["metadata"]["labels"].items()
            pod = doc["spec"]["template"]["spec"]
            mounted = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
            claims = {t["metadata"]["name"] for t in doc["spec"].get("volumeClaimTemplates", [])}
            assert mounted <= {v["name"] for v in pod.get("volumes", [])} | claims


def test_the_objects_of_a_cluster_are_all_there() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in _all_docs()}
    assert {
        ("Deployment", "tieredctl-controller"),
        ("Service", "tieredctl-controller"),
        ("ConfigMap", "tieredctl-controller"),
        ("StatefulSet", "tieredctl-broker"),
        ("Service", "tieredctl-broker"),
        ("ConfigMap", "tieredctl-broker"),
        ("StatefulSet", "postgres"),
        ("Service", "postgres"),
        ("CronJob", "tieredctl-scan"),
        ("ConfigMap", "tieredctl-scan"),
    } <= kinds


def test_two_controllers_on_two_nodes_and_brokers_with_their_own_volumes() -> None:
    controller = _one("Deployment", "tieredctl-controller")
    assert controller["spec"]["replicas"] == 2
    anti = controller["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"
    broker = _one("StatefulSet", "tieredctl-broker")
    assert broker["spec"]["serviceName"] == "tieredctl-broker"
    assert _one("Service", "tieredctl-broker")["spec"]["clusterIP"] == "None"
    data_mount = {m["name"]: m["mountPath"] for m in _container(broker)["volumeMounts"]}["data"]
    broker_toml = _one("ConfigMap", "tieredctl-broker")["data"]["broker.toml"]
    assert f'data_dir = "{data_mount}"' in broker_toml
    # The Service the store DSN names is the PostgreSQL one, on the DSN's port.
    (port,) = _one("Service", "postgres")["spec"]["ports"]
    assert STORE_DSN.split("@")[1].split("/")[0] == f"postgres:{port['port']}"


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_the_shipped_toml_is_accepted_by_the_settings_loader_and_names_the_postgres_store(
    role: str, tmp_path: Path
) -> None:
    config_map = _one("ConfigMap", f"tieredctl-{role}")
    (key,) = config_map["data"]
    path = tmp_path / key
    path.write_text(config_map["data"][key])
    settings = LOADERS[role](path)
    assert settings.metadata_store == STORE_DSN
    # The password file the TOML names is where the container mounts the store's Secret.
    container = _container(_one("Deployment" if role == "controller" else "StatefulSet", f"tieredctl-{role}"))
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert settings.store.password_file == f"{mounts['secret']}/password"
    # The start script rewrites exactly the id line of the mounted TOML, then starts the role with it.
    script = container["command"][-1]
    id_key = "node_id" if role == "controller" else "broker_id"
    assert f"s/^{id_key} = .*/" in script and re.search(rf"^{id_key} = ", config_map["data"][key], re.M)
    assert f"{mounts['config']}/{key}" in script
    argv = _tieredctl_argv(script)
    assert argv[:3] == ["tieredctl", role, "start"]
    _assert_real_command(argv)


def test_the_scan_cronjob_runs_against_a_spark_cluster_that_can_reach_its_driver() -> None:
    config = _one("ConfigMap", "tieredctl-scan")["data"]
    assert config["SCAN_MASTER"].startswith("spark://")
    container = _container(_one("CronJob", "tieredctl-scan")["spec"]["jobTemplate"])
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    conf = dict(kv.split("=", 1) for kv in env["SCAN_SPARK_CONF"]["value"].split())
    assert conf["spark.driver.host"] == "$(POD_IP)"  # expanded by Kubernetes: POD_IP is defined before it
    assert list(env).index("POD_IP") < list(env).index("SCAN_SPARK_CONF")
    ports = {p["containerPort"] for p in container["ports"]}
    assert {int(conf["spark.driver.port"]), int(conf["spark.blockManager.port"])} <= ports


# -- deploy/config -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_the_example_config_files_are_accepted_and_name_the_postgres_store(role: str) -> None:
    settings = LOADERS[role](DEPLOY / "config" / f"{role}.toml")
    assert settings.metadata_store == STORE_DSN


# -- systemd -------------------------------------------------------------------------------------------------------


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(path.read_text())
    return parser


UNITS = sorted(p for p in SYSTEMD.iterdir() if p.suffix in (".service", ".timer"))


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_every_unit_file_parses_with_the_sections_systemd_needs(path: Path) -> None:
    unit = _unit(path)
    assert unit["Unit"]["Description"]
    kind = "Service" if path.suffix == ".service" else "Timer"
    assert kind in unit.sections()
    if kind == "Timer":
        assert unit["Timer"]["OnCalendar"] and (SYSTEMD / f"{path.stem}.service").is_file()
        assert unit["Install"]["WantedBy"] == "timers.target"


@pytest.mark.parametrize("path", [p for p in UNITS if p.suffix == ".service"], ids=lambda p: p.name)
def test_every_service_starts_a_real_command(path: Path) -> None:
    argv = shlex.split(_unit(path)["Service"]["ExecStart"])
    assert os.path.isabs(argv[0])
    if argv[0].endswith("/bin/tieredctl"):
        _assert_real_command(["tieredctl", *argv[1:]])
        config = argv[argv.index("--config") + 1]
        role = argv[1]
        assert re.fullmatch(rf"/etc/tieredctl/{role}-%i\.toml", config), config
        assert path.name == f"tieredctl-{role}@.service"  # the instance name is the node id
    else:
        # The scan goes through spark-submit: the deployed wrapper, found at the same place in the repository.
        assert argv[0].endswith("/deploy/spark/tieredctl-scan-submit")
        assert os.access(DEPLOY / "spark" / "tieredctl-scan-submit", os.X_OK)
        assert _unit(path)["Service"]["Type"] == "oneshot"
