"""Signed charts, the pure part (``core.planning.provenance``,
``core.planning.reviewed_chart.check``): which
``chartKeyrings`` entry covers a repository; what the plan shows of a verification; a failed
one is the plan's CHART-PROVENANCE deny and the apply's block, before the pin and the plan's
digests are compared; ``chartKeyrings`` read from gitopsbot.yaml with file, line and field."""

from __future__ import annotations

import pytest

from gitopsbot.core.fleet.model import ChartKeyring
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.core.planning import provenance
from gitopsbot.core.planning import reviewed_chart as rc
from gitopsbot.errors import FleetError

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
KEYRINGS = (
    ChartKeyring("https://charts.example.com", "/k/all.gpg"),
    ChartKeyring("https://charts.example.com/stable/", "/k/stable.gpg"),
    ChartKeyring("oci://registry.example.com/charts", "/k/oci.gpg"),
)
VERIFIED = provenance.Provenance(
    required=True, where="chartKeyrings[0] (https://c)", keyring="/k.gpg",
    signer="Publisher <p@example.com>", fingerprint="ABCD",
)  # fmt: skip
FAILED = provenance.Provenance(
    required=True, where="chartKeyrings[0] (https://c)", keyring="/k.gpg",
    problem="https://c/x-1.tgz has no provenance file (.prov): have the chart published signed",
)  # fmt: skip


@pytest.mark.parametrize(
    ("url", "keyring"),
    [
        ("https://charts.example.com", "/k/all.gpg"),
        ("https://charts.example.com/", "/k/all.gpg"),
        ("https://charts.example.com/stable", "/k/stable.gpg"),  # the longest prefix wins
        ("https://charts.example.com/stable/gpu", "/k/stable.gpg"),
        ("https://charts.example.com/stable-old", "/k/all.gpg"),  # whole segments only
        ("oci://registry.example.com/charts", "/k/oci.gpg"),
        ("oci://registry.example.com/charts2", None),
        ("https://charts.example.org", None),
    ],
)
def test_the_entry_covering_a_repository(url: str, keyring: str | None) -> None:
    found = provenance.requirement(url, KEYRINGS)
    assert (found.entry.keyring if found is not None else None) == keyring


def test_the_plan_shows_who_signed_or_why_not() -> None:
    digests = rc.ChartDigests("tf", "1.8.7", "https://c/tf-1.8.7.tgz", A, provenance=VERIFIED)
    assert digests.lines()[-1] == (
        "provenance: verified, signed by Publisher <p@example.com> (key ABCD) in the keyring "
        "/k.gpg (chartKeyrings[0] (https://c))"
    )
    failed = rc.ChartDigests("tf", "1.8.7", "https://c/tf-1.8.7.tgz", A, provenance=FAILED)
    assert failed.lines()[-1].startswith("provenance: **NOT VERIFIED** with the keyring /k.gpg")
    assert "the apply will block this chart" in failed.lines()[-1]
    free = rc.ChartDigests("tf", "1.8.7", "s", A, provenance=provenance.Provenance(False))
    assert free.lines()[-1] == "provenance: not required (no chartKeyrings entry)"
    assert not any("provenance" in line for line in rc.ChartDigests("tf", "1", "s", A).lines())


def test_a_failed_verification_is_the_plans_deny() -> None:
    verdict = provenance.verdict(FAILED, None)
    assert verdict is not None and verdict.rule_id == "CHART-PROVENANCE" and verdict.blocking
    assert "has no provenance file" in verdict.message
    assert provenance.verdict(VERIFIED, None) is None
    assert provenance.verdict(None, None) is None


def test_the_record_keeps_the_verification() -> None:
    for found in (VERIFIED, FAILED, provenance.Provenance(False)):
        record = rc.Reviewed("c", "k", rc.ChartDigests("tf", "1", "s", A, provenance=found))
        assert rc.loads(record.dumps()) == record


def test_the_apply_blocks_a_failed_verification_first() -> None:
    fetched = rc.ChartDigests(
        "tf", "1.8.7", "https://c/tf-1.8.7.tgz", A, pinned=B, provenance=FAILED
    )
    planned = rc.Reviewed("c", "k", rc.ChartDigests("tf", "1.8.7", "s", A), request=4)
    found = rc.check(fetched=fetched, planned=planned, exact=True)
    assert found.failure == (
        "blocked: chart tf 1.8.7 from https://c/tf-1.8.7.tgz: provenance not verified with the "
        "keyring /k.gpg (chartKeyrings[0] (https://c)): https://c/x-1.tgz has no provenance "
        "file (.prov): have the chart published signed; nothing applied"
    )
    ok = rc.check(
        fetched=rc.ChartDigests("tf", "1.8.7", "s", A, provenance=VERIFIED),
        planned=planned,
        exact=True,
    )
    assert ok.failure == "" and "signed by Publisher <p@example.com>" in ok.note


def test_chart_keyrings_are_read_from_gitopsbot_yaml() -> None:
    text = (
        "chartKeyrings:\n"
        "  - repository: https://charts.example.com/stable\n"
        "    keyring: /etc/gitopsbot/keyrings/pubring.gpg\n"
        "  - repository: oci://registry.example.com/charts\n"
        "    keyring: /etc/gitopsbot/keyrings/oci.gpg\n"
    )
    assert parse_settings(text).chart_keyrings == (
        ChartKeyring("https://charts.example.com/stable", "/etc/gitopsbot/keyrings/pubring.gpg"),
        ChartKeyring("oci://registry.example.com/charts", "/etc/gitopsbot/keyrings/oci.gpg"),
    )
    assert parse_settings("").chart_keyrings == ()


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "  - repository: charts.example.com\n    keyring: /k.gpg\n",
            "gitopsbot.yaml:2:17: chartKeyrings[0].repository: not a valid chart repository URL",
        ),
        (
            "  - repository: https://u:p@charts.example.com\n    keyring: /k.gpg\n",
            "chartKeyrings[0].repository: not a valid chart repository URL",
        ),
        (
            "  - repository: https://c.example\n    keyring: keys/pubring.gpg\n",
            "gitopsbot.yaml:3:14: chartKeyrings[0].keyring: not a valid keyring path",
        ),
        ("  - repository: https://c.example\n", "chartKeyrings[0].keyring"),
        (
            "  - repository: https://c.example\n    keyring: /a\n"
            "  - repository: https://c.example/\n    keyring: /b\n",
            "chartKeyrings[1].repository: 'https://c.example/' is listed twice",
        ),
        ("  - repository: https://c.example\n    keyring: /a\n    key: x\n", "key"),
    ],
)
def test_a_wrong_entry_is_refused_where_it_is(entry: str, expected: str) -> None:
    with pytest.raises(FleetError) as err:
        parse_settings("chartKeyrings:\n" + entry)
    assert expected in str(err.value), str(err.value)
