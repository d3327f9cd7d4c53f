"""Builders for GPUJob objects and pods used by the operator's unit tests."""

from __future__ import annotations

from typing import Any

import pytest


def make_job_body(
    name: str = "train",
    *,
    namespace: str = "team-a",
    uid: str | None = None,
    replicas: int = 2,
    gpus: int = 8,
    queue: str = "team-a",
    framework: str = "none",
    status: dict[str, Any] | None = None,
    created: str = "2025-01-01T00:00:00Z",
    **spec: Any,
) -> dict[str, Any]:
    """A GPUJob object as the API server returns it."""
    return {
        "apiVersion": "kubegang.io/v1alpha1",
        "kind": "GPUJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": {
            "replicas": replicas,
            "queue": queue,
            "framework": framework,
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:1",
                            "env": [{"name": "USER_VAR", "value": "1"}, {"name": "RANK", "value": "bogus"}],
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                        }
                    ]
                },
            },
            **spec,
        },
        "status": status or {},
    }


@pytest.fixture
def job_body() -> Any:
    return make_job_body
