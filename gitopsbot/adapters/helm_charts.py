"""Charts fetched with helm: pulled (unpacked, or as the archive and its provenance), verified.

A local chart archive is judged by helm (``helm show chart``) and unpacked here, regular
files and directories only. An OCI chart's registry login reaches helm in a registry config
of its own, per child, never argv (``oci_registry``).
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path, PurePosixPath

from gitopsbot.adapters.helm_runner import HelmRunner, attempt_error
from gitopsbot.adapters.oci_registry import (
    RegistryLogins,
    helm_registry_flags,
    is_oci,
    oci_chart,
)
from gitopsbot.errors import HelmChartUnusable, HelmFailed
from gitopsbot.ports.helm import ChartRef


class HelmCharts:
    """The chart reads of a HelmCli, through its ``runner``, with its registry logins."""

    def __init__(self, runner: HelmRunner, registries: RegistryLogins) -> None:
        self._runner = runner
        self._registries = registries

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        with self._runner.call():
            dest.mkdir(parents=True, exist_ok=True)
            if chart.path:
                return self._pull_local(Path(chart.path), version, dest)
            what = f"helm pull {chart.label} {version}"
            label = f"{chart.label} version {version}"

            def attempt() -> Path:
                with self._runner.workdir() as work:
                    unpack = work / "chart"
                    unpack.mkdir()
                    full = self._pull_argv(chart, version, work)
                    full += ["--untar", "--untardir", str(unpack)]
                    result = self._runner.run(
                        full, what=what, check=False, work=work, mask=self._registries.secrets()
                    )
                    if result.code != 0:
                        error = self._runner.failure(full, result, what=what, chart=label)
                        raise attempt_error(error, result)
                    # helm 3.18 also leaves a directory named after the archive: take the chart.
                    return move_chart(unpack, dest, f"{what}: {label}")

            return self._runner.retrying(what, attempt)

    def pull_archive(self, chart: ChartRef, version: str, digest: str = "") -> bytes:
        """The chart's archive (``.tgz``) as helm pulls it, bytes for bytes: what an OCI
        chart source reads (``oci_charts``). ``digest``: an OCI chart's manifest digest,
        pulled by it (``oci://…/<chart>@sha256:…``, helm 3 and 4) rather than by its tag, so
        a tag moved meanwhile cannot swap the archive. Errors as ``pull``'s."""
        return self._pulled(chart, version, digest, prov=False)[0]

    def pull_provenance(self, chart: ChartRef, version: str, digest: str = "") -> bytes | None:
        """The chart's provenance file as ``helm pull --prov`` fetches it (for an OCI chart,
        the manifest's provenance layer), None when there is none. Errors as ``pull``'s."""
        return self._pulled(chart, version, digest, prov=True)[1]

    def verify(self, archive: Path, provenance: bytes, *, keyring: Path, filename: str) -> str:
        """``helm verify`` of the very file ``archive`` (linked as ``filename``, the name the
        provenance signs, with ``provenance`` beside it as ``<filename>.prov``, in this
        child's work directory) with the public ``keyring``: helm's report (``Signed by:``,
        ``Using Key With Fingerprint:``). Raises HelmFailed with helm's reason."""
        if "/" in filename or not filename.endswith(".tgz"):
            raise HelmFailed(f"helm verify: {filename!r} is not an archive name")
        what = f"helm verify {filename}"
        with self._runner.call(), self._runner.workdir() as work:
            link = work / filename
            link.symlink_to(archive.resolve())
            (work / f"{filename}.prov").write_bytes(provenance)
            argv = ["verify", str(link), "--keyring", str(keyring)]
            return self._runner.run(argv, what=what, work=work).stdout

    def _pulled(
        self, chart: ChartRef, version: str, digest: str, *, prov: bool
    ) -> tuple[bytes, bytes | None]:
        what = f"helm pull {chart.label} {version}"
        label = f"{chart.label} version {version}"

        def attempt() -> tuple[bytes, bytes | None]:
            with self._runner.workdir() as work:
                into = work / "archive"
                into.mkdir()
                if digest and is_oci(chart.repo_url):
                    pinned = f"{oci_chart(chart.repo_url, chart.name)}@{digest}"
                    argv = ["pull", pinned, *registry_flags(self._registries, chart, work)]
                else:
                    argv = self._pull_argv(chart, version, work)
                full = [*argv, "--destination", str(into), *(["--prov"] if prov else [])]
                result = self._runner.run(
                    full, what=what, check=False, work=work, mask=self._registries.secrets()
                )
                if result.code != 0:
                    error = self._runner.failure(full, result, what=what, chart=label)
                    raise attempt_error(error, result)
                found = sorted(into.glob("*.tgz"))
                if len(found) != 1:
                    raise HelmChartUnusable(f"{what}: chart {label}: helm left no archive")
                signed = found[0].with_name(found[0].name + ".prov")
                return found[0].read_bytes(), signed.read_bytes() if signed.is_file() else None

        with self._runner.call():
            return self._runner.retrying(what, attempt)

    def _pull_argv(self, chart: ChartRef, version: str, work: Path) -> list[str]:
        flags = registry_flags(self._registries, chart, work)
        return ["pull", *chart_args(chart), "--version", version, *flags]

    def _pull_local(self, source: Path, version: str, dest: Path) -> Path:
        label = f"{source} version {version}"
        if source.is_dir():
            target = dest / source.name
            shutil.copytree(source, target, dirs_exist_ok=True)
            return target
        what = f"helm pull {source}"
        if not source.is_file():
            raise HelmChartUnusable(f"{what}: chart {label} cannot be used: no such file")
        # helm has no command that unpacks a local archive: it judges the archive (as it
        # would for an upgrade), then it is unpacked here, files and directories only.
        argv = ["show", "chart", str(source)]
        result = self._runner.run(argv, what=what, check=False)
        if result.code != 0:
            raise self._runner.failure(argv, result, what=what, chart=label)
        with self._runner.workdir() as work:
            unpack_archive(source, work / "chart", f"{what}: chart {label}")
            return move_chart(work / "chart", dest, f"{what}: chart {label}")


def chart_args(chart: ChartRef) -> list[str]:
    """The chart as helm's argument: a path, ``oci://host/path/<chart>``, or a name with
    ``--repo`` (helm takes no ``--repo`` for an OCI registry)."""
    if chart.path:
        return [chart.path]
    if is_oci(chart.repo_url):
        return [oci_chart(chart.repo_url, chart.name)]
    return [chart.name, "--repo", chart.repo_url]


def registry_flags(registries: RegistryLogins, chart: ChartRef, work: Path) -> list[str]:
    if not is_oci(chart.repo_url):
        return []
    return helm_registry_flags(registries.for_url(chart.repo_url), work)


def move_chart(unpacked: Path, dest: Path, what: str) -> Path:
    charts = [p for p in unpacked.iterdir() if (p / "Chart.yaml").is_file()]
    if len(charts) != 1:
        raise HelmChartUnusable(f"{what}: no chart directory in the archive")
    target = dest / charts[0].name
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(charts[0]), target)
    return target


def unpack_archive(archive: Path, into: Path, what: str) -> None:
    """Unpack a chart archive: regular files and directories only, every path inside
    ``into`` (no absolute path, no ``..``, no link, no device)."""
    into.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = PurePosixPath(member.name)
                if (
                    name.is_absolute()
                    or ".." in name.parts
                    or not (member.isfile() or member.isdir())
                ):
                    raise HelmChartUnusable(
                        f"{what} cannot be used: illegal file path {member.name!r} in the archive"
                    )
                target = into.joinpath(*name.parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is None:
                    raise HelmChartUnusable(f"{what} cannot be used: unreadable {member.name!r}")
                with source, target.open("wb") as out:
                    shutil.copyfileobj(source, out)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise HelmChartUnusable(f"{what} cannot be used: not a chart archive ({e})") from None
