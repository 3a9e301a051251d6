"""What a person is told: the happenings between two journals (``happenings``), their
Kubernetes Events (``kube_events``), chat notifications (``notifications``) and the
rows of the fleet page (``fleet_view``).

May import: core.fleet, core.charts, core.records, core.policy, core.rollouts
(the layers contract in pyproject.toml).
"""
