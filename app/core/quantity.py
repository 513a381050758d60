"""Exact Kubernetes quantities as integers (design.md: "Exact quantities").

Units: ``cpu`` is held in milli-CPU (``"500m"`` -> 500, ``"2"`` -> 2000); every other resource
in its base unit (bytes for memory and ephemeral-storage, counts for ``nvidia.com/gpu`` and
``pods``). Values that are not whole in that unit are rounded up, as the Kubernetes scheduler
does when it reads a request (``Quantity.MilliValue`` / ``Value`` round up).

Grammar (k8s.io/apimachinery resource.Quantity):
``<sign><digits>[.<digits>]<suffix>`` with suffix one of the binary SI ``Ki Mi Gi Ti Pi Ei``,
decimal SI ``n u m "" k M G T P E`` or a decimal exponent ``e<int>`` / ``E<int>``. As in Go,
only ASCII digits are accepted and no surrounding whitespace; JSON numbers (``int``, finite
``float``) are read as the decimal literal they print as (``0.1`` -> ``"0.1"``), as the API
server reads an unquoted quantity. Amounts above ``MAX_AMOUNT`` (int64, Kueue's
``resources.Amount``) are refused rather than saturated.

Durations (``parse_duration_us``: seconds as numbers, or ``200ms``, ``1.5s``, ``5m``, ``1h``)
are exact whole microseconds, for the simulator's clock and pykueue's duration annotations.
"""

from __future__ import annotations

import math
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
# ASCII digits only (``\d`` would accept e.g. Arabic-Indic digits), matched with ``fullmatch``
# (``$`` would accept a trailing newline).
_RE = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)"
)
MAX_AMOUNT: int = 2**63 - 1
"""Largest amount (milli-CPU, bytes, counts) accepted: int64, as Kueue's ``resources.Amount``."""
_MAX_TEXT = 256  # longer quantity strings are refused before any arithmetic
_MILLI_RESOURCES = frozenset({"cpu"})
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})


class QuantityError(ValueError):
    """A quantity string is malformed or negative. The message names the field and value."""

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field = field
        self.value = value
        self.why = why
        super().__init__(f"{field}: invalid quantity {value!r}: {why}")


def is_milli(resource: str) -> bool:
    """True when ``resource`` is counted in milli-units (only ``cpu``)."""
    return resource in _MILLI_RESOURCES


def is_bytes(resource: str) -> bool:
    """True when ``resource`` is counted in bytes (printed with binary suffixes such as ``Gi``)."""
    return resource in _BYTE_RESOURCES or resource.startswith("hugepages-")


def parse_exact(value: str | int, *, field: str = "quantity") -> Fraction:
    """Parse a Kubernetes quantity into its exact value in base units as a ``Fraction``.

    Raises ``QuantityError`` for malformed strings (the message names ``field`` and value).
    """
    if isinstance(value, bool):
        raise QuantityError(field, value, "a boolean is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(field, value, "not a finite number")
        # A JSON number: take the shortest decimal literal that prints as this float, i.e.
        # what was written ("0.1"), never the binary approximation.
        return Fraction(Decimal(repr(value)))
    if not isinstance(value, str):
        raise QuantityError(field, value, "expected a string such as '4', '500m' or '4Gi'")
    if len(value) > _MAX_TEXT:
        raise QuantityError(field, value[:32] + "...", f"longer than {_MAX_TEXT} characters")
    m = _RE.fullmatch(value)
    if not m:
        raise QuantityError(
            field,
            value,
            "expected <number><suffix>, suffix one of Ki Mi Gi Ti Pi Ei n u m k M G T P E"
            " or e<exp> (ASCII digits, no spaces)",
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
        if abs(exp) > 99:  # the CRD pattern allows two exponent digits
            raise QuantityError(field, value, "exponent out of range")
        return num * (Fraction(10) ** exp)
    return num * _DECIMAL[suffix]


def _ceil(f: Fraction) -> int:
    return -((-f.numerator) // f.denominator)


def parse_quantity(value: str | int, resource: str, *, field: str = "quantity") -> int:
    """Parse ``value`` for ``resource`` into an exact integer amount.

    Returns milli-CPU for ``cpu`` and base units (bytes, counts) otherwise, rounded up to a
    whole unit (``"4.1Gi"`` -> 4402341479 bytes, ``"1n"`` cpu -> 1), as Go's
    ``Quantity.MilliValue`` / ``Value`` do. Raises ``QuantityError`` when malformed, negative
    or larger than ``MAX_AMOUNT``.
    """
    exact = parse_exact(value, field=field)
    if exact < 0:
        raise QuantityError(field, value, "must not be negative")
    if is_milli(resource):
        exact *= 1000
    amount = _ceil(exact)
    if amount > MAX_AMOUNT:
        raise QuantityError(field, value, f"larger than {MAX_AMOUNT} (int64)")
    return amount


# Largest first, derived from the parse tables so the two directions cannot disagree.
_BIN_SUFFIXES = tuple(sorted(_BINARY.items(), key=lambda kv: -kv[1]))
_DEC_SUFFIXES = tuple(
    (suffix, int(mult))
    for suffix, mult in sorted(_DECIMAL.items(), key=lambda kv: -kv[1])
    if mult > 1
)


def format_quantity(amount: int, resource: str) -> str:
    """Format an integer amount (milli-CPU for ``cpu``, base units else) canonically.

    ``cpu``: ``2000`` -> ``"2"``, ``500`` -> ``"500m"``. Byte amounts (``memory``,
    ``ephemeral-storage``, ``storage``, ``hugepages-*``) that are a whole number of a binary unit
    use it (``4294967296`` -> ``"4Gi"``, ``128000`` -> ``"125Ki"``); otherwise, and for counts
    (``nvidia.com/gpu``, ``pods``), the largest exact decimal suffix (``100000`` -> ``"100k"``,
    ``1024`` GPUs -> ``"1024"``). Always exact: ``parse_quantity(format_quantity(x, r), r) == x``.
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
    if is_bytes(resource):
        for suffix, mult in _BIN_SUFFIXES:
            if amount % mult == 0:
                return f"{amount // mult}{suffix}"
    for suffix, mult in _DEC_SUFFIXES:
        if amount % mult == 0:
            return f"{amount // mult}{suffix}"
    return str(amount)


US = 1_000_000  # microseconds per second: the simulator's clock is integer microseconds
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(us|ms|s|m|h)?\s*")
_UNIT_US = {"us": 1, "ms": 1_000, "s": US, "m": 60 * US, "h": 3600 * US, None: US}


def parse_duration_us(value: object) -> int:
    """Seconds (int/float) or ``"<number><us|ms|s|m|h>"`` -> whole microseconds (>= 0).

    Raises ``ValueError`` for anything else or for a fraction of a microsecond.
    """
    if isinstance(value, bool):
        raise ValueError("a boolean is not a duration")
    if isinstance(value, (int, float)):
        text, unit = repr(value), None
    elif isinstance(value, str) and (m := _DURATION.fullmatch(value)):
        text, unit = m.group(1), m.group(2)
    else:
        raise ValueError(f"not a duration: {value!r} (e.g. 0.5, 200ms, 1.5s, 2m, 1h)")
    try:
        exact = Decimal(text) * _UNIT_US[unit]
    except InvalidOperation as exc:
        raise ValueError(f"not a duration: {value!r}") from exc
    if exact < 0:
        raise ValueError(f"must not be negative: {value!r}")
    if exact != exact.to_integral_value():
        raise ValueError(f"finer than a microsecond: {value!r}")
    return int(exact)
