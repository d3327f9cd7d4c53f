from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Toleration(_message.Message):
    __slots__ = ("key", "operator", "value", "effect")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    key: str
    operator: str
    value: str
    effect: str
    def __init__(self, key: _Optional[str] = ..., operator: _Optional[str] = ..., value: _Optional[str] = ..., effect: _Optional[str] = ...) -> None: ...

class Gang(_message.Message):
    __slots__ = ("job_uid", "namespace", "name", "pods", "gpus_per_pod", "gpu_fraction_milli", "cpu_milli_per_pod", "memory_mib_per_pod", "gpu_product", "mig_profile", "node_selector", "tolerations", "required_level", "preferred_level", "excluded_nodes", "priority", "preferred_domain")
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_UID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_POD_FIELD_NUMBER: _ClassVar[int]
    GPU_FRACTION_MILLI_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_PER_POD_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_PER_POD_FIELD_NUMBER: _ClassVar[int]
    GPU_PRODUCT_FIELD_NUMBER: _ClassVar[int]
    MIG_PROFILE_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_LEVEL_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_NODES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    job_uid: str
    namespace: str
    name: str
    pods: int
    gpus_per_pod: int
    gpu_fraction_milli: int
    cpu_milli_per_pod: int
    memory_mib_per_pod: int
    gpu_product: str
    mig_profile: str
    node_selector: _containers.ScalarMap[str, str]
    tolerations: _containers.RepeatedCompositeFieldContainer[Toleration]
    required_level: str
    preferred_level: str
    excluded_nodes: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    preferred_domain: str
    def __init__(self, job_uid: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., pods: _Optional[int] = ..., gpus_per_pod: _Optional[int] = ..., gpu_fraction_milli: _Optional[int] = ..., cpu_milli_per_pod: _Optional[int] = ..., memory_mib_per_pod: _Optional[int] = ..., gpu_product: _Optional[str] = ..., mig_profile: _Optional[str] = ..., node_selector: _Optional[_Mapping[str, str]] = ..., tolerations: _Optional[_Iterable[_Union[Toleration, _Mapping]]] = ..., required_level: _Optional[str] = ..., preferred_level: _Optional[str] = ..., excluded_nodes: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., preferred_domain: _Optional[str] = ...) -> None: ...

class PodPlacement(_message.Message):
    __slots__ = ("pod_index", "node", "gpu_indices", "gpu_milli")
    POD_INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    GPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    pod_index: int
    node: str
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    gpu_milli: int
    def __init__(self, pod_index: _Optional[int] = ..., node: _Optional[str] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., gpu_milli: _Optional[int] = ...) -> None: ...

class Domain(_message.Message):
    __slots__ = ("level", "id")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    level: str
    id: str
    def __init__(self, level: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class GangPlacement(_message.Message):
    __slots__ = ("pods", "domain", "preferred_met", "score")
    PODS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_MET_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    pods: _containers.RepeatedCompositeFieldContainer[PodPlacement]
    domain: Domain
    preferred_met: bool
    score: float
    def __init__(self, pods: _Optional[_Iterable[_Union[PodPlacement, _Mapping]]] = ..., domain: _Optional[_Union[Domain, _Mapping]] = ..., preferred_met: _Optional[bool] = ..., score: _Optional[float] = ...) -> None: ...

class Shortfall(_message.Message):
    __slots__ = ("level", "best_domain", "best_pods", "never")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    BEST_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    BEST_PODS_FIELD_NUMBER: _ClassVar[int]
    NEVER_FIELD_NUMBER: _ClassVar[int]
    level: str
    best_domain: str
    best_pods: int
    never: bool
    def __init__(self, level: _Optional[str] = ..., best_domain: _Optional[str] = ..., best_pods: _Optional[int] = ..., never: _Optional[bool] = ...) -> None: ...

class PlanRequest(_message.Message):
    __slots__ = ("gang",)
    GANG_FIELD_NUMBER: _ClassVar[int]
    gang: Gang
    def __init__(self, gang: _Optional[_Union[Gang, _Mapping]] = ...) -> None: ...

class PlanResponse(_message.Message):
    __slots__ = ("feasible", "placement", "reasons", "shortfall", "room_epoch")
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    SHORTFALL_FIELD_NUMBER: _ClassVar[int]
    ROOM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    feasible: bool
    placement: GangPlacement
    reasons: _containers.RepeatedScalarFieldContainer[str]
    shortfall: Shortfall
    room_epoch: int
    def __init__(self, feasible: _Optional[bool] = ..., placement: _Optional[_Union[GangPlacement, _Mapping]] = ..., reasons: _Optional[_Iterable[str]] = ..., shortfall: _Optional[_Union[Shortfall, _Mapping]] = ..., room_epoch: _Optional[int] = ...) -> None: ...

class RoomRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RoomResponse(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ("gang", "placement", "ttl_seconds")
    GANG_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    gang: Gang
    placement: GangPlacement
    ttl_seconds: int
    def __init__(self, gang: _Optional[_Union[Gang, _Mapping]] = ..., placement: _Optional[_Union[GangPlacement, _Mapping]] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("reserved", "placement", "reasons", "expires_at_unix_ms", "shortfall")
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SHORTFALL_FIELD_NUMBER: _ClassVar[int]
    reserved: bool
    placement: GangPlacement
    reasons: _containers.RepeatedScalarFieldContainer[str]
    expires_at_unix_ms: int
    shortfall: Shortfall
    def __init__(self, reserved: _Optional[bool] = ..., placement: _Optional[_Union[GangPlacement, _Mapping]] = ..., reasons: _Optional[_Iterable[str]] = ..., expires_at_unix_ms: _Optional[int] = ..., shortfall: _Optional[_Union[Shortfall, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("job_uid",)
    JOB_UID_FIELD_NUMBER: _ClassVar[int]
    job_uid: str
    def __init__(self, job_uid: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released", "gpus_freed")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    GPUS_FREED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    gpus_freed: int
    def __init__(self, released: _Optional[bool] = ..., gpus_freed: _Optional[int] = ...) -> None: ...

class WhatIfRequest(_message.Message):
    __slots__ = ("gang", "candidate_job_uids", "gone_job_uids")
    GANG_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_JOB_UIDS_FIELD_NUMBER: _ClassVar[int]
    GONE_JOB_UIDS_FIELD_NUMBER: _ClassVar[int]
    gang: Gang
    candidate_job_uids: _containers.RepeatedScalarFieldContainer[str]
    gone_job_uids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, gang: _Optional[_Union[Gang, _Mapping]] = ..., candidate_job_uids: _Optional[_Iterable[str]] = ..., gone_job_uids: _Optional[_Iterable[str]] = ...) -> None: ...

class WhatIfResponse(_message.Message):
    __slots__ = ("feasible", "victim_job_uids", "placement", "reasons", "shortfall")
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    VICTIM_JOB_UIDS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    SHORTFALL_FIELD_NUMBER: _ClassVar[int]
    feasible: bool
    victim_job_uids: _containers.RepeatedScalarFieldContainer[str]
    placement: GangPlacement
    reasons: _containers.RepeatedScalarFieldContainer[str]
    shortfall: Shortfall
    def __init__(self, feasible: _Optional[bool] = ..., victim_job_uids: _Optional[_Iterable[str]] = ..., placement: _Optional[_Union[GangPlacement, _Mapping]] = ..., reasons: _Optional[_Iterable[str]] = ..., shortfall: _Optional[_Union[Shortfall, _Mapping]] = ...) -> None: ...

class RepairRequest(_message.Message):
    __slots__ = ("gang", "ttl_seconds")
    GANG_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    gang: Gang
    ttl_seconds: int
    def __init__(self, gang: _Optional[_Union[Gang, _Mapping]] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class Displacement(_message.Message):
    __slots__ = ("pod_index", "node", "intruder")
    POD_INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    INTRUDER_FIELD_NUMBER: _ClassVar[int]
    pod_index: int
    node: str
    intruder: str
    def __init__(self, pod_index: _Optional[int] = ..., node: _Optional[str] = ..., intruder: _Optional[str] = ...) -> None: ...

class RepairResponse(_message.Message):
    __slots__ = ("feasible", "placement", "displaced", "reasons", "shortfall")
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    DISPLACED_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    SHORTFALL_FIELD_NUMBER: _ClassVar[int]
    feasible: bool
    placement: GangPlacement
    displaced: _containers.RepeatedCompositeFieldContainer[Displacement]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    shortfall: Shortfall
    def __init__(self, feasible: _Optional[bool] = ..., placement: _Optional[_Union[GangPlacement, _Mapping]] = ..., displaced: _Optional[_Iterable[_Union[Displacement, _Mapping]]] = ..., reasons: _Optional[_Iterable[str]] = ..., shortfall: _Optional[_Union[Shortfall, _Mapping]] = ...) -> None: ...
