"""Fixtures of the browser tests: `gangq demo --serve --podgroups` in a subprocess, headless
Chromium (on a cluster that serves PodGroups, so a job's page shows its gangs' groups; the
README's `gangq demo` plays the same story without them).

One demo per module (the reference scenario plays in about 30 s, then its API and web UI stay
up with an admin token, a viewer token per tenant and a kubeconfig of the emulated cluster),
and one browser per module: Debian's `chromium` driven by Playwright (`.ci/run` installs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

from .ui_browser import CHROMIUM, RUN_CLI, SERVE_SECONDS, Demo, read_until_served


@pytest.fixture(scope="module")
def demo(server_url: str) -> Iterator[Demo]:
    process = subprocess.Popen(
        [sys.executable, "-c", RUN_CLI, "demo", "--serve", "--podgroups"],
        env={**os.environ, "DATABASE_URL": server_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    timer = threading.Timer(SERVE_SECONDS, process.kill)
    timer.start()
    try:
        served = read_until_served(process)
        timer.cancel()
        yield served
    finally:
        timer.cancel()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "install Debian's chromium (apt-get install -y chromium)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield launched
        launched.close()
