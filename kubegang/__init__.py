"""kubegang: gang scheduling, topology-aware placement and hierarchical GPU quotas for Kubernetes.

The pure core, each package with its public API in its ``__init__``:

- ``kubegang.api``: GPUJob, GPUQueue, GPUNode models (the single source of ``crds/``);
- ``kubegang.topology``: node facts and labels -> validated graph -> compiled index;
- ``kubegang.placement``: gang requests, the transactional snapshot, ``plan()``;
- ``kubegang.preemption``: the smallest set of whole gangs whose eviction lets a gang run;
- ``kubegang.quota``: the GPUQueue tree, fair share, admission order, preemption candidates;
- ``kubegang.levels``, ``kubegang.podcontract``, ``kubegang.shapes``, ``kubegang.tls``: shared vocabulary;
- ``kubegang.backoff``: the one jittered exponential backoff every watch and retry loop uses.
- ``kubegang.authn``: who may read ``/metrics`` and ``/debug/snapshot`` (TokenReview, SubjectAccessReview).

The processes built on it (``kubegang.operator``, ``kubegang.extender``, ``kubegang.agent``) import
the core; the core imports none of them. Nothing is re-exported here, so starting one process
does not pay for importing the others' dependencies.
"""

__version__ = "0.1.0"
