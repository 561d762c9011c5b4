"""The repository layout that keeps `import queue` working from the repository root."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
HTTP_LAYER_IMPORT = re.compile(r"^\s*(from|import) gangq\.api\b", re.MULTILINE)


def test_stdlib_queue_is_not_shadowed_from_the_repo_root() -> None:
    """A `queue/__init__.py` would make `import queue` pick the project folder (seen by uvicorn)."""
    result = subprocess.run(
        [sys.executable, "-c", "import queue; queue.Queue(); print(queue.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(result.stdout.strip()).parent != ROOT / "queue"
    assert not (ROOT / "queue" / "__init__.py").exists()
    assert not (ROOT / "api" / "__init__.py").exists()


def test_every_subpackage_on_disk_is_listed_in_pyproject() -> None:
    """Packages are listed by hand (no discovery without __init__.py); a missing one is lost."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    on_disk = {"gangq.queue", "gangq.api"}
    for top, name in (("queue", "gangq.queue"), ("api", "gangq.api")):
        for init in (ROOT / top).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / top)
            on_disk.add(".".join((name, *relative.parts)))
    assert on_disk == listed


def test_both_import_packages_ship_type_information() -> None:
    assert (ROOT / "queue" / "py.typed").exists()
    assert (ROOT / "api" / "py.typed").exists()


def test_the_controller_never_imports_the_http_layer() -> None:
    """`api/` serves what the controller publishes; only the commands that start both may join them.

    An import the other way would tie the scheduling loop to FastAPI and its settings, and let a
    change in the HTTP layer break admission.
    """
    composers = {
        ROOT / "queue" / "cli" / "run.py",
        ROOT / "queue" / "demo" / "runner.py",
        ROOT / "queue" / "demo" / "stack.py",
        ROOT / "queue" / "bench" / "api.py",
        ROOT / "queue" / "bench" / "ui.py",
    }
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "queue").rglob("*.py"))
        if path not in composers and HTTP_LAYER_IMPORT.search(path.read_text())
    ]
    assert offenders == []


def test_package_data_is_found_next_to_the_modules_that_read_it() -> None:
    """Every install mode holds these paths; under setuptools' default editable install (the
    README's) `importlib.resources` could not even read `gangq.api`, and its import failed."""
    from gangq.api.routers import ui
    from gangq.queue.demo import runner, scenario, serviceaccount
    from gangq.queue.store import schema

    shipped = {path.name for path in (ROOT / "api" / "ui").iterdir() if path.is_file()}
    assert set(ui.FILES) == {
        name for name in shipped if "." + name.rpartition(".")[2] in ui.CONTENT_TYPES
    }
    assert (schema.migrations_dir() / "env.py").is_file()
    assert any((schema.migrations_dir() / "versions").glob("*.py"))
    assert runner.default_crd().read_text() == (ROOT / "crds" / "trainingjob.yaml").read_text()
    assert (scenario.default_directory() / "scenario.yaml").is_file()
    rbac = (ROOT / "deploy" / "base" / "rbac.yaml").read_text()
    assert serviceaccount.shipped_rbac() == [d for d in yaml.safe_load_all(rbac) if d]


def test_type_checking_maps_the_import_names_onto_the_folders() -> None:
    """mypy finds gangq.queue and gangq.api through these links whatever the install mode."""
    mypy_path = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["mypy_path"]
    mapped = ROOT / mypy_path / "gangq"
    assert (mapped / "queue").resolve() == ROOT / "queue"
    assert (mapped / "api").resolve() == ROOT / "api"
    assert sorted(path.name for path in mapped.iterdir()) == ["api", "queue"]
