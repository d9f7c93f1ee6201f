"""`albert-edge tokenizer`: train an ALBERT sentencepiece vocabulary, or show how text is encoded."""

from __future__ import annotations

from pathlib import Path

import click

from ._output import err_console, fmt_bytes, print_json, print_table
from ._types import force_option


@click.group("tokenizer")
def tokenizer() -> None:
    """Train or inspect an ALBERT sentencepiece tokenizer (spiece.model)."""


@tokenizer.command("train")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write spiece.model into (created if missing).")
@click.option("--vocab-size", default=8000, show_default=True, type=click.IntRange(min=14),
              help="Number of pieces, the 5 special tokens and ALBERT's 8 user-defined pieces included.")
@click.option("--character-coverage", default=0.99995, show_default=True,
              type=click.FloatRange(0.9, 1.0),
              help="Share of characters the vocabulary must cover; rarer ones become <unk>.")
@click.option("--input-sentence-size", default=1_000_000, show_default=True,
              type=click.IntRange(min=0),
              help="Lines sampled from the text to train on (0 = all; else more than 100).")
@click.option("--cased", is_flag=True, help="Keep upper case (ALBERT's own vocabularies are lower-cased).")
@force_option("--out already holds a spiece.model")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def train(files: tuple[Path, ...], out_dir: Path, vocab_size: int, character_coverage: float,
          input_sentence_size: int, cased: bool, force: bool, as_json: bool) -> None:
    """Train a unigram spiece.model on text FILES with ALBERT's special tokens.

    FILES may be `builtin`: the offline English corpus that `pretrain --corpus builtin` uses
    (the documentation of Python's standard library).

    Ids 0..4 are <pad>, <unk>, [CLS], [SEP], [MASK]. Lines are normalized as the tokenizer
    normalizes text (lower case, accents stripped).
    """
    from ..files import check_new_file, check_not_input
    from ..tokenizer import SPIECE_NAME, AlbertTokenizer, train_spiece

    check_not_input(out_dir, files)
    check_new_file(out_dir / SPIECE_NAME, force)
    if any(str(f) == "builtin" for f in files):
        from ..text import builtin_corpus_path  # stdlib only, no torch

        files = tuple(builtin_corpus_path() if str(f) == "builtin" else f for f in files)
    with err_console.status(f"training a {vocab_size}-piece vocabulary"):
        path = train_spiece(files, out_dir, vocab_size, do_lower_case=not cased,
                            character_coverage=character_coverage,
                            input_sentence_size=input_sentence_size)
    tok = AlbertTokenizer(path, do_lower_case=not cased)
    result = {"path": str(path), "vocab_size": tok.vocab_size, "bytes": path.stat().st_size,
              "special_ids": {"pad": tok.pad_id, "unk": tok.unk_id, "cls": tok.cls_id,
                              "sep": tok.sep_id, "mask": tok.mask_id}}
    if as_json:
        print_json(result)
        return
    specials = ", ".join(f"{name}={i}" for name, i in result["special_ids"].items())
    print_table("spiece model", ("field", "value"), [("path", path), ("pieces", tok.vocab_size),
                                          ("size", fmt_bytes(result["bytes"])),
                                          ("special ids", specials)])


@tokenizer.command("encode")
@click.argument("spiece", type=click.Path(path_type=Path))
@click.argument("text")
@click.argument("text_b", required=False)
@click.option("--max-length", type=click.IntRange(min=3), default=None,
              help="Truncate to this many ids, [CLS] and [SEP] included (default: no limit).")
@click.option("--cased", is_flag=True, help="Do not lower-case the text (for cased vocabularies).")
@click.option("--json", "as_json", is_flag=True, help="Print the pieces and ids as JSON.")
def encode(spiece: Path, text: str, text_b: str | None, max_length: int | None, cased: bool,
           as_json: bool) -> None:
    """Show the pieces and ids of TEXT (and TEXT_B) under SPIECE.

    SPIECE is a spiece.model file or a checkpoint directory holding one.
    """
    from ..errors import TokenizerError
    from ..text import utf8_problem
    from ..tokenizer import AlbertTokenizer

    for name, value in (("TEXT", text), ("TEXT_B", text_b)):
        problem = None if value is None else utf8_problem(value)
        if problem:
            raise TokenizerError(f"{name} is not UTF-8 text ({problem}): give it in UTF-8")
    tok = AlbertTokenizer.from_dir(spiece, do_lower_case=not cased)
    batch = tok(text, None if text_b is None else text_b, max_length=max_length, padding=False)
    ids = batch["input_ids"][0].tolist()
    types = batch["token_type_ids"][0].tolist()
    pieces = tok.id_to_piece(ids)
    specials = {tok.cls_id, tok.sep_id}
    for segment, (name, value) in enumerate((("TEXT", text), ("TEXT_B", text_b))):
        kept = [i for i, t in zip(ids, types) if t == segment and i not in specials]
        if value is not None and tok.tokenize(value) and not kept:
            raise TokenizerError(f"--max-length {max_length} leaves none of {name} "
                                 f"({len(tok.tokenize(value))} pieces): give a larger --max-length")
    if as_json:
        print_json({"pieces": pieces, "input_ids": ids, "token_type_ids": types})
        return
    print_table(f"{len(ids)} ids", ("#", "piece", "id", "type"),
                [(i, repr(p)[1:-1], n, t) for i, (p, n, t) in enumerate(zip(pieces, ids, types))],
                right=(0, 2, 3))


COMMANDS = [tokenizer]
