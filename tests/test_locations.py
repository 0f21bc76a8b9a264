"""Path arguments are resolved once, where they enter: every command and job hands absolute
paths to what runs below it (GE's Data Docs refused a relative warehouse, so `make demo`
crashed on a fresh clone); URIs and `-` stay as given."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sharestate.app.cli import build_parser
from sharestate.locations import location
from sharestate.spark import quality_job as quality
from sharestate.spark import run as run_all


def _parsed(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, object]:
    return vars(parser.parse_args(argv))


def test_every_path_argument_comes_out_absolute(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_parser()
    here = str(tmp_path)
    demo = _parsed(cli, ["demo"])  # the defaults: demo-data and warehouse, relative
    assert (demo["logs"], demo["warehouse"]) == (f"{here}/demo-data", f"{here}/warehouse")
    run = _parsed(cli, ["run", "--source", "logs", "--source", "kafka://b1:9092",
                        "--warehouse", "wh", "--end-offsets", "logs/ends.json"])
    assert run["source"] == [f"{here}/logs", "kafka://b1:9092"]
    assert (run["warehouse"], run["end_offsets"]) == (f"{here}/wh", f"{here}/logs/ends.json")
    gate = _parsed(cli, ["quality", "--warehouse", "wh", "--config", "q.toml",
                         "--acknowledgements", "acks.toml"])
    assert (gate["warehouse"], gate["config"], gate["acknowledgements"]) == (
        f"{here}/wh", f"{here}/q.toml", f"{here}/acks.toml")
    report = _parsed(cli, ["report", "--warehouse", "./wh/", "--out", "r.html"])
    assert (report["warehouse"], report["out"]) == (f"{here}/wh", f"{here}/r.html")
    sql = _parsed(cli, ["sql", "--warehouse", "wh", "-o", "-", "SELECT 1"])
    assert (sql["warehouse"], sql["output"]) == (f"{here}/wh", "-")
    assert _parsed(cli, ["simulate", "--out", "logs", "--records", "5"])["out"] == f"{here}/logs"
    job = _parsed(run_all.parser("replay"), ["--warehouse", "s3://lake/wh"])
    assert job["warehouse"] == "s3://lake/wh"
    standalone = argparse.ArgumentParser()
    quality.add_arguments(standalone)
    assert _parsed(standalone, ["--warehouse", "wh"])["warehouse"] == f"{here}/wh"


def test_location() -> None:
    assert location("~/x") == str(Path.home() / "x")
    assert location("/a/b/../c") == "/a/c"
    for uri in ("kafka://host:9092", "s3://bucket/path", "file:///tmp/x", "-"):
        assert location(uri) == uri
