"""CPU of lightkube's Pod model per pod creation: ``python -m bench.e2e.create_cost [--rounds N]``.

The leader creates every pod through ``lightkube.AsyncClient.create``, which turns the manifest into a
``Pod`` dataclass, back into a dict for the request, and decodes the answer into a ``Pod`` again. A
profile shows ``KubeApi.create`` as the leader's largest task, so before replacing the model with a
plain-dict resource this measures what the model itself costs: the same round trip done both ways
(no network; a pod rendered by the operator's ``build_gang`` and a realistic answer with defaults,
status and managedFields).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from lightkube import codecs
from lightkube.generic_resource import GenericNamespacedResource, create_api_info
from lightkube.resources.core_v1 import Pod

from kubegang.api import Placement, ReplicaPlacement
from kubegang.operator._gang_objects import build_gang
from kubegang.operator._job import job_view


class _DictPod(GenericNamespacedResource):
    """A Pod as lightkube's generic dict resource (what a model-free create would send)."""

    _api_info = create_api_info("", "v1", "Pod", "pods")


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpujob-torchrun.yaml"
"""The GPUJob whose first pod is measured: a shipped example, rendered by the operator's own code."""


def gang_pod() -> dict[str, Any]:
    """The first pod the operator's ``build_gang`` writes for ``EXAMPLE``, its replicas on 8-GPU nodes."""
    body = next(doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc and doc.get("kind") == "GPUJob")
    body["metadata"].setdefault("namespace", "team-a")
    body["metadata"].setdefault("uid", "1234-5678")
    job = job_view(body)
    slots = [ReplicaPlacement(index=i, node=f"node-{i}", gpus=list(range(8))) for i in range(job.replicas)]
    return build_gang(job, Placement(pods=slots, domain="leaf-1")).pods[0]


def api_answer(pod: dict[str, Any]) -> str:
    """What the API server sends back for ``pod``: defaults, status and managedFields added."""
    answer = copy.deepcopy(pod)
    answer["metadata"].update({
        "uid": "abcd", "resourceVersion": "12345", "creationTimestamp": "2026-12-02T20:00:00Z",
        "managedFields": [{"manager": "kubegang", "operation": "Update", "apiVersion": "v1",
                           "time": "2026-12-02T20:00:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}}}],
    })
    answer["spec"].update({
        "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0, "securityContext": {}, "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
        "volumes": [{"name": "kube-api-access-x", "projected": {
            "defaultMode": 420, "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
    })
    answer["spec"]["containers"][0].update({
        "imagePullPolicy": "Always", "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"mountPath": "/var/run/secrets", "name": "kube-api-access-x", "readOnly": True}],
    })
    answer["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    return json.dumps(answer)


def cpu_per_call(fn: Callable[[], object], calls: int) -> float:
    """Process CPU seconds per call of ``fn``."""
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    pod, answer = gang_pod(), api_answer(gang_pod())

    def with_model() -> object:
        model: Any = codecs.from_dict(dict(pod))
        json.dumps(model.to_dict())
        decoded: Any = Pod.from_dict(json.loads(answer))
        return decoded.metadata

    def as_dict() -> object:
        obj: Any = _DictPod(**pod)
        json.dumps(obj.to_dict())
        return _DictPod.from_dict(json.loads(answer)).metadata

    for round_ in range(args.rounds):
        model, plain = cpu_per_call(with_model, args.calls), cpu_per_call(as_dict, args.calls)
        print(f"round {round_ + 1}: Pod model {model * 1e6:.1f} us, dict resource {plain * 1e6:.1f} us per create "
              f"(difference {(model - plain) * 1e6:.1f} us)")


if __name__ == "__main__":
    main()
