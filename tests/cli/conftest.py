"""Every table the CLI prints in these tests fits the output: 100 columns, the width of a pipe
or a log without COLUMNS (tables_fit, autouse here and in the report and profile tests)."""

from __future__ import annotations

import pytest

from albert_edge.cli import _output


@pytest.fixture(autouse=True)
def tables_fit(monkeypatch):
    """Each table rendered while the test runs is checked against the output's width; the CLI's
    console is 100 columns wide, as a pipe without COLUMNS is."""
    fit = _output.fit_table
    monkeypatch.setattr(_output.console, "width", _output.PIPE_WIDTH)

    def checked(title, columns, cells, width):
        text, legend, left_out = fit(title, columns, cells, width)
        wide = [line for line in text.splitlines() if len(line) > width]
        assert not wide, f"a table wider than {width} columns:\n" + "\n".join(wide)
        return text, legend, left_out

    monkeypatch.setattr(_output, "fit_table", checked)
