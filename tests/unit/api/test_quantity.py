"""Quantities as kube-apiserver reads them, for GPU counts."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kubegang.api import parse_quantity, whole_count


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (8, Decimal(8)),
        ("8", Decimal(8)),
        ("500m", Decimal("0.5")),
        ("2000m", Decimal(2)),
        ("1k", Decimal(1000)),
        ("1Ki", Decimal(1024)),
        ("1e3", Decimal(1000)),
        ("1E", Decimal(10) ** 18),
        ("+3", Decimal(3)),
        ("-2", Decimal(-2)),
        (".5", Decimal("0.5")),
    ],
)
def test_parse(text: int | str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "eight", "8 ", "1.5.0", "1Xi", "--1", "1e", True])
def test_not_a_quantity(text: int | str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "count"), [(8, 8), ("8", 8), ("0.5k", 500), ("1.50k", 1500), ("2e3", 2000), ("9E", 9 * 10**18), ("-0", 0)]
)
def test_whole_count(text: int | str, count: int) -> None:
    assert whole_count(text) == count


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0.5", "whole number"),
        ("1500m", "whole number"),
        # kube-apiserver's quantity(x).isInteger() says no to these whole values too; so does kubegang
        ("2000m", "whole number"),
        ("1.0", "whole number"),
        ("10e-1", "whole number"),
        ("1.0Ki", "whole number"),
        ("10E", "whole number"),
        (-1, "negative"),
        ("-2", "negative"),
    ],
)
def test_whole_count_says_what_is_wrong(text: int | str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        whole_count(text)


@pytest.mark.parametrize("text", ["1e999999999", "1e-999999999", "5e101"])
def test_an_exponent_beyond_any_resource_is_a_value_error_naming_the_value(text: str) -> None:
    with pytest.raises(ValueError, match="out of range") as err:
        parse_quantity(text)
    assert text in str(err.value)
