"""The ids of the tokenizer.json that ``convert --to transformers-js`` writes, loaded by Hugging
Face's ``tokenizers`` (what transformers.js's tokenizer reads), against albert_edge.tokenizer's, on
the tokenizer tests' generated strings, counted by difference class (converters/tokenizer_json.py
and converters/tokenizer_parity.py name them). With transformers installed, the tokenizer
transformers' own slow-to-fast converter (AlbertConverter) makes of the same spiece.model is counted
beside it.

    python benchmarks/tokenizer_json_parity.py --tokenizer path/to/spiece.model
    python benchmarks/tokenizer_json_parity.py --tokenizer spiece.model --strings 2400 --max-len 512 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, the result file)


def parity_options(p: argparse.ArgumentParser, max_len: int) -> None:
    """The options of a tokenizer parity count: the spiece.model, how many strings, the length."""
    p.add_argument("--tokenizer", required=True, help="A spiece.model (or a directory holding one).")
    p.add_argument("--strings", type=int, default=2400, help="How many generated strings.")
    p.add_argument("--max-len", type=int, default=max_len, help="The model's length: texts are cut to it.")
    harness.options(p, json={"help": "Print the counts and examples as JSON."})


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    parity_options(p, max_len=512)
    harness.options(p, out={"help": "Also write the result file the docs render (benchmarks/results/"
                                    "tokenizer_json_parity.json): the counts, what ran, where and when."})
    args = p.parse_args(argv)

    import tokenizers

    from albert_edge.converters.tokenizer_json import count_differences, tokenizer_json
    from albert_edge.converters.tokenizer_parity import hard_strings
    from albert_edge.tokenizer import AlbertTokenizer, find_spiece

    spiece = find_spiece(args.tokenizer)
    tok = AlbertTokenizer(spiece)
    texts = [text for _, text in hard_strings(args.strings)]
    engines = {}
    with tempfile.TemporaryDirectory(prefix="albert-tokenizer-json-") as tmp:
        path = Path(tmp) / "tokenizer.json"
        path.write_text(json.dumps(tokenizer_json(tok), ensure_ascii=False), encoding="utf-8")
        engines["albert-edge tokenizer.json"] = tokenizers.Tokenizer.from_file(str(path))
    try:
        engines[f"transformers {_version('transformers')} AlbertConverter"] = _transformers_converter(spiece)
    except ImportError:
        pass
    results = {}
    for name, engine in engines.items():
        engine.enable_truncation(args.max_len)
        counts, examples = count_differences(tok, engine, texts, args.max_len)
        results[name] = {"counts": counts, "examples": examples}
    summary = {"strings": len(texts), "max_len": args.max_len, "vocab": tok.vocab_size,
               "tokenizers": _version("tokenizers"), "results": results}
    if args.out:
        _write_result(args.out, summary, spiece)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0
    print(f"{len(texts)} strings, {tok.vocab_size}-piece tokenizer, cut at {args.max_len} tokens, "
          f"tokenizers {_version('tokenizers')}")
    for name, result in results.items():
        print(name)
        for kind, n in sorted(result["counts"].items(), key=lambda kv: -kv[1]):
            print(f"  {kind:40s} {n:5d}")
        for kind, shown in result["examples"].items():
            print(f"  {kind}: {shown[0][:100]!r}")
    return 0


def _write_result(out: Path, summary: dict, spiece: Path) -> None:
    """The result file: the counts per engine and class (one short example each), the tokenizer's
    sha256, the versions, the machine, the date and the commit."""
    import datetime
    import hashlib

    result = {"benchmark": "tokenizer_json_parity", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "commit": harness.commit(), "machine": harness.platform_info(),
              "tokenizer": {"vocab": summary["vocab"], "sha256": hashlib.sha256(spiece.read_bytes()).hexdigest()},
              "strings": summary["strings"], "max_len": summary["max_len"],
              "versions": {"tokenizers": summary["tokenizers"]},
              "results": {name: {"counts": r["counts"],
                                 "example": {kind: shown[0][:80] for kind, shown in r["examples"].items()}}
                          for name, r in summary["results"].items()}}
    harness.write_json(out, result, ensure_ascii=False)


def _transformers_converter(spiece: Path):
    """The tokenizer transformers' slow-to-fast AlbertConverter makes of ``spiece`` (ALBERT's
    defaults: lower case, accents stripped)."""
    from types import SimpleNamespace

    import sentencepiece as spm
    from transformers.convert_slow_tokenizer import AlbertConverter

    sp = spm.SentencePieceProcessor(model_file=str(spiece))
    slow = SimpleNamespace(vocab_file=str(spiece), keep_accents=False, do_lower_case=True,
                           convert_tokens_to_ids=sp.piece_to_id)
    return AlbertConverter(slow).converted()


def _version(name: str) -> str:
    from importlib import metadata

    return metadata.version(name)


if __name__ == "__main__":
    sys.exit(main())
