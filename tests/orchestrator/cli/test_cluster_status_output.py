"""``cluster status`` lists each controller's and broker's metrics URL, in text and in JSON."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli.output import Output
from orchestrator.cli.views import ClusterStatus

pytestmark = pytest.mark.unit

STATUS = {
    "dir": "/c",
    "bootstrap_server": "127.0.0.1:9093",
    "s3_endpoint": "http://127.0.0.1:5000",
    "bucket": "b",
    "prefix": "tiered/",
    "store": "/c/metadata.db",
    "processes": [
        {"role": "s3", "id": 0, "pid": 10, "port": 5000, "alive": True, "log": "l", "metrics_url": None},
        {
            "role": "controller",
            "id": 3000,
            "pid": 11,
            "port": 9093,
            "alive": True,
            "log": "l",
            "active": True,
            "metrics_url": "http://127.0.0.1:9400/metrics",
        },
        {
            "role": "broker",
            "id": 1,
            "pid": 12,
            "port": 9092,
            "alive": False,
            "log": "l",
            "metrics_url": "http://127.0.0.1:9401/metrics",
        },
    ],
}


def test_the_text_status_shows_each_process_metrics_url(capsys):
    Output("text").show(ClusterStatus(STATUS))
    lines = capsys.readouterr().out.splitlines()
    (controller,) = [ln for ln in lines if ln.startswith("controller")]
    (broker,) = [ln for ln in lines if ln.startswith("broker")]
    (s3,) = [ln for ln in lines if ln.startswith("s3")]
    assert controller.endswith("alive (active)  metrics http://127.0.0.1:9400/metrics")
    assert broker.endswith("DEAD   metrics http://127.0.0.1:9401/metrics")
    assert "metrics" not in s3


def test_the_json_status_carries_the_metrics_urls_as_they_are(capsys):
    Output("json").show(ClusterStatus(STATUS))
    doc = json.loads(capsys.readouterr().out)
    assert [p["metrics_url"] for p in doc["processes"]] == [None, *(p["metrics_url"] for p in STATUS["processes"][1:])]


def test_the_text_status_of_a_secured_cluster_names_the_s3_key_pair_file_and_its_https_urls(capsys):
    secured = {
        **STATUS,
        "s3_credentials_file": "/c/security/s3-credentials",
        "processes": [
            {**p, "metrics_url": p["metrics_url"].replace("http://", "https://")} if p["metrics_url"] else p
            for p in STATUS["processes"]
        ],
    }
    Output("text").show(ClusterStatus(secured))
    out = capsys.readouterr().out
    assert "S3 key pair /c/security/s3-credentials" in out
    assert "metrics https://127.0.0.1:9400/metrics" in out
