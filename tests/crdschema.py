"""The generated Kueue CRDs (manifests/crds, written by hack/gen_crds.py) as a test oracle:
what kube-apiserver does with an object of a Kueue kind, without a cluster.

``errors(kind, obj)`` checks ``obj`` against the kind's ``openAPIV3Schema`` for the keywords
the CRDs use, as the API server's structural validation does: ``type`` (with
``x-kubernetes-int-or-string``), ``required``, ``enum``, ``pattern``, ``minimum``, and
pruning: a field the schema does not declare, outside any ``x-kubernetes-preserve-unknown-
fields``, would be dropped on write and is reported as ``field not declared (pruned)``.
CEL rules (``x-kubernetes-validations``) are not evaluated. Messages start with the wire path,
e.g. ``spec.podSets[0].template: Required value``.

``with_defaults(kind, obj)`` is ``obj`` after the API server's defaulting (``default`` of
every absent property whose parent object is present; the input is not modified).
"""

from __future__ import annotations

import copy
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[1] / "manifests" / "crds"
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float),
}


@cache
def schemas() -> dict[str, dict[str, Any]]:
    """Kind -> the ``openAPIV3Schema`` of its one served version."""
    out = {}
    for path in CRDS.glob("kueue.x-k8s.io_*.yaml"):
        crd = yaml.safe_load(path.read_text())
        (version,) = crd["spec"]["versions"]
        out[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return out


def _type_error(schema: dict[str, Any], value: Any) -> str | None:
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str | int) and not isinstance(value, bool)
        return None if ok else "Invalid value: must be an integer or a string"
    want = schema.get("type")
    if want is None:
        return None
    ok = isinstance(value, _TYPES[want]) and not (want in ("integer", "number")
                                                  and isinstance(value, bool))
    return None if ok else f"Invalid value: must be of type {want}"


def _check(schema: dict[str, Any], value: Any, path: str, out: list[str]) -> None:
    if value is None and schema.get("nullable"):
        return
    bad = _type_error(schema, value)
    if bad:
        out.append(f"{path}: {bad}")
        return
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: Unsupported value: {value!r}: supported values: {schema['enum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        out.append(f"{path}: Invalid value: {value!r}: must match {schema['pattern']}")
    if isinstance(value, int | float) and "minimum" in schema and value < schema["minimum"]:
        out.append(f"{path}: Invalid value: {value}: must be >= {schema['minimum']}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(schema["items"], item, f"{path}[{i}]", out)
    if not isinstance(value, dict):
        return
    props = schema.get("properties", {})
    prefix = f"{path}." if path else ""
    for name in schema.get("required", []):
        if name not in value:
            out.append(f"{prefix}{name}: Required value")
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in props:
            if not (path == "" and key == "metadata"):  # the API server owns root metadata
                _check(props[key], item, f"{prefix}{key}", out)
        elif isinstance(extra, dict):
            _check(extra, item, f"{path}[{key}]", out)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            out.append(f"{prefix}{key}: field not declared (pruned)")


def errors(kind: str, obj: dict[str, Any]) -> list[str]:
    """What kube-apiserver would refuse or prune in ``obj`` of Kueue kind ``kind`` (see the
    module docstring); ``[]`` when it is stored as written."""
    out: list[str] = []
    _check(schemas()[kind], obj, "", out)
    return out


def _default(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _default(sub, value[name])
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            _default(schema["items"], item)


def with_defaults(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server stores it after defaulting (a copy)."""
    out = copy.deepcopy(obj)
    _default(schemas()[kind], out)
    return out
