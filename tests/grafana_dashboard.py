"""The Grafana dashboard shipped for `sharestate serve` (conf/grafana/sharestate-serve.json)
and the metrics its PromQL names, read with a PromQL parser."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import promql_parser
from conftest import PROJECT_ROOT

DASHBOARD = PROJECT_ROOT / "conf" / "grafana" / "sharestate-serve.json"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus records itself for every scrape (not the service's)."""
GRAFANA_INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b")


def load() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return found


def metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression selects (Grafana's interval variables as 1m)."""
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name in {expr!r}"
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(GRAFANA_INTERVALS.sub("1m", expr)), visit)
    return names


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every PromQL expression: the panels' targets and the variables' label_values()."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
            assert found, variable
            yield found[1]


def named_metrics() -> set[str]:
    """Every metric the dashboard's expressions select."""
    return set().union(*map(metric_names, expressions(load())))
