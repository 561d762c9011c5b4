"""What a viewer reads of text naming other tenants' jobs, scale-up gangs among them."""

from __future__ import annotations

import pytest

from gangq.api import auth, redaction

CI_VIEWER = auth.Principal("cid", frozenset({"ci"}), frozenset({auth.Role.VIEWER}))
TENANTS = {"ci": "ci", "inference": "prod", "ml-train": "ml-train"}


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        (
            "preempted by inference/llm-prod+2 (tier prod-inference > small)",
            "preempted by a higher-tier job of another tenant (tier prod-inference > small)",
        ),
        (
            "waits behind inference/llm-prod+2 and ml-train/train-llm",
            "waits behind 2 jobs of other tenants",
        ),
        (
            "ci/ci-test-01+1 and gpu.nvidia.com/gpu-1/gpu-2",
            "ci/ci-test-01+1 and gpu.nvidia.com/gpu-1/gpu-2",
        ),
    ],
    ids=["preemptor", "run", "own-gang-and-device"],
)
def test_a_scale_up_gang_of_another_tenant_loses_its_whole_name(stored: str, shown: str) -> None:
    redact = redaction.for_viewer(CI_VIEWER, tenant_of=TENANTS.get)
    assert redact(stored) == shown
