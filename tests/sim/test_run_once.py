"""A Simulation runs once: a second ``run`` on the same object (a notebook cell run again) stepped the spent run's
processes forever; it is now a one-line ConfigError, and a fresh Simulation of the same config runs as before."""

import pytest

from trcore import ConfigError
from trsim import Simulation, markov_config

CONFIG = markov_config([[0.65, 0.35], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]], [0.006, 0.0279], concurrency=4)


@pytest.mark.timeout(120)  # a guard against the hang (which it was), not a measure of speed
@pytest.mark.parametrize("second", [{"tokens": 100}, {"time_s": 1.0}])
def test_a_second_run_is_refused_and_a_new_simulation_runs(second):
    sim = Simulation(CONFIG)
    first = sim.run(tokens=100)
    with pytest.raises(ConfigError, match=r"^run: a Simulation runs once: build a new one for another run$"):
        sim.run(**second)
    again = Simulation(CONFIG).run(tokens=100)
    assert (again.committed_tokens, again.simulated_s) == (first.committed_tokens, first.simulated_s)
