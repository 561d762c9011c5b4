"""The repository keeps its own copy of the reference corpus, so a plain clone replays every case.

When the shared original sits beside the clone (../shared/k8s-reference), the copy must match it
file by file; without it the copy alone must be complete: every case the replays load is present.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .conftest import CORPUS

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "k8s-reference"


def digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_the_copy_matches_the_shared_corpus_when_it_is_there() -> None:
    copy = digests(CORPUS)
    if not SHARED.is_dir():
        assert "README.md" in copy
        return
    shared = digests(SHARED)
    assert sorted(set(shared) - set(copy)) == [], "missing from tests/contract/reference"
    assert sorted(set(copy) - set(shared)) == [], "not in the shared corpus"
    assert [name for name in shared if shared[name] != copy[name]] == []


def test_every_case_file_is_one_captured_request_and_response() -> None:
    cases = sorted(CORPUS.glob("*.json"))
    assert len(cases) > 250
    for path in cases:
        case = json.loads(path.read_text())
        assert {"request", "response"} <= set(case), path.name
        assert {"method", "path", "query", "headers", "body"} <= set(case["request"]), path.name
        assert isinstance(case["response"]["status"], int), path.name
