"""deploy/prometheus/alerts.yml and deploy/grafana/tieredctl.json: well-formed, and every metric name they use is one
orchestrator.metrics declares (the live scrape of tests/orchestrator/local/test_cluster_metrics.py checks it again
against real processes); the Kubernetes pods expose the metrics port their settings bind."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from orchestrator.metrics import (
    BrokerMetrics,
    BrokerView,
    ControllerMetrics,
    ControllerView,
    DisablementQueueView,
    MetadataView,
)
from tests.support import REPO_ROOT
from tests.support.monitoring import alert_rules, dashboard, dashboard_panels, exposed_names, referenced_names

pytestmark = pytest.mark.unit


def _balanced(expr: str) -> bool:
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    for ch in re.sub(r'"[^"]*"', "", expr):
        if ch in depth:
            depth[ch] += 1
        elif ch in closing:
            depth[closing[ch]] -= 1
            if depth[closing[ch]] < 0:
                return False
    return not any(depth.values())


def test_every_alert_rule_has_a_name_an_expression_a_duration_a_severity_and_a_summary() -> None:
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    wanted = {
        "TieredctlNoActiveController",
        "TieredctlBrokerFenced",
        "TieredctlDisablementStuck",
        "TieredctlS3Errors",
    }
    assert wanted <= set(names)
    for rule in rules:
        assert re.fullmatch(r"Tieredctl[A-Za-z0-9]+", rule["alert"])
        assert rule["expr"].strip() and _balanced(rule["expr"]), rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_dashboard_has_unique_panels_each_querying_prometheus() -> None:
    board = dashboard()
    assert board["uid"] == "tieredctl" and board["templating"]["list"][0]["type"] == "datasource"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard_panels():
        assert panel["title"] and panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert _balanced(target["expr"]) and "tieredctl_" in target["expr"], panel["title"]


def _declared_names() -> set[str]:
    metadata = MetadataView(image_offset=1, log_end_offset=2)
    queue = DisablementQueueView(topics=0, pending_acks=0, stalled_acks=0, oldest_age_s=0, remote_deletion_topics=0)
    controller = ControllerMetrics()
    view = ControllerView(metadata, True, 1, {"ENABLED": 0}, {1: False}, queue)
    controller.observe(lambda: view)
    broker = BrokerMetrics()
    broker.observe(lambda: BrokerView(metadata))
    broker.observe_rlmm_lag(lambda: {0: 0})
    text = generate_latest(controller.registry).decode() + generate_latest(broker.registry).decode()
    return exposed_names(text)


def test_every_metric_the_rules_and_the_dashboard_use_is_declared_by_orchestrator_metrics() -> None:
    used = referenced_names()
    assert len(used) >= 15
    assert used - _declared_names() == set()


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_the_kubernetes_pods_expose_the_metrics_port_their_settings_bind(role: str) -> None:
    manifest = REPO_ROOT / "deploy" / "kubernetes" / f"{role}.yaml"
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(manifest.read_text()))
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (workload,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    metrics = tomllib.loads(config_map["data"][f"{role}.toml"])["metrics"]
    template = workload["spec"]["template"]
    (container,) = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert metrics["host"] == "0.0.0.0" and ports["metrics"] == metrics["port"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == str(metrics["port"])
