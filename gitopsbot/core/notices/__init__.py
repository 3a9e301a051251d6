"""What a person is told: the happenings between two journals (``happenings``), their
Kubernetes Events (``kube_events``) and chat notifications (``notifications``).
"""
