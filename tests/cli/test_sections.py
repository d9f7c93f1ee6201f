"""Options in named sections of --help (albert_edge.cli._sections), and `profile --help` in them."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from albert_edge.cli import main
from albert_edge.cli._sections import OTHER, SectionedCommand, section, section_of
from albert_edge.cli.profile import profile

PROFILE_SECTIONS = ["Sweep", "Engines", "Timing", "Inputs", "Operators", "Output", "Baseline", "Remote", "Estimates"]


def _sections(help_text: str) -> dict[str, list[str]]:
    """The lines of each titled section of a --help text, by title."""
    found: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in help_text.splitlines():
        title = re.fullmatch(r"(\S.*):", line)
        if title:
            lines = found.setdefault(title.group(1), [])
        elif lines is not None:
            lines.append(line)
    return found


def _options(lines: list[str]) -> list[str]:
    return [line.split()[0].rstrip(",") for line in lines if line.startswith("  -")]


@click.command(cls=SectionedCommand)
@click.option("--loose", is_flag=True, help="In no section.")
@section("First", click.option("--a", help="A."), click.option("--b", help="B."))
@section("Second", click.option("--c", is_flag=True, help="C."))
def tiny(**given):
    click.echo(repr(sorted(given.items())))


def test_sections_render_in_order_with_their_options_in_order():
    result = CliRunner().invoke(tiny, ["--help"])
    assert result.exit_code == 0, result.output
    found = _sections(result.output)
    assert list(found) == ["First", "Second", OTHER]  # the unsectioned options last, whatever their place
    assert [_options(lines) for lines in found.values()] == [["--a", "--b"], ["--c"], ["--loose", "--help"]]
    assert "Options:" not in result.output


def test_sectioned_options_still_parse():
    result = CliRunner().invoke(tiny, ["--b", "2", "--c", "--a", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == repr([("a", "1"), ("b", "2"), ("c", True), ("loose", False)])


def test_every_profile_option_belongs_to_a_section():
    loose = [p.name for p in profile.params if isinstance(p, click.Option) and section_of(p) is None]
    assert loose == []
    assert list(dict.fromkeys(section_of(p) for p in profile.params if isinstance(p, click.Option))) == \
        PROFILE_SECTIONS


def test_profile_help_shows_each_section_in_one_screen():
    result = CliRunner().invoke(main, ["profile", "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    found = _sections(result.output)
    assert list(found) == [*PROFILE_SECTIONS, OTHER]
    assert _options(found[OTHER]) == ["-h"]
    shown = [o for title in PROFILE_SECTIONS for o in _options(found[title])]
    declared = [p.opts[0] for p in profile.params if isinstance(p, click.Option)]
    assert shown == declared  # each option once, in its section
    for title in PROFILE_SECTIONS:
        assert len(found[title]) <= 40, (title, len(found[title]))


@pytest.mark.parametrize("args, params", [
    (["m.onnx"], {"seq_len": "16,32,64,128", "threads": "1,2", "remote": (), "threshold": 0.05, "fixed": True}),
    (["m.onnx", "--seq-len", "8", "--no-fixed", "--remote", "pi@a", "--remote", "pi@b", "--threshold", "25"],
     {"seq_len": "8", "fixed": False, "remote": ("pi@a", "pi@b"), "threshold": 0.25}),
])
def test_profile_reads_its_options_as_before(args, params):
    got = profile.make_context("profile", args).params
    assert {k: got[k] for k in params} == params
