"""A seeded share-group workload: not Kafka's code, a driver of it.

`simulate` (`simulator.py`) runs share-partition leaders (`share_leader.py`) and consumer
groups (`offsets_writer.py`) over simulated time, sends every state change through the
share coordinator's write path (`sharestate.persister`) and writes both internal topics as
real segment files; `SimulationConfig` / `SimulationResult` (`simulation.py`) say what was
asked and what came out. The demo, the tests and the benchmarks generate their logs here.
"""

from sharestate.simulate.simulation import SimulationConfig, SimulationResult, demo_config
from sharestate.simulate.simulator import simulate

__all__ = ["SimulationConfig", "SimulationResult", "demo_config", "simulate"]
