"""The executors' packed environment (`sharestate.spark.executor_env`)."""

from __future__ import annotations

import venv
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT

from sharestate.spark.executor_env import PackError, check_environment


def test_the_check_sees_only_the_environment(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment without sharestate fails its check even where the caller imports a
    checkout's sharestate (PYTHONPATH, the current folder): that check passed such an
    archive, whose executors then failed on `import sharestate`."""
    env = tmp_path / "environment"
    venv.create(env)
    monkeypatch.setenv("PYTHONPATH", str(PROJECT_ROOT))
    monkeypatch.chdir(PROJECT_ROOT)
    with pytest.raises(PackError, match="in the environment failed: ModuleNotFoundError"):
        check_environment(env)
