"""Wire models of ``admission.k8s.io/v1`` AdmissionReview (request and response), camelCase.

Shapes follow ``k8s.io/api/admission/v1/types.go`` (see shared/reference/controlplane.md 5.1):

- ``AdmissionReview``: ``apiVersion``, ``kind``, and either ``request`` (from kube-apiserver) or
  ``response`` (from the webhook).
- ``AdmissionRequest``: ``uid``, ``kind``/``resource`` (GroupVersionKind/Resource),
  ``subResource``, ``name`` (empty with ``generateName``), ``namespace``, ``operation``
  (CREATE|UPDATE|DELETE|CONNECT), ``userInfo``, ``object``, ``oldObject``, ``dryRun``, ``options``.
  ``object`` and ``oldObject`` are kept as raw JSON values (``Any``): reading them is the job of
  the admission rules, which can then say precisely what is wrong with them.
- ``AdmissionResponse``: ``uid`` (must echo the request's), ``allowed``, ``status`` (a
  metav1.Status; Go field ``Result``), ``patch`` (base64 of a JSONPatch document) with
  ``patchType: JSONPatch``, ``auditAnnotations``, ``warnings``.

Unknown keys are ignored (newer API servers may add fields). Serialise with
``model_dump_json(by_alias=True, exclude_none=True)``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Wire(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown keys ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class GroupVersionKind(_Wire):
    """``metav1.GroupVersionKind``; ``group`` is ``""`` for the core group."""

    group: str = ""
    version: str = ""
    kind: str = ""


class GroupVersionResource(_Wire):
    """``metav1.GroupVersionResource``."""

    group: str = ""
    version: str = ""
    resource: str = ""


class UserInfo(_Wire):
    """``authenticationv1.UserInfo`` of the requester (after impersonation)."""

    username: str = ""
    uid: str = ""
    groups: list[str] = Field(default_factory=list)
    extra: dict[str, list[str]] = Field(default_factory=dict)


Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class AdmissionRequest(_Wire):
    """``admissionv1.AdmissionRequest``. ``object``/``old_object`` are raw JSON (any shape)."""

    uid: str = Field(min_length=1)
    kind: GroupVersionKind | None = None
    resource: GroupVersionResource | None = None
    sub_resource: str = ""
    request_kind: GroupVersionKind | None = None
    request_resource: GroupVersionResource | None = None
    request_sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    operation: Operation
    user_info: UserInfo = Field(default_factory=UserInfo)
    object: Any = None
    old_object: Any = None
    dry_run: bool | None = None
    options: Any = None


class Status(_Wire):
    """``metav1.Status`` as used in a response (``result`` in Go)."""

    status: Literal["Success", "Failure"] | None = None
    code: int | None = None
    reason: str | None = None
    message: str | None = None


class AdmissionResponse(_Wire):
    """``admissionv1.AdmissionResponse``. ``patch`` is base64 of a JSONPatch (RFC 6902) array."""

    uid: str
    allowed: bool
    status: Status | None = None
    patch: str | None = None
    patch_type: Literal["JSONPatch"] | None = None
    audit_annotations: dict[str, str] | None = None
    warnings: list[str] | None = None


class AdmissionReview(_Wire):
    """``admissionv1.AdmissionReview``: only ``admission.k8s.io/v1`` is accepted; both required."""

    api_version: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest | None = None
    response: AdmissionResponse | None = None
