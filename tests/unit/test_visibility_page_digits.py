"""Paging values past Python's int/str conversion limit (4300 digits) on the visibility API
(a tenant through kube-apiserver: ``.../localqueues/<own>/pendingworkloads?offset=<5000
nines>``) are a 400 ``BadRequest`` as any other value that is not a non-negative int64, not a
500 from ``int()``'s ``ValueError``."""

from __future__ import annotations

import pytest

from app.api.visibility import Page, StatusError


@pytest.mark.parametrize("query", [{"offset": "9" * 5000}, {"limit": "9" * 4301}])
def test_page_values_of_thousands_of_digits_are_a_400(query) -> None:
    with pytest.raises(StatusError) as e:
        Page.parse(query)
    assert e.value.code == 400


@pytest.mark.parametrize(("raw", "value"), [("0009", 9), ("9223372036854775807",
                                                         2**63 - 1), ("000", 0)])
def test_leading_zeros_and_the_int64_maximum_are_read(raw, value) -> None:
    assert Page.parse({"offset": raw}).offset == value


def test_one_past_the_int64_maximum_is_a_400() -> None:
    with pytest.raises(StatusError) as e:
        Page.parse({"limit": "9223372036854775808"})
    assert e.value.code == 400
