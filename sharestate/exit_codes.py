"""Exit statuses: one scheme for every command and job (the CLI, `pipelines/*.py`, the
quality gate). The Airflow DAG keeps its own copy of the numbers it acts on (it imports
nothing of sharestate); a test holds the two together.
"""

from __future__ import annotations

import sys
import traceback

OK = 0
"""Everything read and applied cleanly; the gate holds."""
FINDINGS = 1
"""The input holds findings (written, with reason and bytes), or a quality gate failed."""
USAGE = 2
"""Bad arguments, unusable input, or an environment that cannot run: one line on stderr."""
QUALITY_NOT_RUN = 3
"""The quality gate could not run (no verdict on the data): retry it."""
SQL_FAILED = 4
"""A `sharestate sql` query was refused or failed."""
SERVE_FAILED = 5
"""`sharestate serve` stopped because a partition's replay or the cluster reader failed
(one line on stderr names which and why). No checkpoint of the failed state is written:
restarted, it resumes from the last good one."""
UNAVAILABLE = 75
"""A live source did not answer, or stopped answering (a cluster unreachable or not ready,
`sharestate serve` not answering): the job that needed it stopped short of the tables it
makes from it, and the same command run later completes the run (BSD's EX_TEMPFAIL). One
line on stderr."""
INTERNAL = 70
"""An unhandled exception: a bug (BSD's EX_SOFTWARE). Traceback, then one line."""


def unavailable(exc: BaseException, program: str = "sharestate") -> int:
    """Report a live source that did not answer: one line saying to run again later."""
    print(f"{program}: unavailable: {exc}; run again later", file=sys.stderr, flush=True)
    return UNAVAILABLE


def internal_error(exc: BaseException, program: str = "sharestate") -> int:
    """Report an unhandled exception: its traceback, then one line saying it is a bug."""
    traceback.print_exception(exc, file=sys.stderr)
    print(f"{program}: internal error ({type(exc).__name__}): this is a bug in sharestate, "
          f"not a problem with the input; please report it with the traceback above",
          file=sys.stderr, flush=True)
    return INTERNAL
