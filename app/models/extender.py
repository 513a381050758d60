"""Wire models of the kube-scheduler extender API (``k8s.io/kube-scheduler/extender/v1``).

Go's ``encoding/json`` without struct tags: keys are the Go field names (``Pod``, ``Nodes``,
``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``, ``Host``,
``Score``). Embedded ``v1.Pod`` / ``v1.Node`` objects keep normal Kubernetes JSON and are held
as plain dicts: only a few fields are read (see ``app.extender.placement``).
Reference: controlplane.md section 5.2.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10


class NodeList(BaseModel):
    """core/v1 NodeList: ``{"metadata": {...}, "items": [<Node>, ...]}``."""

    model_config = ConfigDict(extra="allow")

    metadata: dict[str, Any] | None = None
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(BaseModel):
    """Filter / prioritize request.

    ``nodeCacheCapable: false``: ``Nodes`` holds full Node objects, ``NodeNames`` is null.
    ``nodeCacheCapable: true``: ``NodeNames`` holds names, ``Nodes`` is null.
    """

    model_config = ConfigDict(extra="ignore")

    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(BaseModel):
    """Filter response. The scheduler reads ``NodeNames`` when nodeCacheCapable (every name
    must come from the request), else ``Nodes.items``; neither set means no node passes.
    ``FailedAndUnresolvableNodes`` win over ``FailedNodes`` and are not tried by preemption;
    a non-empty ``Error`` fails the scheduling attempt."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(BaseModel):
    """One node's score, ``MIN_EXTENDER_PRIORITY``..``MAX_EXTENDER_PRIORITY`` (0-10); the
    scheduler adds ``Score * weight * 10``."""

    Host: str
    Score: int = Field(ge=MIN_EXTENDER_PRIORITY, le=MAX_EXTENDER_PRIORITY)


class HostPriorityList(RootModel[list[HostPriority]]):
    """Prioritize response: ``[{"Host": "n1", "Score": 10}, ...]``."""
