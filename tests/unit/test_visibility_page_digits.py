"""Paging values past Python's int/str conversion limit (4300 digits) on the visibility API:
seen as a tenant through kube-apiserver (``kubectl get --raw
.../localqueues/<own>/pendingworkloads?offset=<5000 nines>``): ``InternalError`` (pykueue
answers 500, ``ValueError`` from ``int()`` escapes ``Page.parse``). Expected: 400
``BadRequest`` as for any other value that is not a non-negative int64."""

from __future__ import annotations

import pytest

from app.api.visibility import Page, StatusError


@pytest.mark.xfail(strict=True, raises=ValueError,
                   reason="Page.parse lets int()'s digit limit ValueError escape (HTTP 500)")
@pytest.mark.parametrize("query", [{"offset": "9" * 5000}, {"limit": "9" * 4301}])
def test_page_values_of_thousands_of_digits_are_a_400(query) -> None:
    with pytest.raises(StatusError) as e:
        Page.parse(query)
    assert e.value.code == 400
