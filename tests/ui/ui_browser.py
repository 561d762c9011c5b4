"""What the browser tests share: reading `gangq demo --serve`'s output, signing in, screenshots.

Screenshots go to ARTIFACTS (ignored by git), which `.ci/run` prints.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Page

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


def read_until_served(process: subprocess.Popen[str]) -> Demo:
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
