"""MediaPipe files against albert-edge, in figures: run where albert-edge[mobile] is installed
(.ci/mobile.sh builds such an environment).

For a labelled classifier and a base checkpoint (made here when not given: a small ALBERT,
H=64, fine-tuned for five epochs on the built-in topic paragraphs, as tests/mobile do), it converts
both with `convert --to mediapipe`, quantizes the classifier's file int8-dynamic, and prints:
MediaPipe's TextClassifier / TextEmbedder on raw text against albert_edge.runtime.Session fed
albert-edge's ids (same file) and against PyTorch, on the texts whose ids MediaPipe computes as
albert-edge does (and, apart, on those it does not); int8 top-1 agreement between MediaPipe and the
Session on the int8 file; stored vs unique weight bytes read back from each file; and the ids
MediaPipe's own pre-processing computes against albert_edge.tokenizer's on 2,400 generated hard
strings (converters/tokenizer_parity.py), with the embedded model as it is and with ALBERT's
normalizer, counted per difference class.

    python benchmarks/mediapipe_parity.py --texts 400
    python benchmarks/mediapipe_parity.py --tokenizer-only --strings 2400   # the table of classes
    python benchmarks/mediapipe_parity.py --classifier CKPT --base CKPT --seq-len 64 --json
"""

from __future__ import annotations

import json
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (the options every benchmark shares)

ROOT = Path(__file__).parents[1]


def make_checkpoints(root: Path) -> tuple[Path, Path]:
    import torch

    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model
    from albert_edge.tokenizer import train_spiece
    from albert_edge.train.finetune import FinetuneOptions, finetune
    from albert_edge.train.labelled import write_topic_dataset
    from albert_edge.train.state import export_model

    spiece = train_spiece([ROOT / "tests" / "data" / "corpus.txt"], root / "spiece", vocab_size=400)
    config = AlbertConfig.preset("tiny").replace(vocab_size=400, embedding_size=32, hidden_size=64,
                                                 intermediate_size=128, classifier_dropout_prob=0.0)
    torch.manual_seed(0)
    base = export_model(build_model(config, "pretraining"), root / "pretrained", spiece)
    train, evaluate = write_topic_dataset(root / "topics")
    finetune(FinetuneOptions(task="classification", train_file=str(train), eval_file=str(evaluate), model=str(base),
                             out_dir=str(root / "classifier"), epochs=5, batch_size=16, lr=5e-4, max_seq_length=32,
                             device="cpu", log_every=1000))
    encoder = build_model(config, "base")
    with torch.no_grad():  # zero biases and unit LayerNorms would be folded away by the converter
        for p in encoder.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    encoder = export_model(encoder, root / "base", spiece)
    return root / "classifier", Path(encoder)


def texts(n: int) -> list[str]:
    from albert_edge.text import builtin_corpus_path, split_sentences

    lines = builtin_corpus_path().read_text(encoding="utf-8").splitlines()
    found = [s for line in lines for s in split_sentences(line) if len(s.split()) >= 4]
    return found[:: max(1, len(found) // n)][:n]


def measure(classifier: Path, base: Path, n: int, seq_len: int, work: Path, strings: int = 2400) -> dict:
    import torch

    from albert_edge import checkpoints
    from albert_edge.converters.export import convert
    from albert_edge.converters.mediapipe import file_model
    from albert_edge.converters.mediapipe_check import agreement, session_answers, task_answers
    from albert_edge.converters.mediapipe_ids import engine_ids
    from albert_edge.formats.weights import analyze, read_file
    from albert_edge.converters.quantized import quantize_file
    from albert_edge.quantize import QuantizeConfig
    from albert_edge.tokenizer import AlbertTokenizer

    sample = texts(n)
    out: dict = {"texts": len(sample), "seq_len": seq_len}
    for name, checkpoint, task in (("classifier", classifier, "TextClassifier"), ("embedder", base, "TextEmbedder")):
        path = convert(str(checkpoint), work / name, targets=("mediapipe",), seq_len=seq_len).files[0].path
        engine = task_answers(path, task, sample)
        session = session_answers(path, checkpoint, sample, seq_len)
        _, model = checkpoints.load_model(checkpoint, None)
        wrapped, tok = file_model(model.eval()), AlbertTokenizer.from_dir(checkpoint)
        with torch.no_grad():
            reference = np.concatenate([wrapped(*(torch.from_numpy(f[k]) for k in ("input_ids", "attention_mask",
                                                                                    "token_type_ids"))).numpy()
                                        for f in (tok([t], max_length=seq_len, padding="max_length", truncation=True)
                                                  for t in sample)]).astype(np.float64)
        weights = analyze(read_file(path), wrapped)
        # The ids MediaPipe fed, from the spiece.model inside the file: where they are albert-edge's,
        # the answers must agree to float precision; where they are not, the tokenizers differ.
        embedded = work / f"{name}.spiece.model"
        with zipfile.ZipFile(path) as packed:
            embedded.write_bytes(packed.read("spiece.model"))
        fed = engine_ids(embedded, sample, seq_len)
        same = np.array([f == tok([t], max_length=seq_len, truncation=True, padding="longest")["input_ids"][0].tolist()
                         for f, t in zip(fed, sample)])
        out[name] = {"file": path.name, "bytes": path.stat().st_size,
                     "texts_with_albert_ids": int(same.sum()),
                     "mediapipe_vs_session": agreement(task, engine[same], session[same]),
                     "mediapipe_vs_pytorch": agreement(task, engine[same], reference[same]),
                     "mediapipe_vs_session_other_ids": agreement(task, engine[~same], session[~same]) if (~same).any()
                     else None,
                     "session_vs_pytorch": agreement(task, session, reference),
                     "stored_weight_bytes": weights.stored_bytes, "unique_weight_bytes": weights.unique_bytes,
                     "model_param_bytes": weights.model_param_bytes, "duplicates": len(weights.duplicates)}
        if task == "TextClassifier":
            int8 = quantize_file(path, QuantizeConfig("int8-dynamic", tokenizer=checkpoint, calibration=("builtin",),
                                                      num_samples=32, eval_samples=32)).out_path
            e8, s8 = task_answers(int8, task, sample), session_answers(int8, checkpoint, sample, seq_len)
            out[name]["classes_predicted"] = np.bincount(engine.argmax(1), minlength=engine.shape[1]).tolist()
            out[name]["int8"] = {"file": int8.name, "bytes": int8.stat().st_size,
                                 "top1_mediapipe_vs_session": float((e8.argmax(1) == s8.argmax(1)).mean()),
                                 "top1_mediapipe_vs_session_albert_ids":
                                     float((e8.argmax(1) == s8.argmax(1))[same].mean()),
                                 "top1_vs_fp32_mediapipe": float((e8.argmax(1) == engine.argmax(1)).mean()),
                                 "mediapipe_vs_session": agreement(task, e8, s8)}
    out["tokenizer"] = tokenizer_agreement(Path(classifier) / "spiece.model", work, strings)
    return out


def tokenizer_agreement(spiece: Path, work: Path, n_strings: int = 2400, seq_len: int = 256) -> dict:
    """The ids MediaPipe computes from raw text against albert_edge.tokenizer's on ``n_strings``
    generated hard strings (converters/tokenizer_parity.py), with the spiece.model as it is and
    with ALBERT's normalizer: counts per difference class and a few texts of each."""
    from albert_edge.converters.mediapipe_ids import engine_ids
    from albert_edge.converters.spiece_rules import with_albert_normalizer
    from albert_edge.converters.tokenizer_parity import count_classes, hard_strings

    strings = [text for _, text in hard_strings(n_strings)]
    embedded = work / "albert-normalizer" / "spiece.model"
    embedded.parent.mkdir()
    embedded.write_bytes(with_albert_normalizer(spiece))
    result: dict = {"strings": len(strings), "seq_len": seq_len}
    for name, model in (("as it is", spiece), ("with ALBERT's normalizer", embedded)):
        counts, examples = count_classes(spiece, strings, engine_ids(model, strings, seq_len), seq_len)
        result[name] = {"counts": dict(sorted(counts.items(), key=lambda kv: -kv[1])), "examples": examples}
    return result


def print_tokenizer_table(result: dict) -> None:
    """Counts per difference class, one column per embedded model."""
    names = [k for k in result if isinstance(result[k], dict)]
    kinds = list(dict.fromkeys(k for n in names for k in result[n]["counts"]))
    width = max(len(k) for k in [*kinds, "class"]) + 2
    print(f"{result['strings']} strings, {result['seq_len']} tokens: MediaPipe's ids against albert-edge's")
    print("class".ljust(width) + "".join(n.rjust(26) for n in names))
    for kind in kinds:
        print(kind.ljust(width) + "".join(str(result[n]["counts"].get(kind, 0)).rjust(26) for n in names))


def tokenizer_main(args) -> None:
    """--tokenizer-only: the 400-piece spiece.model tests/mobile use, no checkpoint."""
    from albert_edge.tokenizer import train_spiece

    with tempfile.TemporaryDirectory(prefix="albert-edge-mediapipe-") as tmp:
        work = Path(tmp)
        spiece = args.spiece or train_spiece([ROOT / "tests" / "data" / "corpus.txt"], work / "spiece",
                                             vocab_size=400)
        result = tokenizer_agreement(Path(spiece), work, args.strings)
    if args.json:
        print(json.dumps(result))
    else:
        print_tokenizer_table(result)


def main() -> None:
    parser = harness.parser(__doc__.splitlines()[0])
    parser.add_argument("--classifier", type=Path, help="a labelled classification checkpoint (default: made here)")
    parser.add_argument("--base", type=Path, help="a base-model checkpoint (default: made here)")
    parser.add_argument("--texts", type=int, default=200, help="real sentences to compare on")
    harness.options(parser, seq_len=32, json=True)
    parser.add_argument("--tokenizer-only", action="store_true",
                        help="only the ids MediaPipe computes against albert-edge's, as a table of difference classes")
    parser.add_argument("--strings", type=int, default=2400, help="generated hard strings for the tokenizer figures")
    parser.add_argument("--spiece", type=Path, help="with --tokenizer-only: a spiece.model (default: the tests' "
                                                    "400-piece model, trained here)")
    args = parser.parse_args()
    if args.tokenizer_only:
        tokenizer_main(args)
        return
    with tempfile.TemporaryDirectory(prefix="albert-edge-mediapipe-") as tmp:
        work = Path(tmp)
        classifier, base = args.classifier, args.base
        if classifier is None or base is None:
            made = make_checkpoints(work / "checkpoints")
            classifier, base = classifier or made[0], base or made[1]
        figures = measure(classifier, base, args.texts, args.seq_len, work, args.strings)
    print(json.dumps(figures, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
