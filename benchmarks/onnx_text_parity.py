"""The ids an onnx-text file's tokenizer node computes (onnxruntime-extensions' SentencepieceTokenizer
with ALBERT's normalizer inside) against albert_edge.tokenizer's, on the tokenizer tests' generated
strings, counted by difference class (converters/tokenizer_parity.py).

    python benchmarks/onnx_text_parity.py --tokenizer path/to/spiece.model
    python benchmarks/onnx_text_parity.py --tokenizer spiece.model --strings 2400 --max-len 256 --json

The model behind the tokenizer is a tiny random one of the tokenizer's vocabulary: only the ids
are compared here (tests/converters/test_onnx_text.py checks the outputs).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (the parser every benchmark shares)
from tokenizer_json_parity import parity_options  # noqa: E402  (the same options, read one way)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    parity_options(p, max_len=256)
    args = p.parse_args(argv)

    import torch

    from albert_edge.config import AlbertConfig
    from albert_edge.converters.onnx_text import IDS_OUTPUT, export, run_texts
    from albert_edge.converters.tokenizer_parity import count_classes, hard_strings
    from albert_edge.model import build_model
    from albert_edge.tokenizer import AlbertTokenizer, find_spiece

    spiece = find_spiece(args.tokenizer)
    vocab = AlbertTokenizer(spiece).vocab_size
    config = AlbertConfig.preset("tiny").replace(vocab_size=vocab, max_position_embeddings=args.max_len)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="albert-onnx-text-") as tmp:
        path = export(build_model(config, "base").eval(), Path(tmp) / "model.text.onnx", seq_len=16, tokenizer=spiece)
        texts = [text for _, text in hard_strings(args.strings)]
        engine = [got[IDS_OUTPUT][0].tolist() for got in run_texts(path, texts)]
    counts, examples = count_classes(spiece, texts, engine, args.max_len)
    if args.json:
        print(json.dumps({"strings": len(texts), "max_len": args.max_len, "counts": counts, "examples": examples},
                         indent=2, ensure_ascii=False))
        return 0
    print(f"{len(texts)} strings, {vocab}-piece tokenizer, cut at {args.max_len} tokens")
    for kind, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:40s} {n:5d}")
    for kind, shown in examples.items():
        print(f"{kind}: {shown[0][:120]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
