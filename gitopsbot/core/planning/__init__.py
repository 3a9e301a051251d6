"""What a change will do, decided before anything is applied: the charts read (``chart``), the
diffs of values, CRDs and images, the plan and its steps, the timeline and its Gantt chart,
the rendered plan comment (``render``), the reviewed chart's digests and provenance.

May import: the packages below it: fleet, charts, records, policy, rollouts, rotation, notices
(the layers contract in pyproject.toml).
"""
