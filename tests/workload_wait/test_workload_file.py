"""core.fleet.workload_file: a pool's waitForWorkloads and maxTenantDisruption, every wrong
value a problem naming file, line and field."""

from __future__ import annotations

import textwrap

from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.located_yaml import read
from gitopsbot.core.fleet.workload_file import WORKLOAD_POOL_KEYS, read_workload_awareness
from gitopsbot.core.rollouts.workload_wait import (
    OPT_OUT_ANNOTATION,
    WorkloadAwareness,
    WorkloadWait,
)

FILE = "clusters/alpha/rollout.yaml"
EXAMPLE = """\
pools:
  gpu-a:
    waitForWorkloads:
      selector: 'team=ml'
      namespace: ml
      until: no-active-session
      timeout: 30m
      onTimeout: skip-window
    maxTenantDisruption: 25%
"""


def parse(text: str) -> tuple[WorkloadAwareness | None, list[str]]:
    doc, problems = read(textwrap.dedent(text), FILE)
    assert not problems, problems
    r = FieldReader(FILE)
    got = read_workload_awareness(r, doc["pools"]["gpu-a"], "pools.gpu-a")
    return got, [str(p) for p in r.problems]


def pool(body: str) -> str:
    return "pools:\n  gpu-a:\n" + textwrap.indent(textwrap.dedent(body), "    ")


def test_the_documented_example() -> None:
    got, problems = parse(EXAMPLE)
    assert problems == []
    assert got == WorkloadAwareness(
        WorkloadWait("team=ml", "ml", "no-active-session", 1800, "skip-window"), 25
    )
    assert WORKLOAD_POOL_KEYS == ("waitForWorkloads", "maxTenantDisruption")


def test_defaults_and_absence() -> None:
    got, problems = parse(pool("waitForWorkloads: {timeout: 0s}\n"))
    assert problems == []
    assert got == WorkloadAwareness(
        WorkloadWait("", None, "no-active-session", 0, "skip-window", OPT_OUT_ANNOTATION)
    )
    assert parse(pool("batchPercentage: 20\n")) == (None, [])
    got, _ = parse(pool("maxTenantDisruption: 100%\n"))
    assert got == WorkloadAwareness(None, 100)


def test_opt_out_with_its_own_annotation() -> None:
    got, problems = parse(
        pool(
            """\
            waitForWorkloads:
              until: opt-out-gone
              optOutAnnotation: example.com/keep-me
              timeout: 2h
              onTimeout: halt
            """
        )
    )
    assert problems == []
    assert got is not None and got.wait == WorkloadWait(
        "", None, "opt-out-gone", 7200, "halt", "example.com/keep-me"
    )


def test_wrong_values_name_field_and_line() -> None:
    got, problems = parse(
        pool(
            """\
            waitForWorkloads:
              selector: 'team=ml;x'
              namespace: ML
              until: no-session
              onTimeout: skip
              optOutAnnotation: 'bad key!'
              wait: 5m
            maxTenantDisruption: 25
            """
        )
    )
    assert got is None
    f = f"{FILE}:"
    assert problems == [
        f"{f}9:7: pools.gpu-a.waitForWorkloads.wait: unknown key (known: selector, namespace, "
        "until, timeout, onTimeout, optOutAnnotation)",
        f"{f}4:17: pools.gpu-a.waitForWorkloads.selector: not a valid label selector",
        f"{f}5:18: pools.gpu-a.waitForWorkloads.namespace: not a valid namespace",
        f"{f}6:14: pools.gpu-a.waitForWorkloads.until: 'no-session' is not one of "
        "no-active-session, opt-out-gone (did you mean 'no-active-session'?)",
        f"{f}4:7: pools.gpu-a.waitForWorkloads.timeout: required key is missing",
        f"{f}7:18: pools.gpu-a.waitForWorkloads.onTimeout: 'skip' is not one of "
        "proceed, skip-window, halt",
        f"{f}8:25: pools.gpu-a.waitForWorkloads.optOutAnnotation: not a valid annotation key "
        "(e.g. example.com/no-disruption)",
        f"{f}10:26: pools.gpu-a.maxTenantDisruption: expected a percentage from 1% to 100%, "
        "got integer (write 25% for a percentage)",
    ]


def test_more_wrong_values() -> None:
    _, problems = parse(
        pool(
            """\
            waitForWorkloads:
              timeout: 30
              optOutAnnotation: example.com/x
            maxTenantDisruption: 0%
            """
        )
    )
    assert [p.split(": ", 1)[1] for p in problems] == [
        "pools.gpu-a.waitForWorkloads.timeout: expected a duration such as 30s, 10m, 2h or "
        "1h30m, got integer (write '30s' for seconds)",
        "pools.gpu-a.waitForWorkloads.optOutAnnotation: does not apply to until "
        "'no-active-session' (set until: opt-out-gone, or remove optOutAnnotation)",
        "pools.gpu-a.maxTenantDisruption: expected a percentage from 1% to 100%, got '0%' "
        "(a share of the pool's tenants such as 25%)",
    ]
    _, problems = parse(pool("waitForWorkloads: [a]\n"))
    assert problems == [f"{FILE}:3:23: pools.gpu-a.waitForWorkloads: expected a mapping, got list"]
