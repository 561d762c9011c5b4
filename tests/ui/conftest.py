"""Fixtures of the browser tests: `gangq demo --serve` in a subprocess, headless Chromium.

One demo per module (the reference scenario plays in about 30 s, then its API and web UI stay
up with an admin token, a viewer token per tenant and a kubeconfig of the emulated cluster),
and one browser per module. The browser is Debian's `chromium` driven by Playwright with
`executable_path`; `.ci/run` installs it. Screenshots go to ARTIFACTS, which `.ci/run` prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / ".ci" / "artifacts" / "ui"
RUN_CLI = "from gangq.queue.cli import main; main()"
SERVE_SECONDS = 150


@dataclass(frozen=True, slots=True)
class Demo:
    url: str
    token: str
    viewers: dict[str, str]
    kubeconfig: Path


def _read_until_served(process: subprocess.Popen[str]) -> Demo:
    fields: dict[str, Any] = {"viewers": {}}
    assert process.stdout is not None
    for line in process.stdout:
        if found := re.match(r"web UI: (\S+)/ui/", line):
            fields["url"] = found[1]
        elif found := re.match(r"token: (\S+)", line):
            fields["token"] = found[1]
        elif found := re.match(r"viewer token of tenant (\S+): (\S+)", line):
            fields["viewers"][found[1]] = found[2]
        elif found := re.search(r"--kubeconfig (\S+)", line):
            fields["kubeconfig"] = Path(found[1])
        elif line.startswith("metrics at"):
            return Demo(**fields)
    raise AssertionError(f"gangq demo --serve ended early (exit {process.wait()})")


@pytest.fixture(scope="module")
def demo(server_url: str) -> Iterator[Demo]:
    process = subprocess.Popen(
        [sys.executable, "-c", RUN_CLI, "demo", "--serve"],
        env={**os.environ, "DATABASE_URL": server_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    timer = threading.Timer(SERVE_SECONDS, process.kill)
    timer.start()
    try:
        served = _read_until_served(process)
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


def sign_in(browser: Browser, demo: Demo, token: str) -> Page:
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{demo.url}/ui/")
    page.get_by_label("Bearer token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("main[data-drawn]")
    page.errors = errors  # type: ignore[attr-defined]
    return page


def open_page(page: Page, route: str) -> None:
    drawn = page.get_attribute("main", "data-drawn") or "0"
    page.evaluate("route => { location.hash = route; }", f"#/{route}")
    page.wait_for_function(
        "drawn => document.querySelector('main').dataset.drawn !== drawn", arg=drawn
    )


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
