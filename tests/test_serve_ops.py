"""What ships to run the service: the Grafana dashboard (a well-formed dashboard model; that
its PromQL names exactly the metrics a running service exports is held in
tests/test_serve_kafka.py, where a service on a real broker exports them all), the example
Prometheus scrape configuration, and the systemd unit and Kubernetes Deployment in
docs/live-service.md (arguments `sharestate serve` accepts, checkpoints on the mounted
volume, /readyz and /healthz as the probes)."""

from __future__ import annotations

import argparse
import configparser
import re
import shlex
from typing import Any

import pytest
import yaml
from conftest import PROJECT_ROOT
from grafana_dashboard import PROMETHEUS_OWN, load, metric_names, named_metrics

from sharestate.app.serve.command import add_arguments

SCRAPE = PROJECT_ROOT / "conf" / "prometheus" / "sharestate.yml"
GUIDE = PROJECT_ROOT / "docs" / "live-service.md"
PANEL_TYPES = {"row", "timeseries", "stat", "table", "bargauge", "gauge"}


def test_the_dashboard_is_a_grafana_dashboard_model() -> None:
    dashboard = load()
    assert isinstance(dashboard["title"], str) and dashboard["title"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", dashboard["uid"])
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(set(ids)) == len(ids) and all(isinstance(i, int) for i in ids)
    occupied: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel["type"] in PANEL_TYPES and panel["title"], panel
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] >= 1, panel
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                 for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            assert panel["panels"] == [] and not panel["collapsed"]
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(set(refs)) == len(refs), panel["title"]
        for target in panel["targets"]:
            for variable in re.findall(r"\$(\w+)", target["expr"]):
                assert variable in variables or variable.startswith("__"), variable
    assert named_metrics() - PROMETHEUS_OWN, "it shows the service's metrics"


def test_stat_panels_color_by_thresholds_of_their_own() -> None:
    """Without thresholds Grafana colors a stat red from 80, whatever it counts (lag,
    archived records, checkpoint bytes): each one says its own, from an uncolored base."""
    stats = [panel for panel in load()["panels"] if panel["type"] == "stat"]
    assert stats
    for panel in stats:
        thresholds = panel["fieldConfig"]["defaults"]["thresholds"]
        steps = thresholds["steps"]
        assert thresholds["mode"] == "absolute" and steps[0]["value"] is None, panel["title"]
        values = [step["value"] for step in steps[1:]]
        assert values == sorted(values) and 80 not in values, panel["title"]


def test_metric_names_are_read_from_the_expression_not_guessed() -> None:
    assert metric_names('sum by (group) (rate(a_total{job=~"$job"}[$__rate_interval]))'
                        ' / on() group_left max(b) + time() - topk(3, c:d)') == {
        "a_total", "b", "c:d"}
    with pytest.raises(ValueError):
        metric_names("sum(rate(a[5m])")


def test_the_scrape_configuration_finds_the_documented_deployment() -> None:
    config = yaml.safe_load(SCRAPE.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"sharestate", "sharestate-kubernetes"}
    for job in jobs.values():
        assert job.get("metrics_path", "/metrics") == "/metrics"
        assert _seconds(job["scrape_timeout"]) <= _seconds(job["scrape_interval"])
    (static,) = jobs["sharestate"]["static_configs"]
    assert all(re.fullmatch(r"[\w.-]+:\d+", target) for target in static["targets"])
    deployment = _manifests()["Deployment"]
    keep = {tuple(rule["source_labels"]): rule["regex"]
            for rule in jobs["sharestate-kubernetes"]["relabel_configs"]
            if rule.get("action") == "keep"}
    label = deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
    assert keep[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)] == label
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert keep[("__meta_kubernetes_pod_container_port_name",)] in {
        port["name"] for port in container["ports"]}


def test_the_kubernetes_deployment_probes_and_mounts_what_the_service_uses() -> None:
    manifests = _manifests()
    deployment = manifests["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = _serve_arguments(container["args"])
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["http"] == args.listen[1]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == args.checkpoint_dir
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["persistentVolumeClaim"]["claimName"] == (
        manifests["PersistentVolumeClaim"]["metadata"]["name"])
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert [e["name"] for e in container["env"]] == ["SHARESTATE_KAFKA_SASL_PASSWORD"]
    assert not any("password" in arg.lower() for arg in container["args"])
    service = manifests["Service"]["spec"]
    assert service["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_systemd_unit_keeps_checkpoints_in_its_state_directory() -> None:
    (text,) = _blocks("ini")
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(text)
    service = unit["Service"]
    program, *argv = shlex.split(service["ExecStart"])
    assert program.endswith("/sharestate")
    args = _serve_arguments(argv)
    assert args.checkpoint_dir == f"/var/lib/{service['StateDirectory']}"
    assert service["RestartPreventExitStatus"] == "2"
    assert service["KillSignal"] == "SIGTERM"
    assert "password" not in service["ExecStart"].lower()


def _serve_arguments(argv: list[str]) -> argparse.Namespace:
    assert argv[0] == "serve"
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    return parser.parse_args(argv[1:])


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), re.S)


def _manifests() -> dict[str, dict[str, Any]]:
    (text,) = _blocks("yaml")
    return {document["kind"]: document for document in yaml.safe_load_all(text)}


def _seconds(duration: str) -> int:
    found = re.fullmatch(r"(\d+)([sm])", duration)
    assert found, duration
    return int(found[1]) * (60 if found[2] == "m" else 1)
