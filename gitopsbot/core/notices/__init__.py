"""What a person is told: the happenings between two journals (``happenings``), their
Kubernetes Events (``kube_events``), chat notifications (``notifications``) and the
rows of the fleet page (``fleet_view``).
"""
