"""A command's options in named sections of its --help, for commands with many options::

    @click.command(cls=SectionedCommand)
    @section("Sweep",
             click.option("--seq-len", help="..."),
             click.option("--batch", help="..."))
    @section("Output",
             click.option("--json", is_flag=True, help="..."))
    def command(seq_len, batch, json): ...

The sections show in the order they are written, each option in the order given; an option
outside every section (click's own --help) comes last, under "Other options". Plain click.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["SectionedCommand", "section", "section_of", "OTHER"]

OTHER = "Other options"
_ATTRIBUTE = "help_section"  # where a parameter keeps the title of its section


def section(title: str, *options: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Apply the ``click.option`` decorators ``options`` and put each option under ``title``."""
    def apply(f: Any) -> Any:
        for option in reversed(options):  # click lists decorators' options from the top down
            f = option(f)
            params = f.params if isinstance(f, click.Command) else f.__click_params__
            setattr(params[-1], _ATTRIBUTE, title)
        return f

    return apply


def section_of(param: click.Parameter) -> str | None:
    """The title of the section ``param`` was declared in, or None."""
    return getattr(param, _ATTRIBUTE, None)


class SectionedCommand(click.Command):
    """A command whose --help lists its options under the titles :func:`section` gave them."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and not isinstance(param, click.Argument):
                sections.setdefault(section_of(param) or OTHER, []).append(record)
        if OTHER in sections:
            sections[OTHER] = sections.pop(OTHER)  # last, whatever came before it
        for title, records in sections.items():
            with formatter.section(title):
                formatter.write_dl(records)
