"""The leader's loop debounces on the leading edge: a lone event is acted on at once, a burst is not
stepped more often than once per ``DEBOUNCE_SECONDS``."""

from __future__ import annotations

import pytest

from kubegang.operator._controller import DEBOUNCE_SECONDS, debounce_delay


def test_an_event_after_an_idle_interval_is_acted_on_at_once() -> None:
    assert debounce_delay(DEBOUNCE_SECONDS) == 0.0
    assert debounce_delay(5.0) == 0.0


def test_an_event_right_after_a_step_waits_the_whole_interval() -> None:
    assert debounce_delay(0.0) == DEBOUNCE_SECONDS


def test_an_event_during_the_interval_waits_only_its_rest() -> None:
    assert debounce_delay(0.3 * DEBOUNCE_SECONDS) == pytest.approx(0.7 * DEBOUNCE_SECONDS)


def test_the_interval_is_a_parameter_for_models_of_the_loop() -> None:
    assert debounce_delay(0.25, interval=1.0) == pytest.approx(0.75)
    assert debounce_delay(2.0, interval=1.0) == 0.0
