"""release.yaml's kubeconfigSecret (file, line, field on bad input), how a cluster is reached
(kubeContext, in-cluster, kubeconfigSecret), and the private directory's life."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.adapters.cluster_access import (
    PRIVATE_PREFIX,
    ClusterAccess,
    ServiceAccountFiles,
    in_cluster_configuration,
    remove_dead_leftovers,
)
from gitopsbot.core.fleet.model import KubeconfigSecretRef
from gitopsbot.errors import ConfigError, FleetError
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree

RELEASE = "clusters/staging/release.yaml"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def example_files() -> dict[str, str]:
    base = ROOT / "examples" / "fleet"
    return {p.relative_to(base).as_posix(): p.read_text() for p in base.rglob("*") if p.is_file()}


def _release(example_files: dict[str, str], edit: Callable[[str], str]) -> MemoryTree:
    files = dict(example_files)
    files[RELEASE] = edit(files[RELEASE])
    return MemoryTree(files)


def _problems(tree: MemoryTree) -> list[str]:
    with pytest.raises(FleetError) as caught:
        load_fleet(tree)
    return [str(p) for p in caught.value.problems]


def _text(tree: MemoryTree) -> str:
    data = tree.read(RELEASE)
    assert data is not None
    return data.decode()


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_kubeconfig_secret_is_read(example_files: dict[str, str]) -> None:
    tree = _release(
        example_files,
        lambda t: t.replace(
            "kubeContext: gpu-staging-eu1\n",
            "kubeconfigSecret:\n  name: prod-eu1-kubeconfig\n  key: config\n",
        ),
    )
    spec = load_fleet(tree).clusters["staging"]
    assert spec.release.kubeconfig_secret == KubeconfigSecretRef("prod-eu1-kubeconfig", "config")
    assert spec.release.kube_context == ""
    default_key = _release(
        example_files,
        lambda t: t.replace("kubeContext: gpu-staging-eu1\n", "kubeconfigSecret: {name: eu1}\n"),
    )
    assert load_fleet(default_key).clusters["staging"].release.kubeconfig_secret == (
        KubeconfigSecretRef("eu1", "kubeconfig")
    )


def test_kube_context_and_kubeconfig_secret_are_exclusive(example_files: dict[str, str]) -> None:
    tree = _release(example_files, lambda t: t + "kubeconfigSecret: {name: eu1}\n")
    line = _line(_text(tree), "kubeconfigSecret")
    problems = _problems(tree)
    assert any(
        p.startswith(f"{RELEASE}:{line}:") and "kubeconfigSecret" in p and "exclusive" in p
        for p in problems
    ), problems


@pytest.mark.parametrize(
    ("snippet", "needle", "message"),
    [
        ("kubeconfigSecret: {name: Prod_EU}\n", "Prod_EU", "not a valid Secret name"),
        ("kubeconfigSecret: {key: config}\n", "kubeconfigSecret", "kubeconfigSecret.name"),
        ("kubeconfigSecret: {name: a, keys: b}\n", "keys", "kubeconfigSecret.keys"),
        ("kubeconfigSecret: eu1\n", "eu1", "expected a mapping"),
        ("kubeconfigSecret: {name: a, key: 'x/y'}\n", "x/y", "not a valid Secret key"),
    ],
)
def test_bad_kubeconfig_secrets_are_located(
    example_files: dict[str, str], snippet: str, needle: str, message: str
) -> None:
    tree = _release(example_files, lambda t: t.replace("kubeContext: gpu-staging-eu1\n", snippet))
    line = _line(_text(tree), needle)
    problems = _problems(tree)
    assert any(p.startswith(f"{RELEASE}:{line}:") and message in p for p in problems), problems


# -- which way a cluster is reached ----------------------------------------------------------


def _sa(tmp_path: Path, *, token: str = "t0k3n") -> ServiceAccountFiles:
    d = tmp_path / "sa"
    d.mkdir(exist_ok=True)
    (d / "token").write_text(token)
    (d / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (d / "namespace").write_text("gitopsbot\n")
    return ServiceAccountFiles(d)


def test_in_cluster_only_in_a_pod_and_without_an_explicit_kubeconfig(tmp_path: Path) -> None:
    sa = _sa(tmp_path)
    service = ("10.0.0.1", "443")
    pod = ClusterAccess(service_account=sa, service=service, temp_root=tmp_path)
    assert pod.uses_in_cluster() and pod.home_namespace() == "gitopsbot"
    laptop = ClusterAccess(service_account=sa, service=None, temp_root=tmp_path)
    assert not laptop.uses_in_cluster()
    explicit = ClusterAccess(
        kubeconfig="/k", service_account=sa, service=service, temp_root=tmp_path
    )
    assert not explicit.uses_in_cluster()
    forced = ClusterAccess(
        kubeconfig="/k", in_cluster=True, service_account=sa, service=service, temp_root=tmp_path
    )
    assert forced.uses_in_cluster()


def test_a_kube_context_goes_to_the_kubeconfig_even_in_a_pod(tmp_path: Path) -> None:
    access = ClusterAccess(
        service_account=_sa(tmp_path), service=("10.0.0.1", "443"), temp_root=tmp_path,
        home=lambda: tmp_path / "home",
    )  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        access.connect(kube_context="prod", context_source="clusters/x/release.yaml:9: kubeContext")
    message = str(caught.value)
    assert "kube context 'prod' (clusters/x/release.yaml:9: kubeContext)" in message
    assert str(tmp_path / "home" / ".kube" / "config") in message


def test_the_client_re_reads_a_rotated_token_file(tmp_path: Path) -> None:
    sa = _sa(tmp_path, token="first-token")
    configuration = in_cluster_configuration(sa, "fd00::1", "6443")
    assert configuration.host == "https://[fd00::1]:6443"
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer first-token"
    fresh = tmp_path / "token.new"
    fresh.write_text("second-token-longer\n")
    os.replace(fresh, sa.token)
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer second-token-longer"
    sa.token.unlink()  # a moment without the file: the last token is kept
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer second-token-longer"


def test_the_private_directory_is_0700_and_goes_at_close(tmp_path: Path) -> None:
    access = ClusterAccess(
        service_account=_sa(tmp_path), service=("127.0.0.1", "6443"), temp_root=tmp_path
    )
    connection = access.connect()
    private = Path(connection.kubeconfig).parent
    assert private.name.startswith(f"{PRIVATE_PREFIX}{os.getpid()}-")
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert "t0k3n" not in Path(connection.kubeconfig).read_text()
    access.close()
    assert not private.exists()


def test_a_killed_bots_directory_is_removed_by_the_next_start(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = tmp_path / f"{PRIVATE_PREFIX}{child.stdout.strip()}-abc"
    dead.mkdir()
    (dead / "prod.kubeconfig").write_text("token: secret")
    alive = tmp_path / f"{PRIVATE_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    remove_dead_leftovers(tmp_path)
    assert not dead.exists() and alive.exists()


def test_without_kubeconfig_the_bot_reads_kubeconfig_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As kubectl and helm: --kubeconfig, else KUBECONFIG, else ~/.kube/config; a list of
    files is refused (the bot, helm and kubectl would not read the same one)."""
    from gitopsbot import settings
    from gitopsbot.app.clusters import cluster_access
    from gitopsbot.app.options import RunOptions
    from gitopsbot.errors import ConfigError

    mine = tmp_path / "mine.kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(mine))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert settings.kubeconfig() == str(mine)
    access = cluster_access(RunOptions(fleet_url="x"))
    with pytest.raises(ConfigError, match=str(mine)):
        access.connect(kube_context="sandbox")
    explicit = cluster_access(RunOptions(fleet_url="x", kubeconfig=str(tmp_path / "k")))
    with pytest.raises(ConfigError, match=str(tmp_path / "k")):
        explicit.connect(kube_context="sandbox")
    monkeypatch.setenv("KUBECONFIG", f"{mine}:{tmp_path / 'other'}")
    with pytest.raises(ConfigError, match="KUBECONFIG lists 2 files"):
        settings.kubeconfig()
