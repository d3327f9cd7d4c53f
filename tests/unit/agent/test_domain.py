"""The NVLink domain rule: registered, successful, non-zero cluster UUID, and every GPU agrees."""

from __future__ import annotations

from kubegang.agent import domain_id, nvlink_domain
from kubegang.agent._snapshot import FabricReading, GpuReadings

CLUSTER = "7a1c3e52-9f4b-4c1d-8e2a-5b6f0d3c9a81"
ZERO = "00000000-0000-0000-0000-000000000000"


def gpus(*fabrics: FabricReading | None) -> list[GpuReadings]:
    return [GpuReadings(index=i, fabric=f) for i, f in enumerate(fabrics)]


def fabric(cluster: str = CLUSTER, clique: int = 7, state: int = 3, status: int = 0) -> FabricReading:
    return FabricReading(cluster_uuid=cluster, clique_id=clique, state=state, status=status)


def test_completed_success_nonzero_uuid_is_a_domain() -> None:
    verdict = nvlink_domain(gpus(fabric(), fabric()))
    assert verdict.domain is not None and verdict.domain.id == f"{CLUSTER}.7"
    assert (verdict.status, verdict.reason) == ("True", "FabricRegistered")


def test_domain_id_is_the_gpu_feature_discovery_clique_and_a_valid_label() -> None:
    value = domain_id(CLUSTER, 4294967295)
    assert value == f"{CLUSTER}.4294967295" and len(value) <= 63


def test_clique_alone_is_not_a_domain() -> None:
    verdict = nvlink_domain(gpus(fabric(cluster=ZERO, clique=5)))
    assert verdict.domain is None and verdict.reason == "FabricZeroClusterUuid"


def test_registration_not_finished_is_not_a_domain() -> None:
    for state, reason in ((1, "FabricRegistrationIncomplete"), (2, "FabricRegistrationIncomplete")):
        verdict = nvlink_domain(gpus(fabric(), fabric(state=state)))
        assert verdict.domain is None and verdict.reason == reason and "gpu 1" in verdict.message


def test_failed_registration_is_not_a_domain_even_with_a_uuid() -> None:
    verdict = nvlink_domain(gpus(fabric(status=23)))
    assert verdict.domain is None and "Insufficient Resources" in verdict.message


def test_gpus_that_disagree_are_not_a_domain() -> None:
    verdict = nvlink_domain(gpus(fabric(clique=1), fabric(clique=2)))
    assert verdict.domain is None and verdict.reason == "FabricInconsistent"


def test_one_unreadable_gpu_withholds_the_claim() -> None:
    verdict = nvlink_domain(gpus(fabric(), None))
    assert verdict.domain is None and (verdict.status, verdict.reason) == ("Unknown", "FabricUnknown")


def test_unsupported_fabric_and_no_gpus() -> None:
    assert nvlink_domain(gpus(fabric(cluster=ZERO, clique=0, state=0))).reason == "FabricNotSupported"
    assert nvlink_domain([]).domain is None


def test_fabric_health_is_reported_with_the_domain() -> None:
    sick = FabricReading(cluster_uuid=CLUSTER, clique_id=7, state=3, status=0, health_summary=3)
    verdict = nvlink_domain(gpus(fabric(), sick))
    assert verdict.domain is not None and verdict.domain.health == "LimitedCapacity"
    assert "LimitedCapacity" in verdict.message
