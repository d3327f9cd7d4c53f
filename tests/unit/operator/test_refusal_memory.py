"""The leader asks the extender once per refusal while nothing frees room (the room epoch), over the
production adapters and the real ledger: a job blocked on GPUs is not planned again at every step, and
is planned and admitted at the first step after a gang ends."""

from __future__ import annotations

from .conftest import World, make_job_body


def plans(w: World) -> int:
    return sum(verb == "plan" for verb, _ in w.client.requests)


async def test_a_blocked_job_is_planned_once_until_a_gang_ends_then_admitted() -> None:
    w = World({"team-a": 64}, {"node-0": 8, "node-1": 8})
    w.submit(make_job_body("first", replicas=2, gpus=8))
    [first] = await w.cycle()
    assert first.result.value == "Admitted"
    w.echo_pods()  # bound and Running: the ledger holds both nodes (a bind moves no epoch)
    w.submit(make_job_body("second", replicas=1, gpus=8))
    [blocked] = await w.cycle()
    assert blocked.reason == "InsufficientGPUs" and plans(w) == 2
    for _ in range(3):
        [again] = await w.cycle()
        assert (again.reason, again.message) == (blocked.reason, blocked.message)
    assert plans(w) == 2 and w.client.rooms == 5
    for pod in w.kube.pods():  # the first gang's pods succeed
        w.see_pod({**pod, "spec": {**pod["spec"], "nodeName": pod["metadata"]["annotations"]["kubegang.io/node"]},
                   "status": {"phase": "Succeeded"}})
    outcomes = {o.job: o for o in await w.cycle()}
    assert outcomes["team-a/second"].result.value == "Admitted" and plans(w) == 3
