"""A replica that lost the Lease exits within a bound, whatever it was doing (as client-go's leaders do)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

STUCK = """
import threading
from kubegang.operator._run import exit_after
exit_after({grace}, 1)
threading.Thread(target=threading.Event().wait).start()  # non-daemon: the interpreter would wait for it forever
"""


def _run(grace: float) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-c", STUCK.format(grace=grace)],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr


def test_a_stop_that_hangs_is_cut_short_with_the_stacks_written() -> None:
    status, stderr = _run(0.5)
    assert status == 1
    assert "exiting now (status 1)" in stderr
    assert "Thread 0x" in stderr  # faulthandler's stacks, to find what held the stop


def test_a_bound_that_is_not_reached_changes_nothing() -> None:
    # The process ends on its own (the timer's thread is a daemon and does not hold it).
    done = subprocess.run([sys.executable, "-c",
                           "from kubegang.operator._run import exit_after\nexit_after(30, 1)\nprint('done')"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert "exiting now" not in done.stderr


async def test_abandon_cancels_the_gangs_in_creation(job_body: Any, make_world: Any) -> None:
    w = make_world({"team-a": 16}, {"node-0": 8, "node-1": 8})
    never = asyncio.Event()
    created = w.kube.create

    async def stuck_create(manifest: Any) -> bool:
        await never.wait()  # an API server that stopped answering
        return bool(await created(manifest))

    w.kube.create = stuck_create
    w.submit(job_body("train", replicas=2, gpus=8))
    await w.admission.run_cycle()
    for _ in range(20):  # the admission is recorded in the background, then the pods are asked for
        await asyncio.sleep(0)
    assert w.admission.creating("uid-train")
    w.admission.abandon()
    await asyncio.wait_for(w.admission.abandoned(), 2)
    assert not w.admission.creating("uid-train")
    assert w.kube.pods() == []
