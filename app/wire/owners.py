"""Owner references (Kubernetes meta/v1 ``ObjectMeta.ownerReferences``): the one reader of
an object's controller reference, shared by the webhooks, the job kinds, the controllers
and the extender.

Kubernetes' API validation allows at most one entry with ``controller: true`` per object and
stores ``controller`` as a JSON boolean; a controller claims only the objects whose
controller reference names it (``ClaimObject``), so this reference, not labels, says which
object an object belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from app.wire.fields import WorkloadSpecError, mapping, sequence


class OwnerRef(NamedTuple):
    """One ownerReference: ``api_version`` as written (``batch/v1``; ``v1`` for the core
    group), ``kind``, ``name`` and ``uid`` (empty strings when absent)."""

    api_version: str
    kind: str
    name: str
    uid: str

    @property
    def group(self) -> str:
        """The API group of ``api_version`` (``batch`` for ``batch/v1``; ``""`` for ``v1``)."""
        return self.api_version.rpartition("/")[0]

    @property
    def is_pod(self) -> bool:
        """Whether the reference names a core/v1 Pod (a Spark executor's driver)."""
        return (self.api_version, self.kind) == ("v1", "Pod")


def controller_ref(meta: Any, *, strict: bool = False,
                   where: str = "metadata") -> OwnerRef | None:
    """The controller ownerReference of an object whose ``metadata`` is ``meta``, or None.

    Lenient by default: a ``meta`` or ``ownerReferences`` of the wrong JSON type, and entries
    that are not objects, are skipped (objects read from the API server always have the
    validated shape). With ``strict`` such shapes raise ``WorkloadSpecError`` naming
    ``<where>.ownerReferences[i]`` (for input that did not come from the API server, e.g. an
    ExtenderArgs body).
    """
    if strict:
        refs = sequence(mapping(meta, where).get("ownerReferences"), f"{where}.ownerReferences")
    else:
        refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
        if not isinstance(refs, list):
            return None
    for i, ref in enumerate(refs):
        if not isinstance(ref, Mapping):
            if strict:
                raise WorkloadSpecError(f"{where}.ownerReferences[{i}]", "expected an object")
            continue
        if ref.get("controller") is True:
            return OwnerRef(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""),
                            str(ref.get("name") or ""), str(ref.get("uid") or ""))
    return None


def controller_of_object(obj: Any) -> OwnerRef | None:
    """``controller_ref`` of ``obj["metadata"]`` (lenient), None for a non-object."""
    return controller_ref(obj.get("metadata")) if isinstance(obj, Mapping) else None
