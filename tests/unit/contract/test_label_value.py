"""``kubegang.podcontract.label_value``: an object's name cut to a label value the API server accepts
(at most 63 characters, beginning and ending with a letter or digit)."""

from __future__ import annotations

import re

import pytest

from kubegang.podcontract import label_value

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
"""Kubernetes' rule for a label value (apimachinery validation.IsValidLabelValue), besides the length."""


@pytest.mark.parametrize(("text", "value"), [
    ("workers", "workers"),
    ("a" * 63, "a" * 63),
    ("a" * 70, "a" * 63),
    ("a" * 62 + "-b", "a" * 62),          # the cut leaves a trailing '-'
    ("a" * 62 + ".b", "a" * 62),          # ... or '.'
    ("a" * 62 + "_b", "a" * 62),          # ... or '_'
    ("a" * 60 + "-._-bc", "a" * 60),      # ... or several
    ("a.b-c", "a.b-c"),                   # inside, they stay
    ("-a-", "a"),
    ("", ""),
    ("---", ""),
])
def test_a_name_becomes_a_valid_label_value(text: str, value: str) -> None:
    assert label_value(text) == value
    assert len(value) <= 63 and LABEL_VALUE.match(value)
