"""The generated CRDs in a real kube-apiserver: they apply, the examples and the valid table cases
are accepted, and every invalid case of tests/unit/api/validation-cases.yaml is refused by
``kubectl apply`` with a message that names the field (the same table the Python models pass).

Manifests go through ``--dry-run=server``: the full server-side path (decoding with strict field
validation, OpenAPI schema, CEL rules, admission) runs, but nothing persists, so cluster-scoped
example queues cannot collide with other tests' queues and no operator acts on example jobs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kubegang.api import parse_manifest

REPO = Path(__file__).resolve().parents[2]
Cluster = Any  # the `cluster` fixture's object (tests/e2e/conftest.py)


def _load_cases() -> ModuleType:
    path = REPO / "tests" / "unit" / "api" / "cases.py"
    spec = importlib.util.spec_from_file_location("kubegang_api_cases_e2e", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


CASES = _load_cases()
INVALID = CASES.load("invalid")
VALID = CASES.load("valid")
EXAMPLES = sorted((REPO / "examples").glob("gpu*.yaml"))


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    names = [f"crd/{path.name.removesuffix('.yaml')}" for path in sorted((REPO / "crds").glob("*.yaml"))]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    return cluster


@pytest.fixture(scope="module")
def namespace(crds: Cluster) -> Iterator[str]:
    """One namespace for the whole table (the per-test fixture's names would collide here)."""
    name = f"crd-validation-{os.getpid() % 100000}"
    crds.kubectl("create", "namespace", name)
    yield name
    crds.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _in(namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    if "namespace" in manifest.get("metadata", {}):
        manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    return manifest


def _dry_run(cluster: Cluster, manifest: dict[str, Any]) -> Any:
    return cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(manifest), check=False)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_is_accepted(crds: Cluster, namespace: str, path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        proc = _dry_run(crds, _in(namespace, document))
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("case", VALID, ids=lambda c: c.name.replace(" ", "-"))
def test_valid_case_is_accepted(crds: Cluster, namespace: str, case: Any) -> None:
    proc = _dry_run(crds, _in(namespace, case.manifest))
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def refusals(crds: Cluster, namespace: str) -> dict[str, str]:
    """Every invalid case through ``kubectl apply --dry-run=server`` once: its stderr by case name ("" when
    it was accepted), for the per-case test and for the check over all CEL rules."""
    out = {}
    for case in INVALID:
        proc = _dry_run(crds, _in(namespace, case.manifest))
        out[case.name] = proc.stderr if proc.returncode != 0 else ""
    return out


def _cel_messages() -> set[str]:
    """The message of every ``x-kubernetes-validations`` rule in the generated CRDs."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.update(rule["message"] for rule in node.get("x-kubernetes-validations") or ())
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted((REPO / "crds").glob("*.yaml")):
        walk(yaml.safe_load(path.read_text(encoding="utf-8")))
    return found


def _model_error(manifest: dict[str, Any]) -> str:
    try:
        parse_manifest(manifest)
    except ValidationError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.name.replace(" ", "-"))
def test_invalid_case_is_refused_naming_the_field(refusals: dict[str, str], case: Any) -> None:
    stderr = refusals[case.name]
    assert stderr, f"{case.name} was accepted"
    assert case.field in stderr, stderr


def test_every_cel_rule_refuses_with_the_models_own_message(refusals: dict[str, str], namespace: str) -> None:
    """docs/api.md: "A CEL rule's message is the model's own". Wherever the API server refuses with CEL
    messages, the Python model refuses the same manifest with one of them (the API server reports every
    rule that fails; the model stops at the first, as pydantic skips a model's own checks once a field
    failed), and every CEL rule of the CRDs is met that way, word for word, by at least one case."""
    messages = _cel_messages()
    assert len(messages) >= 10, messages  # the CRDs carry their rules: an empty set would pass vacuously
    seen: set[str] = set()
    for case in INVALID:
        answered = {message for message in messages if message in refusals[case.name]}
        if not answered:
            continue
        model = _model_error(_in(namespace, case.manifest))
        shared = {message for message in answered if message in model}
        assert shared, f"{case.name}: the API server said {sorted(answered)}; the model said {model!r}"
        seen |= shared
    assert messages <= seen, f"CEL rules that no case shows in both: {sorted(messages - seen)}"


def test_gpus_per_replica_beside_a_template_gpu_is_refused_naming_both_fields(crds: Cluster, namespace: str) -> None:
    """docs/api.md, `gpusPerReplica`: not together with a GPU limit or request in the template (containers
    or init containers); the schema refuses that naming both fields."""
    base = next(c for c in VALID if c.name == "gpusPerReplica without a template limit").manifest
    gpu = {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}
    for where in ("containers", "initContainers"):
        manifest = yaml.safe_load(yaml.safe_dump(base))
        pod = manifest["spec"]["template"]["spec"]
        if where == "containers":
            pod["containers"][0]["resources"] = gpu
        else:
            pod["initContainers"] = [{"name": "init", "image": "busybox", "resources": gpu}]
        proc = _dry_run(crds, _in(namespace, manifest))
        assert proc.returncode != 0, f"gpusPerReplica beside a GPU in {where} was accepted"
        assert "gpusPerReplica" in proc.stderr and "spec.template" in proc.stderr, proc.stderr


def test_status_phase_takes_the_documented_values_and_pending(crds: Cluster, namespace: str) -> None:
    """docs/api.md, GPUJob status: the schema accepts every phase the operator writes and `Pending`,
    which this version does not write; anything else is refused naming `status.phase`."""
    job = _in(namespace, next(c for c in VALID if c.name == "the base job").manifest)
    job = {**job, "metadata": {**job["metadata"], "name": "phase-values"}}
    crds.apply(job)

    def patch(phase: str) -> Any:
        return crds.kubectl("patch", "gpujob", "phase-values", "-n", namespace, "--subresource=status",
                            "--type=merge", "-p", f'{{"status": {{"phase": "{phase}"}}}}', "--dry-run=server",
                            check=False)

    for phase in ("Pending", "Queued", "Admitted", "Running", "Succeeded", "Failed", "Suspended", "Unschedulable"):
        proc = patch(phase)
        assert proc.returncode == 0, (phase, proc.stderr)
    refused = patch("Starting")
    assert refused.returncode != 0 and "status.phase" in refused.stderr, refused.stderr


def test_kubectl_explain_shows_the_models_field_descriptions(crds: Cluster) -> None:
    # docs/api.md promises it: the CRD's descriptions come from the models' field docstrings.
    from kubegang.api import GPUJobSpec

    # The API server publishes a new CRD's OpenAPI a few seconds after it is Established.
    crds.wait_for("GPUJob's OpenAPI schema to be published", lambda: crds.kubectl(
        "explain", "gpujob.spec", check=False).returncode == 0, timeout=60, interval=1)
    for name, field in GPUJobSpec.model_fields.items():
        wire = field.alias or name
        words = " ".join((field.description or "").replace("``", "`").split())[:40]  # crdgen: RST to Markdown
        assert words, f"GPUJobSpec.{name} has no description"
        out = " ".join(crds.kubectl("explain", f"gpujob.spec.{wire}").stdout.split())
        assert f"FIELD: {wire}" in out and words in out, f"kubectl explain gpujob.spec.{wire}: {out[:500]}"


def test_defaults_and_printer_columns(crds: Cluster, namespace: str) -> None:
    job = _in(namespace, next(c for c in VALID if c.name == "the base job").manifest)
    crds.apply(job)
    stored = crds.get_json("gpujob", job["metadata"]["name"], "-n", namespace)
    assert stored["spec"]["restartLimit"] == 3 and stored["spec"]["gangTimeoutSeconds"] == 300
    assert stored["spec"]["framework"] == "none" and stored["spec"]["topology"] == {}
    header = crds.kubectl("get", "gj", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "QUEUE", "PHASE", "REASON", "READY", "REPLICAS", "GPUS", "AGE"]
    by_category = crds.kubectl("get", "kubegang", "-n", namespace, "-o", "name").stdout.split()
    assert f"gpujob.kubegang.io/{job['metadata']['name']}" in by_category


def test_every_kind_answers_to_its_short_name_and_category_and_queues_select_by_parent(crds: Cluster) -> None:
    """docs/api.md: GPUJob `gj`, GPUQueue `gq`, GPUNode `gn`, all three in category `kubegang`; `kubectl get
    gq --field-selector spec.parent=NAME` lists a parent's children."""
    rows = crds.kubectl("api-resources", "--api-group=kubegang.io", "--no-headers").stdout.splitlines()
    short = {row.split()[0]: row.split()[1] for row in rows}
    assert short == {"gpujobs": "gj", "gpunodes": "gn", "gpuqueues": "gq"}
    in_category = crds.kubectl("api-resources", "--categories=kubegang", "-o", "name").stdout.split()
    assert sorted(in_category) == ["gpujobs.kubegang.io", "gpunodes.kubegang.io", "gpuqueues.kubegang.io"]
    suffix = os.getpid() % 100000
    parent, child, other = f"crd-e2e-root-{suffix}", f"crd-e2e-leaf-{suffix}", f"crd-e2e-other-{suffix}"
    queues = [{"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name}, "spec": spec}
              for name, spec in ((parent, {}), (child, {"parent": parent}), (other, {}))]
    try:
        crds.apply(queues)
        selected = crds.kubectl("get", "gq", "--field-selector", f"spec.parent={parent}", "-o", "name").stdout.split()
        assert selected == [f"gpuqueue.kubegang.io/{child}"]
        listed = crds.kubectl("get", "kubegang", "-o", "name").stdout.split()
        assert {f"gpuqueue.kubegang.io/{name}" for name in (parent, child, other)} <= set(listed)
    finally:
        crds.kubectl("delete", "gq", child, parent, other, "--ignore-not-found", "--wait=false", check=False)
