"""`demo bundle` replacing an existing bundle: the old one stays whole until the new one is in place."""

from __future__ import annotations

import pytest

import albert_edge.pipeline.bundle as bundle_module
from albert_edge.pipeline.bundle import BundleOptions, make_bundle


def _built(opts, state, report) -> dict:
    """What the build leaves in its work directory (without the training): the bundle directory."""
    (state.root / "bundle").mkdir()
    (state.root / "bundle" / "labels.json").write_text('["new"]')
    return {}


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("exchange", [True, False], ids=["swap", "two-renames"])
def test_interrupt_while_replacing_keeps_the_old_bundle(tmp_path, monkeypatch, interrupt_install, exchange, after):
    """Ctrl-C on either side of the step that puts the new bundle in place (albert_edge.files.install)."""
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "labels.json").write_text('["old"]')
    monkeypatch.setattr(bundle_module, "_build", _built)
    fired = interrupt_install(out, exchange, after)
    with pytest.raises(KeyboardInterrupt):
        make_bundle(BundleOptions(str(out), preset="tiny", force=True))
    assert fired and (out / "labels.json").read_text() == '["old"]'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]

    monkeypatch.undo()
    monkeypatch.setattr(bundle_module, "_build", _built)
    make_bundle(BundleOptions(str(out), preset="tiny", force=True))
    assert (out / "labels.json").read_text() == '["new"]'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]
