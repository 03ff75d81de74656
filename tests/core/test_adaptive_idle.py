"""The adaptive controller around idle stretches: a server waits for traffic, serves a burst, then waits again.
Idle time is not traffic: it must neither fill the window nor pull its concurrency down, and a tick that served
nothing decides nothing. Under ``HEAVY`` (half the small model's steps go to the large one) the best vector is
(1, 1) at N = 64 but delays the large model at N = 4-16 ((1, 3) to (1, 11) on the base tables), so a decision
on a window that mixes a burst at N = 64 with idle seconds switches to a vector the burst does not want."""

from tests.core.test_adaptive import controller, window
from trcore.adaptive_window import ObservationBuilder

HEAVY = [[0.5, 0.5], [1.0, 0.0]]


def idle(ctl, start, seconds):
    """``seconds`` one-second spans without a request, each followed by a decision; the retunes made."""
    made = []
    for t in range(start, start + seconds):
        ctl.observe(ObservationBuilder(2, t, 0).flush(t + 1.0))
        made.append(ctl.decide(t + 1.0))
    return [r for r in made if r is not None]


def burst(ctl, start, seconds, concurrency=64):
    made = []
    for t in range(start, start + seconds):
        ctl.observe(window(HEAVY, t, t + 1.0, concurrency=concurrency, steps=3000))
        made.append(ctl.decide(t + 1.0))
    return [r for r in made if r is not None]


def test_a_burst_after_a_long_idle_decides_on_a_full_window_of_its_own_traffic():
    ctl = controller((1, 1), window_s=10.0, min_interval_s=0.0, method="sampled")
    assert idle(ctl, 0, 30) == []
    retunes = burst(ctl, 30, 12)
    assert retunes, "the burst fills the window: a decision"
    assert all(r.inputs.concurrency == 64 for r in retunes), [(r.time_s, r.inputs.concurrency) for r in retunes]
    assert retunes[0].time_s == 40.0 and retunes[0].inputs.span_s == 10.0  # a full window, as at start-up
    assert ctl.switches == [] and ctl.thresholds == (1, 1)


def test_no_decision_on_the_idle_seconds_after_a_burst():
    ctl = controller((1, 1), window_s=10.0, min_interval_s=0.0, method="sampled")
    burst(ctl, 0, 10)
    assert idle(ctl, 10, 15) == []  # the window slides over the idle seconds: nothing to tune for
    assert ctl.switches == [] and ctl.thresholds == (1, 1)
    assert not ctl.window.observations  # a whole window idle: the next traffic starts afresh
