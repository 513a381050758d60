"""Exact Kubernetes quantities as integers (design.md: "Exact quantities").

Units: ``cpu`` is held in milli-CPU (``"500m"`` -> 500, ``"2"`` -> 2000); every other resource
in its base unit (bytes for memory and ephemeral-storage, counts for ``nvidia.com/gpu`` and
``pods``). Values that are not whole in that unit are rounded up, as the Kubernetes scheduler
does when it reads a request (``Quantity.MilliValue`` / ``Value`` round up).

Grammar (k8s.io/apimachinery resource.Quantity):
``<sign><digits>[.<digits>]<suffix>`` with suffix one of the binary SI ``Ki Mi Gi Ti Pi Ei``,
decimal SI ``n u m "" k M G T P E`` or a decimal exponent ``e<int>`` / ``E<int>``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

UNLIMITED: int = -1
"""Sentinel for "no limit" (unset borrowingLimit / lendingLimit). Never used in arithmetic."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE]?)$"
)
_MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    """A quantity string is malformed or negative. The message names the field and value."""

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"{field}: invalid quantity {value!r}: {why}")


def is_milli(resource: str) -> bool:
    """True when ``resource`` is counted in milli-units (only ``cpu``)."""
    return resource in _MILLI_RESOURCES


def parse_exact(value: str | int, *, field: str = "quantity") -> Fraction:
    """Parse a Kubernetes quantity into its exact value in base units as a ``Fraction``.

    Raises ``QuantityError`` for malformed strings (the message names ``field`` and value).
    """
    if isinstance(value, bool):
        raise QuantityError(field, value, "a boolean is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        raise QuantityError(field, value, "floats are not exact; write the quantity as a string")
    if not isinstance(value, str):
        raise QuantityError(field, value, "expected a string such as '4', '500m' or '4Gi'")
    s = value.strip()
    m = _RE.match(s)
    if not m:
        raise QuantityError(
            field, value, "expected <number><suffix>, suffix one of Ki Mi Gi Ti Pi Ei n u m k M G T P E or e<exp>"
        )
    try:
        num = Fraction(Decimal(m.group("num")))
    except (InvalidOperation, ValueError) as exc:  # pragma: no cover - regex guards this
        raise QuantityError(field, value, str(exc)) from exc
    suffix = m.group("suffix")
    if suffix in _BINARY:
        return num * _BINARY[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exp = int(suffix[1:])
        if abs(exp) > 64:
            raise QuantityError(field, value, "exponent out of range")
        return num * (Fraction(10) ** exp)
    return num * _DECIMAL[suffix]


def _ceil(f: Fraction) -> int:
    return -((-f.numerator) // f.denominator)


def parse_quantity(value: str | int, resource: str, *, field: str = "quantity") -> int:
    """Parse ``value`` for ``resource`` into an exact integer amount.

    Returns milli-CPU for ``cpu`` and base units (bytes, counts) otherwise, rounded up.
    Raises ``QuantityError`` when malformed or negative.
    """
    exact = parse_exact(value, field=field)
    if exact < 0:
        raise QuantityError(field, value, "must not be negative")
    if is_milli(resource):
        exact *= 1000
    return _ceil(exact)


_BIN_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DEC_SUFFIXES = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def format_quantity(amount: int, resource: str) -> str:
    """Format an integer amount (milli-CPU for ``cpu``, base units else) canonically.

    ``cpu``: ``2000`` -> ``"2"``, ``500`` -> ``"500m"``. Memory-like amounts that are a whole
    number of a binary unit use it (``4294967296`` -> ``"4Gi"``); otherwise the largest exact
    decimal suffix (``1000`` -> ``"1k"``); counts print plainly below 1000.
    """
    if amount == UNLIMITED:
        return "unlimited"
    if amount < 0:
        return "-" + format_quantity(-amount, resource)
    if is_milli(resource):
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    if amount == 0:
        return "0"
    for suffix, mult in _BIN_SUFFIXES:
        if amount % mult == 0:
            return f"{amount // mult}{suffix}"
    for suffix, mult in _DEC_SUFFIXES:
        if amount % mult == 0:
            return f"{amount // mult}{suffix}"
    return str(amount)
