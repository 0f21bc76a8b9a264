"""Gate settings, acknowledgements, suite definitions and result rows (no Spark)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from sharestate.quality import Acknowledgement, ConfigError, QualityConfig, load_config
from sharestate.quality.config import DEFAULT_CONF, acknowledged_by, load_acknowledgements
from sharestate.quality.gate import CheckResult, GateResult
from sharestate.quality.records import RULE, audit_rows, result_rows
from sharestate.quality.suites import suites
from sharestate.tables.spec import table

TODAY = dt.date(2026, 5, 1)
ROW = {"source": "/logs/__share_group_state-7/00000000000000001000.log", "offset": 1042,
       "position": 512, "kind": "crc_mismatch", "topic": "__share_group_state",
       "partition": 7}


def test_repository_settings_load() -> None:
    config = load_config(DEFAULT_CONF)
    assert config.fail_on == "error" and config.delivery_count_limit == 5
    assert config.states_for("4.0") == (0, 2, 4)
    assert config.states_for("4.1") == (0, 2, 3, 4)
    assert config.states_for("9.9") == (0, 2, 4)
    assert config.acknowledgements == ()


def test_overrides_and_bad_values(tmp_path: Path) -> None:
    config = QualityConfig().with_overrides(fail_on="warning", delivery_count_limit=10)
    assert (config.fail_on, config.delivery_count_limit) == ("warning", 10)
    with pytest.raises(ConfigError, match="fail_on"):
        QualityConfig().with_overrides(fail_on="fatal")
    with pytest.raises(ConfigError, match="positive"):
        QualityConfig().with_overrides(delivery_count_limit=0)
    bad = tmp_path / "q.toml"
    bad.write_text('delivery_count_limt = 5\n')
    with pytest.raises(ConfigError, match="unknown settings"):
        load_config(bad)
    bad.write_text('[delivery_states]\n"4.1" = [0, 7]\n')
    with pytest.raises(ConfigError, match=r"states 0\.\.4"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_acknowledgement_file_relative_to_settings(tmp_path: Path) -> None:
    (tmp_path / "acks.toml").write_text(
        '[[decode_error]]\nkind = "garbage"\nreason = "test"\n', encoding="utf-8")
    (tmp_path / "q.toml").write_text('acknowledgements = "acks.toml"\n', encoding="utf-8")
    config = load_config(tmp_path / "q.toml")
    assert config.acknowledgements == (Acknowledgement(reason="test", kind="garbage"),)


def test_acknowledgement_matching() -> None:
    by_place = Acknowledgement(reason="torn write", source="*/__share_group_state-7/*.log",
                               offset=1042)
    assert by_place.matches(ROW, TODAY)
    assert not by_place.matches({**ROW, "offset": 1043}, TODAY)
    assert not by_place.matches({**ROW, "source": "/logs/__share_group_state-8/0.log"}, TODAY)
    by_position = Acknowledgement(reason="r", source=ROW["source"], position=512)
    assert by_position.matches({**ROW, "offset": None}, TODAY)
    by_kind = Acknowledgement(reason="r", kind="crc_mismatch", topic="__consumer_offsets")
    assert not by_kind.matches(ROW, TODAY)
    assert Acknowledgement(reason="r", kind="crc_mismatch", partition=7).matches(ROW, TODAY)
    lapsed = Acknowledgement(reason="r", kind="crc_mismatch", until=dt.date(2026, 4, 30))
    assert not lapsed.matches(ROW, TODAY)
    label = acknowledged_by(ROW, (lapsed, by_kind, by_place), TODAY)
    assert label is not None and "offset=1042" in label and "torn write" in label


def test_acknowledgement_entries_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="source \\+ offset"):
        Acknowledgement(reason="r", source="*.log")
    with pytest.raises(ConfigError, match="reason"):
        Acknowledgement(reason=" ", kind="garbage")
    path = tmp_path / "acks.toml"
    path.write_text('[[decode_error]]\nkind = "garbage"\nreason = "r"\nowner = "x"\n')
    with pytest.raises(ConfigError, match="#1"):
        load_acknowledgements(path)
    path.write_text('[[decode_error]]\nsource = "a"\noffset = 3\nreason = "r"\n'
                    'until = 2026-06-30\n')
    assert load_acknowledgements(path)[0].until == dt.date(2026, 6, 30)


def test_suites_are_named_versioned_and_fingerprinted() -> None:
    config = QualityConfig(delivery_states={"default": (0, 2, 4), "4.1": (0, 2, 3, 4)})
    built = suites(config)
    names = {(s.name, c.name) for s in built for c in s.checks}
    assert ("share_partition_state", "keys_unique") in names
    assert ("share_partition_state_history.batches", "delivery_state_allowed[4.1]") in names
    assert ("audit_findings", "no_orphaned_state") in names
    assert all(s.version for s in built)
    families = {c.family for s in built for c in s.checks}
    assert families == {"keys", "batch_offsets", "batch_order", "delivery_state",
                        "delivery_count", "spso", "lag", "orphans", "decode_errors"}
    severities = {c.name: c.severity for s in built for c in s.checks}
    assert severities["no_orphaned_state"] == "warning" and severities["spso_monotonic"] == "error"
    # The fingerprint follows what the checks assert (here: the delivery limit).
    other = suites(config.with_overrides(delivery_count_limit=9))
    assert [s.fingerprint() for s in built] != [s.fingerprint() for s in other]
    assert [s.fingerprint() for s in built] == [s.fingerprint() for s in suites(config)]


def _result(check: str, severity: str, success: bool) -> CheckResult:
    return CheckResult(
        suite="share_group_lag", suite_version="1", suite_fingerprint="f", table="share_group_lag",
        table_version=3, check=check, family="lag", severity=severity,  # type: ignore[arg-type]
        expectation_type="expect_column_values_to_be_between", description="Lag is >= 0.",
        success=success, rows=10, unexpected=0 if success else 2,
        sample=[] if success else [{"group_id": "g", "topic_id": "t", "partition": 1}])


def test_result_and_audit_rows() -> None:
    gate = GateResult("run-1", 1_000, QualityConfig(), [
        _result("keys_unique", "error", True), _result("lag_non_negative", "error", False),
        _result("something", "warning", False)])
    assert [r.check for r in gate.failed()] == ["lag_non_negative"]
    assert [r.check for r in gate.failed("warning")] == ["lag_non_negative", "something"]
    assert not gate.passed
    rows = result_rows(gate, "1.24.1")
    assert [list(r) for r in rows] == [table("quality_results").names] * 3
    assert [r["blocking"] for r in rows] == [False, True, False]
    audit = audit_rows(gate)
    assert [list(r) for r in audit] == [table("audit_findings").names] * 2
    assert {a["rule"] for a in audit} == {RULE}
    first = audit[0]
    assert first["severity"] == "error" and "share_group_lag:lag_non_negative" in first["message"]
    assert (first["group_id"], first["topic_id"], first["share_partition"]) == ("g", "t", 1)
    assert json.loads(first["detail_json"])["check"] == "lag_non_negative"
