"""mypy passes on ``src/fl_patch`` with the checkout's configuration (``[tool.mypy]`` in pyproject.toml).

Run by this interpreter (``python -m mypy``), so CI, which runs the test suite, type-checks too.
The configuration names what is checked (``files``) and where the cache goes (``.cache/mypy``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from .conftest import REPO

pytestmark = pytest.mark.slow


@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed in this interpreter (it is in the `test` extra: pip install -e .[test])",
)
def test_mypy_passes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"mypy failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"
