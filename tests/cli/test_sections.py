"""Options in named sections of --help (albert_edge.cli._sections)."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from albert_edge.cli._sections import OTHER, SectionedCommand, section


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
