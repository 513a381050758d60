"""Wire models shared by the Kueue kinds and the batch/v1 Job: metadata, conditions, label
selectors, tolerations, taints and the pod template fields pykueue reads.

Conventions of every model in ``app.models`` (pydantic v2, no logic):

- camelCase on the wire, snake_case in Python (``cohort_name`` <-> ``cohortName``); both names
  are accepted when building a model in Python.
- Round-trip exact: ``Model.from_wire(d).to_wire() == d`` for any JSON ``d`` the API server
  returns. ``to_wire`` dumps only the fields that were set (read or assigned), so defaults
  never appear on the wire by accident, and keeps unknown fields (``extra="allow"``): an
  object pykueue writes back loses nothing it did not know about.
- Quantities stay as written (``Quantity``: ``"500m"``, ``"4Gi"``, ``4``); convert them with
  ``app.core.quantity`` where arithmetic is needed. Timestamps stay RFC 3339 strings.
- Kueue enums are ``Literal`` types (the CRDs in ``manifests/crds`` reject other values);
  Kubernetes-owned fields are plain strings.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"

Quantity = int | float | str
"""A Kubernetes quantity as written on the wire: ``"500m"``, ``"4Gi"``, ``4``."""

ResourceList = dict[str, Quantity]
"""``{resource name: quantity}`` (core/v1 ResourceList)."""


class WireModel(BaseModel):
    """Base of every wire model: camelCase aliases, unknown fields kept, exact round-trip."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    @classmethod
    def from_wire(cls, data: Any) -> Self:
        """Parse the JSON (``dict``) of an object as the API server sends it.

        Raises ``pydantic.ValidationError`` naming the field when a known field has the wrong
        shape.
        """
        return cls.model_validate(data)

    def to_wire(self) -> dict[str, Any]:
        """JSON (``dict``) to send to the API server: camelCase, only the fields that were set,
        unknown fields included."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class OwnerReference(WireModel):
    """``metav1.OwnerReference``: the object that owns this one (e.g. the Job of a Workload)."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(WireModel):
    """``metav1.ObjectMeta``: the fields pykueue reads; ``managedFields`` and others are kept."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None


class Condition(WireModel):
    """``metav1.Condition``. ``status``: ``True``/``False``/``Unknown``; ``last_transition_time``
    RFC 3339; ``observed_generation`` is the object's ``metadata.generation`` when set."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class LabelSelectorRequirement(WireModel):
    """One ``matchExpressions`` entry: ``operator`` In, NotIn, Exists or DoesNotExist."""

    key: str
    operator: str
    values: list[str] | None = None


class LabelSelector(WireModel):
    """``metav1.LabelSelector``; ``matchLabels`` and ``matchExpressions`` are ANDed. On a
    ClusterQueue, an unset selector matches no namespace and ``{}`` matches all."""

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class Toleration(WireModel):
    """core/v1 Toleration. ``operator``: Equal (default) or Exists; ``effect`` empty = all."""

    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


class Taint(WireModel):
    """core/v1 Taint. ``effect``: NoSchedule, PreferNoSchedule or NoExecute."""

    key: str
    value: str | None = None
    effect: str
    time_added: str | None = None


class ResourceRequirements(WireModel):
    """core/v1 ResourceRequirements: ``requests`` and ``limits`` per resource."""

    requests: ResourceList | None = None
    limits: ResourceList | None = None


class Container(WireModel):
    """core/v1 Container: the fields pykueue reads (name, resources, sidecar restartPolicy)."""

    name: str
    image: str | None = None
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class NodeSelectorRequirement(WireModel):
    """A node selector requirement: ``operator`` In, NotIn, Exists, DoesNotExist, Gt or Lt."""

    key: str
    operator: str
    values: list[str] | None = None


class NodeSelectorTerm(WireModel):
    """A node selector term; its requirements are ANDed."""

    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(WireModel):
    """Required node affinity: terms ORed."""

    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)


class NodeAffinity(WireModel):
    """core/v1 NodeAffinity (preferred terms are kept as unknown fields)."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(WireModel):
    """core/v1 Affinity; pod (anti-)affinity is kept as unknown fields."""

    node_affinity: NodeAffinity | None = None


class PodSpec(WireModel):
    """core/v1 PodSpec: the fields pykueue reads; every other pod field is kept."""

    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] | None = None
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    priority_class_name: str | None = None
    priority: int | None = None
    overhead: ResourceList | None = None
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None
    scheduling_gates: list[dict[str, Any]] | None = None


class PodTemplateSpec(WireModel):
    """core/v1 PodTemplateSpec."""

    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None


class KubeObject(WireModel):
    """Base of a top-level object (``apiVersion``, ``kind``, ``metadata``).

    Subclasses give ``api_version`` and ``kind`` their defaults. ``to_wire`` always writes both,
    so an object built in Python can be sent as is; for an object read from the API server this
    changes nothing (it carries them), except list items of core kinds, which gain them.
    """

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def to_wire(self) -> dict[str, Any]:
        """JSON of the object, always with ``apiVersion`` and ``kind``."""
        return {"apiVersion": self.api_version, "kind": self.kind, **super().to_wire()}
