"""Gate results as table rows: `quality_results` (every check) and `audit_findings`.

Audit rows (rule `quality_gate`, one per failed check, the check's severity) hold only
what the data decides — no run id or table version — so re-running the gate on the same
tables writes the same findings.
"""

from __future__ import annotations

import json
from typing import Any

from sharestate.analytics.audit import finding_row
from sharestate.quality.gate import CheckResult, GateResult

RULE = "quality_gate"


def result_rows(gate: GateResult, ge_version: str) -> list[dict[str, Any]]:
    """One `quality_results` row per check of the run."""
    blocking = {id(r) for r in gate.failed()}
    docs = str(gate.docs_index) if gate.docs_index else None
    return [{
        "run_id": gate.run_id, "run_at": gate.started_ms, "suite": r.suite,
        "suite_version": r.suite_version, "suite_fingerprint": r.suite_fingerprint,
        "table": r.table, "table_version": r.table_version, "check": r.check,
        "family": r.family, "severity": r.severity, "expectation_type": r.expectation_type,
        "description": r.description, "success": r.success, "blocking": id(r) in blocking,
        "fail_on": gate.config.fail_on, "rows": r.rows, "unexpected": r.unexpected,
        "unexpected_percent": r.unexpected_percent, "sample_json": _json(r.sample),
        "kwargs_json": _json(r.kwargs), "exception": r.exception, "ge_version": ge_version,
        "docs_index": docs} for r in gate.results]


def audit_rows(gate: GateResult) -> list[dict[str, Any]]:
    """One `audit_findings` row (rule quality_gate) per failed check, any severity."""
    return [finding_row(RULE, r.summary(), severity=r.severity,
                        group_id=_first(r, "group_id"), topic_id=_first(r, "topic_id"),
                        share_partition=_partition(r), detail=_detail(r))
            for r in gate.results if not r.success]


def _detail(result: CheckResult) -> dict[str, Any]:
    return {"suite": result.suite, "suite_version": result.suite_version,
            "check": result.check, "family": result.family,
            "expectation_type": result.expectation_type, "table": result.table,
            "rows": result.rows, "unexpected": result.unexpected,
            "sample": sorted(result.sample, key=lambda s: json.dumps(s, sort_keys=True))}


def _first(result: CheckResult, column: str) -> str | None:
    """`column` of the first sample row, when samples are rows that have it."""
    first = result.sample[0] if result.sample else None
    value = first.get(column) if isinstance(first, dict) else None
    return None if value is None else str(value)


def _partition(result: CheckResult) -> int | None:
    first = result.sample[0] if result.sample else None
    value = first.get("share_partition", first.get("partition")) \
        if isinstance(first, dict) else None
    return value if isinstance(value, int) else None


def _json(value: Any) -> str | None:
    return None if value in (None, [], {}) else json.dumps(value, sort_keys=True, default=str)
