"""What a change will do, decided before anything is applied: the plan (``plan``) and what it
admits per pool (``plan_admission``), the rendered comment (``render``) and its Gantt chart
(``gantt``), the reviewed chart's digests (``reviewed_chart``) and its provenance
(``provenance``).

May import: the packages below it: fleet, charts, records, policy, rollouts, rotation, notices
(the layers contract in pyproject.toml).
"""
