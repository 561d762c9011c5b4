"""The scenario folder: the reference one is coherent, broken ones get clear errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.demo import scenario
from gangq.queue.kubesim import cluster


@pytest.fixture
def reference() -> scenario.Scenario:
    return scenario.load(scenario.default_directory())


def test_the_reference_scenario_plays_twenty_one_jobs_in_six_steps(
    reference: scenario.Scenario,
) -> None:
    keys = [scenario.job_key(d) for step in reference.steps for d in step.objects]
    assert [step.file for step in reference.steps] == [
        "llm-prod.yaml",
        "train-llm.yaml",
        "train-llm-2.yaml",
        "small-jobs.yaml",
        "slice-jobs.yaml",
        "llm-prod-scale-up.yaml",
    ]
    assert len(set(keys)) == 21
    assert [t.name for t in reference.tenants] == ["prod", "ml-train", "ci", "research"]


def test_slice_jobs_tolerate_the_split_nodes_and_their_tenant_has_quota_for_them(
    reference: scenario.Scenario,
) -> None:
    """The whole GPUs of a partitioned node are in the whole-GPU class: only the taint keeps
    the 8x8 story's jobs off it."""
    inventory = reference.cluster.inventory()
    split = [i for i in range(inventory.nodes) if inventory.layout(i) != cluster.WHOLE]
    assert split == [8, 9] and {inventory.rack(i) for i in split} == {"rack-2"}
    assert {inventory.rack(i) for i in range(8)} == {"rack-0", "rack-1"}
    taint = reference.cluster.split_node_taint
    assert taint is not None and taint.effect == "NoSchedule"
    research = next(t for t in reference.tenants if t.name == "research")
    classes = {quota.device_class for quota in research.quotas}
    managed = set(reference.controller["managed_device_classes"])
    pattern = scenario.Trigger(jobs=str(reference.story.slices), phase="Running")
    for step in reference.steps:
        for document in step.objects:
            tolerations = document["spec"]["template"]["spec"].get("tolerations") or []
            tolerates = any(t.get("key") == taint.key for t in tolerations)
            is_slice_job = pattern.matches(scenario.job_key(document))
            assert tolerates == is_slice_job, scenario.job_key(document)
            if is_slice_job:
                assert document["spec"]["deviceClassName"] in classes & managed


def test_every_trigger_and_role_names_jobs_of_the_scenario(reference: scenario.Scenario) -> None:
    applied: set[str] = set()
    for step in reference.steps:
        if step.after is not None:
            assert any(step.after.matches(key) for key in applied), step.title
        applied |= {scenario.job_key(d) for d in step.objects}
    story = reference.story
    assert {story.prod, story.blocker, story.waiting, *story.one_domain} <= applied
    assert any(scenario.Trigger(jobs=story.backfill, phase="Running").matches(k) for k in applied)


def test_the_scale_up_step_changes_only_the_replicas(reference: scenario.Scenario) -> None:
    first = reference.steps[0].objects[0]
    scaled = reference.steps[-1].objects[0]
    assert scaled["metadata"] == first["metadata"]
    assert scaled["spec"] == {**first["spec"], "replicas": reference.story.scaled_replicas}


def test_gangs_fit_a_node_and_carry_a_run_time(reference: scenario.Scenario) -> None:
    """8 GPUs per node; 2 NUMA nodes of 4 GPUs, so no 8-GPU replica can require one NUMA node."""
    for step in reference.steps:
        for document in step.objects:
            spec = document["spec"]
            assert spec["devicesPerReplica"] <= 8
            if spec["devicesPerReplica"] > 4:
                assert "constraints" not in spec
            if spec["tier"] != "prod-inference":
                annotations = spec["template"]["metadata"]["annotations"]
                assert float(annotations["sim.gangq.dev/run-seconds"]) <= 20


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    target = tmp_path / "reference"
    shutil.copytree(scenario.default_directory(), target)
    return target


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("scenario.yaml", "steps: [", "is not valid YAML"),
        ("scenario.yaml", "timeoutSeconds: 10\n", "namespaces: Field required"),
        ("train-llm.yaml", "kind: Pod\nmetadata: {name: x}\n", "kind must be TrainingJob"),
        (
            "train-llm.yaml",
            "kind: TrainingJob\nmetadata: {name: x}\n",
            "metadata.namespace is missing",
        ),
        ("tenants.yaml", "tenants: [{name: ci, quotas: [{nominal: 1}]}]\n", "deviceClass"),
        (
            "scenario.yaml",
            "timeoutSeconds: 9\nnamespaces: n\ntenants: tenants.yaml\nsteps: [{file: f, title: t}]"
            "\nstory: {prod: a/b, scaledReplicas: 3, blocker: a/c, waiting: a/d, backfill: a/*,"
            " victimTiers: [small]}\ncontroller: {cycle_intervall_s: 1}\n",
            "unknown settings cycle_intervall_s",
        ),
        (
            "scenario.yaml",
            "timeoutSeconds: 9\nnamespaces: n\ntenants: tenants.yaml\nsteps: [{file: f, title: t}]"
            "\nstory: {prod: a/b, scaledReplicas: 3, blocker: a/c, waiting: a/d, backfill: a/*,"
            " victimTiers: [small]}\ncluster: {nodes: 2, partitionedNodes: 2, sharedNodes: 1}\n",
            "partitionedNodes plus sharedNodes must not exceed nodes",
        ),
    ],
    ids=[
        "bad-yaml",
        "missing-field",
        "wrong-kind",
        "no-namespace",
        "bad-tenant",
        "typo",
        "split-nodes",
    ],
)
def test_a_broken_scenario_is_refused_with_the_file_and_field(
    copy: Path, file: str, text: str, message: str
) -> None:
    (copy / file).write_text(text)
    with pytest.raises(InvalidInputError, match=message):
        scenario.load(copy)


def test_a_trigger_on_an_unknown_phase_is_refused(copy: Path) -> None:
    path = copy / "scenario.yaml"
    path.write_text(path.read_text().replace("phase: Running}", "phase: Runing}", 1))
    with pytest.raises(InvalidInputError, match="phase"):
        scenario.load(copy)
