"""Values keys a chart without values.schema.json does not know: warned about by
``gitopsbot validate --chart-dir``, located, with the nearest key the chart has; judged only
under the chart's non-empty mappings; never an error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gitopsbot.cli import main
from gitopsbot.core.values_keys import unknown_keys

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fleet"
CHARTS = ROOT / "examples" / "charts"  # tensor-fusion 1.8.7 there has no values.schema.json

DEFAULTS = {
    "controller": {"replicaCount": 1, "image": {"tag": "x"}, "nodeSelector": {}},
    "tolerations": [],
    "name": "tf",
}


def test_a_typo_is_found_with_the_nearest_key() -> None:
    values = {"controller": {"replicaCnt": 2, "image": {"tga": "y"}}}
    assert unknown_keys(values, DEFAULTS) == [
        ("controller.replicaCnt", "did you mean 'replicaCount'?"),
        ("controller.image.tga", "did you mean 'tag'?"),
    ]


def test_open_defaults_take_any_keys() -> None:
    values = {
        "controller": {"nodeSelector": {"gpu": "yes"}},  # an empty mapping: open
        "tolerations": [{"key": "k"}],  # a list: open
        "name": {"first": "a"},  # a scalar default: its replacement is not judged
    }
    assert unknown_keys(values, DEFAULTS) == []


def test_a_key_with_nothing_near() -> None:
    assert unknown_keys({"zzz": 1}, DEFAULTS) == [("zzz", "")]


def test_validate_warns_located_and_still_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not (CHARTS / "tensor-fusion-1.8.7" / "values.schema.json").exists()
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, root)
    values = root / "clusters" / "staging" / "values.yaml"
    text = values.read_text()
    values.write_text(text.replace("  replicaCount: 1\n", "  replicaCnt: 1\n", 1))
    line = text.splitlines().index("  replicaCount: 1") + 1
    code = main(["validate", str(root), "--chart-dir", str(CHARTS)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert (
        f"clusters/staging/values.yaml:{line}:3: controller.replicaCnt: warning: not a key of "
        "tensor-fusion 1.8.7's values.yaml (did you mean 'replicaCount'?)"
    ) in err.splitlines()
