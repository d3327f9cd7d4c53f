"""Kubernetes resource quantities, just enough to read a GPU count.

Why not a library: only one question is asked ("is this ``nvidia.com/gpu`` limit a non-negative whole
number, and which?"), and the answer must agree with the CEL ``quantity()`` library the API server
uses for the same rule, so both follow the quantity grammar of k8s.io/apimachinery.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "u": Decimal("0.000001"),
    "n": Decimal("0.000000001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_DECIMAL_POWER = {"": 0, "m": -3, "u": -6, "n": -9, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_INT64_MAX = 2**63 - 1
_MAX_EXPONENT = 100
"""Far beyond any resource (int64 is below 1e19), far below what Decimal cannot represent."""
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$")


def parse_quantity(value: int | str) -> Decimal:
    """The exact value of a quantity (``8``, ``"8"``, ``"500m"``, ``"1e3"``); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    match = _QUANTITY.fullmatch(value)
    if match is None or match.group(3) not in (*_SUFFIXES, None):
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"not a quantity: {value!r}") from None
    if exponent is not None:
        power = int(exponent[1:])
        if abs(power) > _MAX_EXPONENT:
            # Decimal would overflow (an ArithmeticError, not a ValueError) or take long to say so.
            raise ValueError(f"quantity out of range: {value!r} (exponent beyond ±{_MAX_EXPONENT})")
        return base * Decimal(10) ** power
    return base * _SUFFIXES[suffix or ""]


def whole_count(value: int | str) -> int:
    """A non-negative whole count (a GPU limit); ValueError says what is wrong otherwise.

    "Whole" is what the API server's CEL ``quantity(x).isInteger()`` says: a quantity written with a
    fractional scale is not whole even when its value is (``"2000m"``, ``"1.0"``, ``"1.0Ki"``), and
    neither is one beyond int64.
    """
    quantity = parse_quantity(value)
    if quantity < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    if quantity != quantity.to_integral_value() or not _integer_form(value) or quantity > _INT64_MAX:
        raise ValueError(f"must be a whole number written without a fraction or milli suffix, got {value!r}")
    return int(quantity)


def _integer_form(value: int | str) -> bool:
    if isinstance(value, int):
        return True
    match = _QUANTITY.fullmatch(value)
    assert match is not None  # parse_quantity accepted it
    number, exponent, suffix = match.groups()
    fraction_digits = len(number.partition(".")[2])
    if exponent is not None:
        return int(exponent[1:]) >= fraction_digits
    if suffix in _DECIMAL_POWER or not suffix:
        return _DECIMAL_POWER[suffix or ""] >= fraction_digits
    return fraction_digits == 0  # binary suffixes (Ki, Mi, ...) scale by 2**n, never by a power of ten
