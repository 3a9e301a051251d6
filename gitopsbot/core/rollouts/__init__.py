"""How a pool's components roll: the phase state machine (``rollout``), the next batch's
admission and size (``admission``), gates, windows, the workload waits, the GPU canary, the
verify wait, the hypervisor restarts, the phase's clock and view, the timeline of its
batches (``timeline``), and what the TensorFusion objects say (``tf_objects``).

May import: core.fleet, core.charts, core.records
(the layers contract in pyproject.toml).
"""
