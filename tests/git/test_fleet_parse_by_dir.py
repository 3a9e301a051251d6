"""#29: a new head of the fleet is parsed for the clusters whose directory changed; the others'
specs are taken from the parse before by their directory's Git tree id (and the limits they
were read with). The result is the fleet a parse from scratch gives. Real Git (the fleet's
remote, a person's clone, the bot's mirror)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gitopsbot import fleetrepo
from gitopsbot.core.fleet import assembly
from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import load_fleet
from tests.executor.conftest import fleet_files

if TYPE_CHECKING:
    from tests.git.conftest import Fleet


def two_clusters(image_b: str = "hv:1", limits: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for name, image in (("alpha", "hv:1"), ("beta", image_b)):
        for path, text in fleet_files("1.0.0", image).items():
            if path == "gitopsbot.yaml":
                out[path] = text + limits
            else:
                out[path.replace("clusters/lab/", f"clusters/{name}/")] = text.replace("lab", name)
    return out


def test_only_the_changed_clusters_directory_is_parsed_again(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleetrepo, "_SPECS", fleetrepo._SpecsByDir(64))
    parsed: list[str] = []
    real = assembly._cluster

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(assembly, "_cluster", counted)
    human, bot = fleet.human(), fleet.bot()
    human.git("rm", "-rq", "clusters")
    first = human.commit("two clusters", two_clusters())
    human.push()
    bot.fetch()
    assert set(load_fleet(bot.tree(first)).clusters) == {"alpha", "beta"}
    assert sorted(parsed) == ["alpha", "beta"]

    parsed.clear()
    second = human.commit("beta: hv:2", two_clusters("hv:2"))
    human.push()
    bot.fetch()
    fleet2 = load_fleet(bot.tree(second))
    assert parsed == ["beta"]  # alpha's directory did not change
    assert fleet2.clusters["beta"].values["cluster"]["hypervisorImage"] == "hv:2"
    monkeypatch.setattr(fleetrepo, "_SPECS", fleetrepo._SpecsByDir(64))
    assert load_fleet(bot.tree(second)) == fleet2  # as a parse from scratch

    # limits: changed in gitopsbot.yaml: every cluster read again with them
    parsed.clear()
    third = human.commit("limits", two_clusters("hv:2", "limits:\n  maxDepth: 2\n"))
    human.push()
    bot.fetch()
    with pytest.raises(FleetError, match="deep"):
        load_fleet(bot.tree(third))
    assert sorted(parsed) == ["alpha", "beta"]


def test_clusters_with_byte_identical_directories_keep_their_own_specs(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two directories with the same files share a Git tree id; each cluster keeps its own
    spec (its name, the paths its problems and verdicts point at). Found in CI: a spec cached
    from another test's cluster of the same bytes stood in for this one's."""
    monkeypatch.setattr(fleetrepo, "_SPECS", fleetrepo._SpecsByDir(64))
    same = fleet_files("1.0.0", "hv:1")
    files = {"gitopsbot.yaml": same["gitopsbot.yaml"]}
    for name in ("alpha", "beta"):
        for path, text in same.items():
            if path.startswith("clusters/lab/"):
                files[path.replace("clusters/lab/", f"clusters/{name}/")] = text
    human, bot = fleet.human(), fleet.bot()
    human.git("rm", "-rq", "clusters")
    head = human.commit("twins", files)
    human.push()
    bot.fetch()
    tree = bot.tree(head)
    assert tree.dir_id("clusters/alpha") == tree.dir_id("clusters/beta")
    for _ in range(2):  # the second read is served from the kept specs
        loaded = load_fleet(bot.tree(head))
        assert {n: s.name for n, s in loaded.clusters.items()} == {"alpha": "alpha", "beta": "beta"}
