"""Effective component images from values and chart defaults, and which ones an upgrade moves.

Only the controller follows the chart's appVersion (``controller.image.tag`` empty → appVersion);
hypervisor, worker, client and the NVIDIA middleware are pinned in values and lag behind (F2).
Where the images come from (R3, tensorfusion-facts §1):

- controller: ``controller.image.repository`` ``:`` ``controller.image.tag`` or appVersion
- hypervisor: ``cluster.hypervisorImage`` (rendered into the pool's componentConfig)
- worker / client: ``providerConfigs.nvidia.images.remoteWorker`` / ``remoteClient``
- middleware: ``providerConfigs.nvidia.images.middleware`` (the hypervisor's init container;
  a ProviderConfig change rolls the hypervisor, R10)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.charts.values_diff import get_path, has_path, merge_values

IMAGE_PATHS: Mapping[str, tuple[str, ...]] = {
    "controller": ("controller", "image"),
    "hypervisor": ("cluster", "hypervisorImage"),
    "worker": ("providerConfigs", "nvidia", "images", "remoteWorker"),
    "client": ("providerConfigs", "nvidia", "images", "remoteClient"),
    "middleware": ("providerConfigs", "nvidia", "images", "middleware"),
}
COMPONENTS = tuple(IMAGE_PATHS)


@dataclass(frozen=True, slots=True)
class ImageChange:
    component: str
    before: str  # "" where unknown (nothing deployed, or the chart has no such key)
    after: str
    # The desired values set this image themselves (not left to the chart default).
    explicit: bool
    # The chart's default for this image moved between the two chart versions.
    default_moved: bool
    # The target chart's default for this image ("" where the chart has none).
    new_default: str = ""

    @property
    def changed(self) -> bool:
        return self.before != self.after

    @property
    def path(self) -> str:
        return ".".join(IMAGE_PATHS[self.component])


def _controller(values: Mapping[str, Any], app_version: str) -> str:
    repo = get_path(values, ("controller", "image", "repository"), "") or ""
    tag = get_path(values, ("controller", "image", "tag"), "") or app_version
    if not repo:
        return ""
    return f"{repo}:{tag}" if tag else str(repo)


def effective_images(user_values: Mapping[str, Any], chart: Chart | None) -> dict[str, str]:
    """Image per component for ``user_values`` installed with ``chart`` (its defaults merged)."""
    values = merge_values(chart.values, user_values) if chart else dict(user_values)
    app = chart.app_version if chart else ""
    out = {"controller": _controller(values, app)}
    for comp, path in IMAGE_PATHS.items():
        if comp != "controller":
            out[comp] = str(get_path(values, path, "") or "")
    return out


def _explicit(user_values: Mapping[str, Any], component: str) -> bool:
    if component == "controller":
        return bool(get_path(user_values, ("controller", "image", "tag"), ""))
    return has_path(user_values, IMAGE_PATHS[component])


def image_changes(
    *,
    deployed_values: Mapping[str, Any] | None,
    deployed_chart: Chart | None,
    desired_values: Mapping[str, Any],
    target_chart: Chart,
) -> tuple[ImageChange, ...]:
    after = effective_images(desired_values, target_chart)
    before = (
        effective_images(deployed_values, deployed_chart)
        if deployed_values is not None
        else dict.fromkeys(COMPONENTS, "")
    )
    old_defaults = effective_images({}, deployed_chart) if deployed_chart else None
    new_defaults = effective_images({}, target_chart)
    return tuple(
        ImageChange(
            component=comp,
            before=before.get(comp, ""),
            after=after.get(comp, ""),
            explicit=_explicit(desired_values, comp),
            default_moved=old_defaults is not None and old_defaults[comp] != new_defaults[comp],
            new_default=new_defaults.get(comp, ""),
        )
        for comp in COMPONENTS
    )
