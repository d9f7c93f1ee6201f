"""`demo bundle` replacing an existing bundle: the old one stays whole until the new one is in place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import albert_edge.pipeline.bundle as bundle_module
from albert_edge.pipeline.bundle import BundleOptions, make_bundle


def _built(opts, work: Path, step) -> dict:
    """What the build leaves in ``work`` (without the training): the bundle directory."""
    (work / "bundle").mkdir()
    (work / "bundle" / "labels.json").write_text('["new"]')
    return {}


@pytest.mark.parametrize("when", ["old-moved-aside", "new-moved-in"])
def test_interrupt_while_replacing_keeps_the_old_bundle(tmp_path, monkeypatch, when):
    """Ctrl-C just after the old bundle was moved aside, or while the new one is moved in."""
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "labels.json").write_text('["old"]')
    monkeypatch.setattr(bundle_module, "_build", _built)
    real_replace = os.replace

    def interrupted(src, dst):
        if when == "old-moved-aside" and Path(src) == out:
            real_replace(src, dst)
            raise KeyboardInterrupt
        if when == "new-moved-in" and Path(dst) == out and Path(src).name == "bundle":
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(bundle_module.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make_bundle(BundleOptions(str(out), preset="tiny", force=True))
    assert (out / "labels.json").read_text() == '["old"]'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]

    monkeypatch.setattr(bundle_module.os, "replace", real_replace)
    make_bundle(BundleOptions(str(out), preset="tiny", force=True))
    assert (out / "labels.json").read_text() == '["new"]'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]
