"""Workload awareness in ``clusters/<name>/rollout.yaml``: a pool's ``waitForWorkloads`` and
``maxTenantDisruption`` (#18), for its worker and client batches::

    pools:
      gpu-a:
        waitForWorkloads:
          selector: 'team=ml'         # label selector on the pool's TensorFusion app pods;
                                      # optional, all of them when absent
          namespace: ml               # optional; all namespaces when absent
          until: no-active-session    # or opt-out-gone; default no-active-session
          timeout: 30m                # required; 0s checks once
          onTimeout: skip-window      # proceed | skip-window | halt; default skip-window
          # optOutAnnotation: gitopsbot.io/no-disruption  # only with until: opt-out-gone
        maxTenantDisruption: 25%      # share of distinct owning workloads (tenants) one
                                      # worker/client batch may touch; 1%..100%

Meanings are in ``core.rollouts.workload_wait``. Every wrong value is a located problem on the
``FieldReader`` (``pools.gpu-a.waitForWorkloads.onTimeout``).
"""

from __future__ import annotations

import re
from typing import Any

from gitopsbot.core.fleet.fields import DNS_LABEL, FieldReader, join, kind_of
from gitopsbot.core.fleet.located_yaml import LocatedMap
from gitopsbot.core.fleet.workload_specs import (
    ON_TIMEOUT,
    OPT_OUT_ANNOTATION,
    UNTIL,
    WorkloadAwareness,
    WorkloadWait,
)

# The keys this file reads (rollout_file's known pool keys include them).
WAIT_KEY = "waitForWorkloads"
SHARE_KEY = "maxTenantDisruption"
WORKLOAD_POOL_KEYS = (WAIT_KEY, SHARE_KEY)

_WAIT_KEYS = ("selector", "namespace", "until", "timeout", "onTimeout", "optOutAnnotation")
# Characters of a Kubernetes label selector (equality and set-based); the API server judges
# the rest, so a typo shows as a read error rather than a silently empty selection.
_SELECTOR = re.compile(r"^[A-Za-z0-9_./\-=!,() ]*$")
# A Kubernetes annotation key: optional DNS-subdomain prefix and "/", then a name.
_ANNOTATION = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def _wait(r: FieldReader, node: Any, fld: str, at: tuple[int, int]) -> WorkloadWait | None:
    m = r.mapping(node, fld, at, _WAIT_KEYS)
    if m is None:
        return None
    selector = r.string(m, "selector", fld, pattern=_SELECTOR, what="label selector")
    namespace = r.string(m, "namespace", fld, pattern=DNS_LABEL, what="namespace") or None
    until = r.choice(m, "until", fld, "no-active-session", UNTIL)
    # No default: a wait without a bound could hold a rollout forever.
    timeout: int | None = r.duration(m, "timeout", fld, None, minimum=0, required=True)
    on_timeout = r.choice(m, "onTimeout", fld, "skip-window", ON_TIMEOUT)
    annotation = r.string(
        m,
        "optOutAnnotation",
        fld,
        OPT_OUT_ANNOTATION,
        pattern=_ANNOTATION,
        what="annotation key (e.g. example.com/no-disruption)",
    )
    # Only against an ``until`` that is valid (or absent): a wrong one is its own problem.
    if "optOutAnnotation" in m and m.get("until", until) in UNTIL and until != "opt-out-gone":
        r.add(
            r.key_at(m, "optOutAnnotation"),
            join(fld, "optOutAnnotation"),
            f"does not apply to until '{until}'",
            "set until: opt-out-gone, or remove optOutAnnotation",
        )
    if timeout is None or until not in UNTIL or on_timeout not in ON_TIMEOUT:
        return None
    return WorkloadWait(
        selector=selector.strip(),
        namespace=namespace,
        until=until,
        timeout_seconds=timeout,
        on_timeout=on_timeout,
        opt_out_annotation=annotation or OPT_OUT_ANNOTATION,
    )


def _share(r: FieldReader, node: LocatedMap, fld: str) -> int | None:
    """``maxTenantDisruption``: a percentage ``"25%"`` (1..100)."""
    value, at, where = node[SHARE_KEY], r.value_at(node, SHARE_KEY), join(fld, SHARE_KEY)
    text = value.strip() if isinstance(value, str) else ""
    if text.endswith("%") and text[:-1].isdigit() and 1 <= int(text[:-1]) <= 100:
        return int(text[:-1])
    got = f"'{value}'" if isinstance(value, str) else kind_of(value)
    hint = "a share of the pool's tenants such as 25%"
    if isinstance(value, int) and not isinstance(value, bool):
        hint = f"write {value}% for a percentage"
    r.add(at, where, f"expected a percentage from 1% to 100%, got {got}", hint)
    return None


def read_workload_awareness(r: FieldReader, node: Any, fld: str) -> WorkloadAwareness | None:
    """A pool mapping's ``waitForWorkloads`` and ``maxTenantDisruption`` (``fld``:
    ``pools.<pool>``); None when it has neither (or they are wrong: the problems say why)."""
    if not isinstance(node, LocatedMap):
        return None
    wait = None
    if node.get(WAIT_KEY) is not None:
        wait = _wait(r, node[WAIT_KEY], join(fld, WAIT_KEY), r.value_at(node, WAIT_KEY))
    share = _share(r, node, fld) if node.get(SHARE_KEY) is not None else None
    if wait is None and share is None:
        return None
    return WorkloadAwareness(wait=wait, max_tenant_share_percent=share)


__all__ = ["SHARE_KEY", "WAIT_KEY", "WORKLOAD_POOL_KEYS", "read_workload_awareness"]
