"""The `bench` extra: without it every command still starts, and the suites needing it say so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gangq.queue.bench import extras
from gangq.queue.core.errors import GangqError

# Runs the CLI with the bench extra's packages made unimportable, as in a plain install.
WITHOUT_EXTRA = """
import sys
sys.modules["httpx"] = None
sys.modules["playwright"] = None
from gangq.queue.cli import main
main()
"""


def without_extra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_missing_package_is_named_with_the_extra_that_brings_it() -> None:
    with pytest.raises(GangqError) as raised:
        extras.require("api", "httpx", "gangq_no_such_package")
    assert "gangq bench api needs gangq_no_such_package," in str(raised.value)
    assert "pip install 'gangq[bench]'" in str(raised.value)


def test_packages_that_are_there_pass() -> None:
    extras.require("ui", "httpx", "playwright")


def test_every_command_starts_without_the_extra() -> None:
    finished = without_extra("run", "--help")
    assert finished.returncode == 0, finished.stderr
    assert "--metrics-port" in finished.stdout


@pytest.mark.parametrize("suite", ["api", "ui"])
def test_a_suite_that_needs_the_extra_says_which_to_install(suite: str) -> None:
    finished = without_extra("bench", suite)
    assert finished.returncode == 2
    assert f"gangq bench {suite} needs httpx" in finished.stderr
    assert "pip install 'gangq[bench]'" in finished.stderr
    assert "Traceback" not in finished.stderr
