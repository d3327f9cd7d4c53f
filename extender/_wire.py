"""Wire models of ``k8s.io/kube-scheduler/extender/v1``, the JSON kube-scheduler speaks to an extender.

Why here and why so literal: the Go types carry no JSON tags, so on the wire every field is the Go
field name (``Pod``, ``NodeNames``, ``FailedNodes``, ``Host``, ``Score``...). Python code uses
snake_case attributes; the aliases below are the wire names, and responses are always serialised
``by_alias``. Go's decoder matches keys case-insensitively, so kube-scheduler accepts our
PascalCase; we accept exactly the names it sends.

The embedded ``v1.Pod`` *does* have JSON tags (``metadata``, ``spec``...). Only the fields the
extender reads are typed; everything else is kept (``extra="allow"``) so a request round-trips and
nothing is silently lost from ``/debug`` dumps.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

MIN_EXTENDER_PRIORITY = 0
"""Lowest score an extender may return (``extenderv1.MinExtenderPriority``)."""
MAX_EXTENDER_PRIORITY = 10
"""Highest score an extender may return (``extenderv1.MaxExtenderPriority``)."""


class _Wire(BaseModel):
    """Extender structs: Go field names on the wire, snake_case in Python."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=False)

    @classmethod
    def from_wire(cls, body: bytes | str) -> Self:
        """Parse a JSON body by Go field names only (snake_case names are not the wire format)."""
        return cls.model_validate_json(body, by_alias=True, by_name=False)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict kube-scheduler expects (Go field names)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class _KubeObject(BaseModel):
    """Kubernetes API objects: their own camelCase JSON tags, unknown fields preserved."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")


class ObjectMeta(_KubeObject):
    """The part of ``metav1.ObjectMeta`` the extender reads."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ResourceRequirements(_KubeObject):
    """``requests`` / ``limits`` as quantity strings (or numbers, which kube JSON also allows)."""

    limits: dict[str, str | int | float] = Field(default_factory=dict)
    requests: dict[str, str | int | float] = Field(default_factory=dict)


class Container(_KubeObject):
    """A container; only its name, resources and (init containers) restart policy matter here."""

    name: str = ""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    restart_policy: str | None = Field(default=None, alias="restartPolicy")
    """``Always`` on an init container makes it a native sidecar (KEP-753), which changes its count."""


class Toleration(_KubeObject):
    """``v1.Toleration``."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


class SchedulingGroup(_KubeObject):
    """``v1.PodSchedulingGroup``: the native PodGroup (``scheduling.k8s.io``) the pod belongs to."""

    pod_group_name: str | None = Field(default=None, alias="podGroupName")


class PodSpec(_KubeObject):
    """The part of ``v1.PodSpec`` the extender reads."""

    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] = Field(default_factory=list, alias="initContainers")
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[Toleration] = Field(default_factory=list)
    node_name: str = Field(default="", alias="nodeName")
    priority: int | None = None
    scheduler_name: str = Field(default="", alias="schedulerName")
    scheduling_group: SchedulingGroup | None = Field(default=None, alias="schedulingGroup")


class Pod(_KubeObject):
    """``v1.Pod`` as kube-scheduler embeds it in extender requests."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


class NodeList(_KubeObject):
    """``v1.NodeList``; sent instead of ``NodeNames`` only when ``nodeCacheCapable`` is false."""

    items: list[dict[str, Any]] = Field(default_factory=list)

    @staticmethod
    def _name(item: dict[str, Any]) -> str | None:
        meta = item.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else None

    def names(self) -> list[str]:
        """The node names in order; items without a string ``metadata.name`` are skipped."""
        return [name for item in self.items if (name := self._name(item)) is not None]

    def keep(self, names: set[str]) -> NodeList:
        """The items whose name is in ``names``, unchanged and in order."""
        return NodeList(items=[item for item in self.items if self._name(item) in names])


class ExtenderArgs(_Wire):
    """Body of ``filter`` and ``prioritize``."""

    pod: Pod = Field(alias="Pod")
    nodes: NodeList | None = Field(default=None, alias="Nodes")
    node_names: list[str] | None = Field(default=None, alias="NodeNames")

    def candidate_names(self) -> list[str]:
        """Candidate node names, whichever of ``NodeNames`` / ``Nodes`` the scheduler sent."""
        if self.node_names is not None:
            return self.node_names
        if self.nodes is not None:
            return self.nodes.names()
        return []


class ExtenderFilterResult(_Wire):
    """Response of ``filter``.

    ``FailedNodes`` may be resolved by preemption; ``FailedAndUnresolvableNodes`` cannot (for
    example a gang pod on any node but its planned one), which spares kube-scheduler a useless
    preemption attempt there.
    """

    nodes: NodeList | None = Field(default=None, alias="Nodes")
    node_names: list[str] | None = Field(default=None, alias="NodeNames")
    failed_nodes: dict[str, str] = Field(default_factory=dict, alias="FailedNodes")
    failed_and_unresolvable_nodes: dict[str, str] = Field(
        default_factory=dict, alias="FailedAndUnresolvableNodes"
    )
    error: str = Field(default="", alias="Error")


class HostPriority(_Wire):
    """One entry of the ``prioritize`` response (``HostPriorityList`` is a bare JSON array)."""

    host: str = Field(alias="Host")
    score: int = Field(alias="Score", ge=MIN_EXTENDER_PRIORITY, le=MAX_EXTENDER_PRIORITY)


class ExtenderBindingArgs(_Wire):
    """Body of ``bind`` (kubegang does not configure a bind verb; see docs/extender.md)."""

    pod_name: str = Field(alias="PodName")
    pod_namespace: str = Field(alias="PodNamespace")
    pod_uid: str = Field(alias="PodUID")
    node: str = Field(alias="Node")


class ExtenderBindingResult(_Wire):
    """Response of ``bind``."""

    error: str = Field(default="", alias="Error")


class MetaPod(_Wire):
    """A pod named by UID only (``nodeCacheCapable`` preemption)."""

    uid: str = Field(alias="UID")


class MetaVictims(_Wire):
    """Victims on one node, by UID."""

    pods: list[MetaPod] = Field(default_factory=list, alias="Pods")
    num_pdb_violations: int = Field(default=0, alias="NumPDBViolations")


class Victims(_Wire):
    """Victims on one node, as full pods (sent when ``nodeCacheCapable`` is false)."""

    pods: list[Pod] = Field(default_factory=list, alias="Pods")
    num_pdb_violations: int = Field(default=0, alias="NumPDBViolations")

    def to_meta(self) -> MetaVictims:
        """The same victims named by UID, the shape every preemption response uses."""
        return MetaVictims(
            pods=[MetaPod(uid=p.metadata.uid) for p in self.pods],
            num_pdb_violations=self.num_pdb_violations,
        )


class ExtenderPreemptionArgs(_Wire):
    """Body of ``preempt``: the preemptor and kube-scheduler's candidate victims per node."""

    pod: Pod = Field(alias="Pod")
    node_name_to_victims: dict[str, Victims] | None = Field(default=None, alias="NodeNameToVictims")
    node_name_to_meta_victims: dict[str, MetaVictims] | None = Field(
        default=None, alias="NodeNameToMetaVictims"
    )

    def meta_victims(self) -> dict[str, MetaVictims]:
        """Candidates by UID, whichever form the scheduler sent."""
        if self.node_name_to_meta_victims is not None:
            return self.node_name_to_meta_victims
        if self.node_name_to_victims is not None:
            return {node: v.to_meta() for node, v in self.node_name_to_victims.items()}
        return {}


class ExtenderPreemptionResult(_Wire):
    """Response of ``preempt``: the nodes (and victims) kube-scheduler may still use."""

    node_name_to_meta_victims: dict[str, MetaVictims] = Field(
        default_factory=dict, alias="NodeNameToMetaVictims"
    )
