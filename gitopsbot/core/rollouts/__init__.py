"""How a pool's components roll: the phase state machine (``rollout``), the next batch's
admission and size, gates, node states, windows, the workload waits, the GPU canary, the
verify wait, the hypervisor restarts, and what the TensorFusion objects say.

May import: core.fleet, core.charts, core.records
(the layers contract in pyproject.toml).
"""
