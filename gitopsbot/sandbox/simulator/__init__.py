"""The TensorFusion controller simulator: plays the real controller against the emulator's Store.

See docs/sandbox.md ("Controller simulator") and ../shared/docs/tensorfusion-facts.md §3 for
the behaviour it follows.
"""

from gitopsbot.sandbox.simulator.clock import Clock, ManualClock, SystemClock
from gitopsbot.sandbox.simulator.config import SimConfig, WorkloadSpec
from gitopsbot.sandbox.simulator.controller import ControllerSim

__all__ = ["Clock", "ControllerSim", "ManualClock", "SimConfig", "SystemClock", "WorkloadSpec"]
