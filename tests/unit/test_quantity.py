"""Exact Kubernetes quantities (app.core.quantity): tables, KQ-06, and a differential property
test against the ``kubernetes`` package's ``parse_quantity`` (dev dependency, oracle only)."""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as oracle_parse

from app.core.quantity import (
    MAX_AMOUNT,
    QuantityError,
    format_quantity,
    is_bytes,
    parse_exact,
    parse_quantity,
)

GI = 2**30
MI = 2**20


@pytest.mark.parametrize(
    ("text", "resource", "amount"),
    [
        ("4", "cpu", 4000),
        ("500m", "cpu", 500),
        ("1.5", "cpu", 1500),
        ("0.1", "cpu", 100),
        (".5", "cpu", 500),
        ("2.", "cpu", 2000),
        ("+1", "cpu", 1000),
        ("1e3", "cpu", 1_000_000),
        ("1E-3", "cpu", 1),
        ("1n", "cpu", 1),  # 1e-9 cores rounds up to one milli-CPU, as Go's MilliValue
        ("250u", "cpu", 1),
        ("1k", "cpu", 1_000_000),
        ("4Gi", "memory", 4 * GI),
        ("4096Mi", "memory", 4 * GI),
        ("1.5Gi", "memory", 3 * GI // 2),
        ("4.1Gi", "memory", 4402341479),  # 4402341478.4 rounds up to whole bytes
        ("1G", "memory", 10**9),
        ("128974848", "memory", 128974848),
        ("129e6", "memory", 129_000_000),
        ("1Ei", "memory", 2**60),
        ("1m", "memory", 1),  # a thousandth of a byte is still one byte
        ("8", "nvidia.com/gpu", 8),
        ("0", "nvidia.com/gpu", 0),
        (4, "nvidia.com/gpu", 4),
        (0.5, "cpu", 500),  # a JSON number reads as the literal it prints as
        (0.1, "cpu", 100),
    ],
    ids=lambda v: repr(v),
)
def test_parse_table(text: str | int | float, resource: str, amount: int) -> None:
    assert parse_quantity(text, resource) == amount


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 4",
        "4 ",
        "4\n",  # `$` in a regex would accept this
        "٣",  # Arabic-Indic three: `\d` would accept it, Go does not
        "1K",  # upper-case K is not a Kubernetes suffix
        "1ki",
        "1Mb",
        "4 cpus",
        "1e",
        "1e1.5",
        "e3",
        ".",
        "--1",
        "1Ki1",
        "Infinity",
        "NaN",
        "1_000",
        "0x10",
        "1" * 300,
    ],
    ids=repr,
)
def test_malformed_strings_are_refused_naming_field_and_value(text: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text, "memory", field="spec.containers[0].resources.requests[memory]")
    assert err.value.field == "spec.containers[0].resources.requests[memory]"
    assert str(err.value).startswith("spec.containers[0].resources.requests[memory]: invalid")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("-1", "negative"),
        (-1, "negative"),
        ("9Ei", "int64"),  # 9 * 2**60 > 2**63 - 1: refused, never saturated
        ("10E", "int64"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (True, "boolean"),
        (None, "expected"),
        ([1], "expected"),
    ],
    ids=repr,
)
def test_out_of_range_or_wrong_type_is_refused(value: object, why: str) -> None:
    with pytest.raises(QuantityError, match=why):
        parse_quantity(value, "memory")  # type: ignore[arg-type]


def test_largest_amount_is_accepted() -> None:
    assert parse_quantity(str(MAX_AMOUNT), "memory") == MAX_AMOUNT
    assert parse_quantity("7Ei", "memory") == 7 * 2**60
    for too_big in (str(MAX_AMOUNT + 1), "8Ei"):  # 8Ei is 2**63
        with pytest.raises(QuantityError, match="int64"):
            parse_quantity(too_big, "memory")


# --- KQ-06: exact integer arithmetic, unit-insensitive comparison, canonical status output ---


def test_kq06_fractional_cpu_sums_exactly_to_the_nominal_quota() -> None:
    nominal = parse_quantity("300m", "cpu")
    used = parse_quantity("0.1", "cpu") + parse_quantity("200m", "cpu")
    assert used == nominal == 300
    assert used + parse_quantity("1m", "cpu") > nominal  # W3 stays pending


def test_kq06_memory_in_different_units_fills_the_quota_exactly() -> None:
    nominal = parse_quantity("4Gi", "memory")
    used = parse_quantity("1Gi", "memory") + parse_quantity("3072Mi", "memory")
    assert used == nominal == 4294967296
    assert used + parse_quantity("1", "memory") > nominal  # W4 (one byte) stays pending


@pytest.mark.parametrize(
    ("request_", "fits"),
    [("4096Mi", True), ("4Gi", True), ("4097Mi", False), ("4.1Gi", False), ("4294967297", False)],
)
def test_kq06_single_request_against_4gi(request_: str, fits: bool) -> None:
    assert (parse_quantity(request_, "memory") <= parse_quantity("4Gi", "memory")) is fits


@pytest.mark.parametrize(
    ("amount", "resource", "text"),
    [
        (128000, "memory", "125Ki"),
        (100000, "memory", "100k"),
        (1572864, "memory", "1536Ki"),
        (4 * GI, "memory", "4Gi"),
        (1000, "memory", "1k"),
        (1023, "memory", "1023"),
        (0, "memory", "0"),
        (1500, "cpu", "1500m"),
        (2000, "cpu", "2"),
        (1, "cpu", "1m"),
        (1024, "nvidia.com/gpu", "1024"),  # counts never get binary suffixes
        (8, "nvidia.com/gpu", "8"),
        (3000, "pods", "3k"),
        (2 * MI, "hugepages-2Mi", "2Mi"),
        (10 * GI, "ephemeral-storage", "10Gi"),
    ],
)
def test_kq06_canonical_format(amount: int, resource: str, text: str) -> None:
    assert format_quantity(amount, resource) == text
    assert parse_quantity(text, resource) == amount


RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "pods")


@settings(max_examples=3000, deadline=None)
@given(
    amount=st.one_of(
        st.integers(min_value=0, max_value=MAX_AMOUNT),
        # multiples of the suffixes, where formatting picks a suffix
        st.builds(
            lambda k, m: k * m,
            st.integers(min_value=1, max_value=10**6),
            st.sampled_from([1000, 1024, 10**6, MI, 10**9, GI, 2**40]),
        ),
    ),
    resource=st.sampled_from(RESOURCES),
)
def test_kq06_format_then_parse_is_identity(amount: int, resource: str) -> None:
    text = format_quantity(amount, resource)
    assert parse_quantity(text, resource) == amount
    assert format_quantity(parse_quantity(text, resource), resource) == text
    if not is_bytes(resource):
        assert "i" not in text  # binary suffixes only for bytes


# --- differential test against kubernetes.utils.parse_quantity (the oracle) ------------------

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@st.composite
def quantity_strings(draw: st.DrawFn) -> str:
    """Strings in the Kubernetes quantity grammar, every suffix kind."""
    sign = draw(st.sampled_from(["", "+"]))
    whole = draw(st.text("0123456789", min_size=0, max_size=10))
    frac = draw(st.one_of(st.none(), st.text("0123456789", min_size=0, max_size=9)))
    if not whole and not frac:
        whole = draw(st.text("0123456789", min_size=1, max_size=4))
    number = whole + ("" if frac is None else "." + frac)
    suffix = draw(
        st.one_of(
            st.sampled_from(SUFFIXES),
            st.builds(
                lambda e, s, d: e + s + d,
                st.sampled_from(["e", "E"]),
                st.sampled_from(["", "+", "-"]),
                st.integers(min_value=0, max_value=24).map(str),
            ),
        )
    )
    return sign + number + suffix


def _oracle_amount(text: str, resource: str) -> int:
    with decimal.localcontext() as ctx:
        ctx.prec = 200  # the oracle multiplies with the thread's context: make it exact
        value = Fraction(oracle_parse(text))
    if resource == "cpu":
        value *= 1000
    return math.ceil(value)


@settings(max_examples=3000, deadline=None)
@given(text=quantity_strings(), resource=st.sampled_from(RESOURCES))
def test_parse_agrees_with_kubernetes_oracle_for_every_suffix(text: str, resource: str) -> None:
    expected = _oracle_amount(text, resource)
    if expected > MAX_AMOUNT:
        with pytest.raises(QuantityError, match="int64"):
            parse_quantity(text, resource)
    else:
        assert parse_quantity(text, resource) == expected


@settings(max_examples=1500, deadline=None)
@given(text=quantity_strings())
def test_signed_exact_value_agrees_with_oracle(text: str) -> None:
    negative = "-" + text.lstrip("+")
    with decimal.localcontext() as ctx:
        ctx.prec = 200
        assert parse_exact(negative) == Fraction(oracle_parse(negative))


@settings(max_examples=2000, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(list("0123456789.+-eEnumkKMGTPi \n_xa٣")), min_size=0, max_size=8
    )
)
def test_never_more_lenient_than_the_oracle(text: str) -> None:
    """Whatever pykueue accepts, the oracle accepts with the same value."""
    try:
        ours = parse_exact(text)
    except QuantityError:
        return
    with decimal.localcontext() as ctx:
        ctx.prec = 200
        assert Fraction(oracle_parse(text)) == ours
