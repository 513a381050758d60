"""Strict readers of plain JSON values (the dicts the API server returns), shared by the
``app.wire`` readers: each names the JSON path of a value it cannot read.

Raises ``WorkloadSpecError`` (a ``ValueError`` whose ``field`` is the path, e.g.
``spec.template.spec.containers[0].resources.requests[cpu]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.core.quantity import QuantityError, parse_quantity
from app.core.types import ResourceName

Obj = dict[str, Any]
"""A Kubernetes object or any JSON object as the API server returns it, decoded."""


class WorkloadSpecError(ValueError):
    """A Job or Workload object cannot be turned into a domain Workload.

    ``field`` is the JSON path of the offending field (e.g.
    ``spec.template.spec.containers[0].resources.requests[cpu]``); the message starts with it.
    """

    def __init__(self, field: str, why: str) -> None:
        self.field = field
        super().__init__(f"{field}: {why}")


def mapping(value: Any, field: str, *, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise WorkloadSpecError(field, "required")
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadSpecError(field, f"expected an object, got {type(value).__name__}")
    return value


def sequence(value: Any, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise WorkloadSpecError(field, f"expected a list, got {type(value).__name__}")
    return value


def string(value: Any, field: str, *, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise WorkloadSpecError(field, f"expected a string, got {value!r}")
    return value


def integer(value: Any, field: str, *, default: int, minimum: int | None = None) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadSpecError(field, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise WorkloadSpecError(field, f"must be >= {minimum}, got {value}")
    return value


_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def go_bool(value: Any, field: str) -> bool:
    """A boolean annotation read as Go's ``strconv.ParseBool`` reads it (Kueue parses its
    boolean annotations so): ``1 t T TRUE true True`` / ``0 f F FALSE false False``;
    anything else raises ``WorkloadSpecError`` naming ``field``."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise WorkloadSpecError(field, f"must be a boolean (true or false), got {value!r}")


def resource_list(value: Any, field: str) -> dict[ResourceName, int]:
    """Parse a core/v1 ResourceList ``{name: quantity}`` into exact integer amounts."""
    out: dict[ResourceName, int] = {}
    for name, qty in mapping(value, field).items():
        where = f"{field}[{name}]"
        try:
            out[ResourceName(name)] = parse_quantity(qty, name, field=where)
        except QuantityError as exc:
            raise WorkloadSpecError(where, f"invalid quantity {qty!r}: {exc.why}") from exc
    return out
