"""The heartbeat long operations show on a terminal (`sharestate.spark.console.heartbeat`),
and only there."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import PROJECT_ROOT
from terminal import Terminal


def test_heartbeat_on_a_terminal_only() -> None:
    """Every `every` seconds while the block runs, on a terminal; nothing once it ended, and
    nothing at all into a pipe."""
    program = ("import sys, time\nfrom sharestate.spark.console import heartbeat\n"
               "with heartbeat('report', every=0.3):\n    time.sleep(1.1)\n"
               "print('done', file=sys.stderr, flush=True)\ntime.sleep(0.7)\n")
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    terminal = Terminal([sys.executable, "-c", program], env)
    try:
        beats = terminal.expect("done")
    finally:
        assert terminal.close() == 0
    assert 2 <= len(re.findall(r"^\[sharestate\] report: still working \(\d s\)$", beats,
                               re.M)) == len(beats.strip().splitlines()) <= 4, beats
    assert terminal.text.strip() == ""  # none after the block
    piped = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                           text=True, timeout=60)
    assert piped.returncode == 0 and piped.stderr == "done\n"
