"""docs/grafana/jobforge.json charts only series that `GET /metrics` exports: every
metric name in its panels' expressions is in a real scrape of the API."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import ROOT, Api

pytestmark = pytest.mark.usefixtures("session_worker")

DASHBOARD = ROOT / "docs" / "grafana" / "jobforge.json"
METRIC = re.compile(r"\bjobforge_[a-z0-9_]+")
SAMPLE = re.compile(r"^(jobforge_[a-z0-9_]+)[{ ]", re.MULTILINE)
FAMILY = re.compile(r"^# TYPE (jobforge_[a-z0-9_]+) ([a-z]+)$", re.MULTILINE)
# The sample names a family of each type has (a labelled family has no sample until
# its first observation, so the `# TYPE` line vouches for them).
SUFFIXES = {"counter": ("", "_total"), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_names(text: str) -> set[str]:
    """Every series name the scrape exports."""
    names = set(SAMPLE.findall(text))
    for family, kind in FAMILY.findall(text):
        names |= {family + suffix for suffix in SUFFIXES.get(kind, ("",))}
    return names


def dashboard_metrics() -> set[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    assert exprs
    return {name for expr in exprs for name in METRIC.findall(expr)}


def test_every_series_the_dashboard_names_is_exported_by_metrics(api: Api) -> None:
    api.submit(type="grafana-check")  # a job, so the job gauges have a sample
    scrape = api.http.get("/metrics")
    assert scrape.status_code == 200, scrape.text
    missing = dashboard_metrics() - exported_names(scrape.text)
    assert not missing, f"named by the dashboard, not in /metrics: {sorted(missing)}"
