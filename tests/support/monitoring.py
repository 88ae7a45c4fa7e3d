"""The metric names deploy/'s alert rules and dashboard use, and the names a /metrics scrape exposes.

A PromQL expression names series: a gauge by its name, a counter by ``<name>_total``, a histogram by
``<name>_bucket``, ``_sum`` or ``_count``. A scrape declares every family (``# TYPE``) even before its first sample
(a labelled counter no event has touched yet), so :func:`exposed_names` takes every series name a declared family
stands for; :func:`sampled_names` only those with a sample now.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.request
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import REPO_ROOT

ALERTS = REPO_ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "tieredctl.json"
METRIC_NAME = re.compile(r"\btieredctl_[a-z0-9_]*[a-z0-9]")
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def dashboard_panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def expressions() -> list[str]:
    """Every PromQL expression of the alert rules and of the dashboard's panels."""
    rules = [rule["expr"] for rule in alert_rules()]
    return rules + [t["expr"] for p in dashboard_panels() for t in p["targets"]]


def referenced_names() -> set[str]:
    return {name for expr in expressions() for name in METRIC_NAME.findall(expr)}


def exposed_names(text: str) -> set[str]:
    """Every series name the families of a scrape stand for."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in SERIES_SUFFIXES.get(family.type, ("",))}
        names |= {s.name for s in family.samples}
    return names


def sampled_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(url: str, context: ssl.SSLContext | None = None) -> str:
    """One GET of ``url``; an https one of a secured local cluster with ``lc.metrics_ssl_context(state)``."""
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        body: bytes = response.read()
    return body.decode()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples named ``name`` in a scrape, with their labels."""
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(v for ls, v in samples(text, name) if labels.items() <= ls.items())
