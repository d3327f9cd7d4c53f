"""Which jobs changed since a reader last looked: the leader's loops look only at those.

The supervisor decides per job from the job, its pods and the clock; a job whose object, assumed status
and pods are the same as at its last look gets the same decision, so looking at every job on every step
(2,000 of them during a burst, most of them Running and fine) is work proportional to the cluster, not
to what happened. The cache marks the UID of every job it changes (watch events, assumptions) in each
reader's ``ChangedJobs``; a reader takes the set when it looks and is left with what changed since.
"""

from __future__ import annotations


class ChangedJobs:
    """The UIDs of jobs whose object, assumed status or pods changed since the reader last took them."""

    def __init__(self) -> None:
        self._uids: set[str] = set()

    def mark(self, uid: str) -> None:
        """Job ``uid`` changed (or was deleted: the reader finds it gone)."""
        self._uids.add(uid)

    def take(self) -> set[str]:
        """Every UID marked since the last take; the set starts empty again."""
        taken, self._uids = self._uids, set()
        return taken
