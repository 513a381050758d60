"""``pykueue simulate``: a discrete-event simulator that drives the admission core
(``app.core``) with a virtual clock, for benchmarks and capacity planning.

    trace = load_trace("bench/scenarios/baseline.yaml")     # app.sim.trace
    sim = Simulator(trace).run()                            # app.sim.engine
    figures = summarize(sim)                                # app.sim.report

Imports ``app.core``, the standard library and pyyaml (matplotlib only for ``plot``); never
``app.api`` or ``app.controllers`` (an import-linter contract checks it).
"""

from app.sim.engine import SimulationError, Simulator
from app.sim.report import summarize, timelines
from app.sim.trace import Trace, TraceError, load_trace, parse_trace

__all__ = ["SimulationError", "Simulator", "Trace", "TraceError", "load_trace", "parse_trace",
           "summarize", "timelines"]
