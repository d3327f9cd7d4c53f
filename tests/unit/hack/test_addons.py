"""hack/addons.py: which of Kueue's webhooks are registered, and where they point (issue 17).

The narrowing is what keeps the shared local cluster safe with Kueue beside kubegang: only Kueue's
own objects and the enabled integrations' labelled objects ever wait for its webhook. The e2e tests
(tests/e2e/test_neighbours.py) prove it against the real binary; these check the rule on its own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))
import addons


def _hook(name: str, group: str, resource: str, path: str) -> dict[str, Any]:
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": [resource]}]}


MANIFESTS = yaml.safe_dump_all([{
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "mutating-webhook-configuration"},
    "webhooks": [_hook("mjob.kb.io", "batch", "jobs", "/mutate-batch-v1-job"),
                 _hook("mpod.kb.io", "", "pods", "/mutate--v1-pod"),
                 _hook("mjobset.kb.io", "jobset.x-k8s.io", "jobsets", "/mutate-jobset"),
                 _hook("mclusterqueue.kb.io", "kueue.x-k8s.io", "clusterqueues", "/mutate-cq")],
}])


def test_only_kueue_and_its_enabled_integrations_keep_a_webhook_pointed_at_loopback() -> None:
    [config] = addons.kueue_webhook_configurations(MANIFESTS, "https://127.0.0.1:9443", "Q0E=")
    assert config["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    hooks = {h["name"]: h for h in config["webhooks"]}
    assert set(hooks) == {"mjob.kb.io", "mpod.kb.io", "mclusterqueue.kb.io"}  # no JobSet integration
    assert hooks["mjob.kb.io"]["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-batch-v1-job",
                                                   "caBundle": "Q0E="}


def test_integration_webhooks_see_only_objects_labelled_for_kueue_outside_system_namespaces() -> None:
    [config] = addons.kueue_webhook_configurations(MANIFESTS, "https://127.0.0.1:9443", "Q0E=")
    hooks = {h["name"]: h for h in config["webhooks"]}
    for name in ("mjob.kb.io", "mpod.kb.io"):
        assert hooks[name]["objectSelector"] == {"matchExpressions": [
            {"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]}
        assert hooks[name]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    # Kueue's own objects always go through it (validation, defaulting).
    assert "objectSelector" not in hooks["mclusterqueue.kb.io"]


def test_an_unknown_addon_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="unknown add-on 'slurm': allowed are kueue, kuberay"):
        addons.addon("slurm")
