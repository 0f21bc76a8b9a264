"""Data-quality gate over the gold tables: code-defined Great Expectations suites.

- `config`: gate settings (`conf/quality.toml`) and decode-error acknowledgements;
- `derive`: flat frames for what plain expectations cannot see (nested state batches,
  per-key SPSO order, acknowledgement matching), computed with Spark;
- `suites`: the versioned suites and their checks (name, family, severity);
- `gate`: runs them with GE on Spark, builds Data Docs, returns one result per check;
- `records`: those results as `quality_results` and `audit_findings` rows.

`pipelines/quality.py` (and `sharestate quality`) runs the gate and writes the tables.
"""

from sharestate.quality.config import (
    Acknowledgement,
    ConfigError,
    QualityConfig,
    Severity,
    load_config,
)
from sharestate.quality.gate import CheckResult, GateResult, run_gate

__all__ = [
    "Acknowledgement",
    "CheckResult",
    "ConfigError",
    "GateResult",
    "QualityConfig",
    "Severity",
    "load_config",
    "run_gate",
]
