"""Adaptive-depth files against the same model at full depth, in the runtimes apps use.

A classifier for the builtin topic task (albert_edge.train.labelled) is fine-tuned, its early exits
are trained with ``--exits frozen`` (the backbone and the final classifier untouched), and it is
converted twice: at full depth (``convert --to tflite --to onnx``) and adaptive (``--adaptive``),
one .tflite and one .onnx per rule kind, each run at every setting the way an app sets it (the
.tflite's ``set_exit_setting`` signature, the .onnx's ``exit_setting`` input). Each file then runs
in a fresh child process (one model each) in the runtime an app opens it with, default options: TFLite's ``Interpreter``
from ai_edge_litert and onnxruntime's ``InferenceSession``. Every child runs the held-out texts at
their own lengths (each tokenized, the TFLite input resized per text, no padding), one untimed pass
then timed passes, and reports the mean time per text, its answers and its pass counts. Rounds
interleave every file, so load from other processes falls on all of them alike.

Per setting and runtime the result names ``speedup`` (full-depth time / adaptive time, median of
the rounds' ratios with their range), ``agreement`` (top-1 with the full-depth file, Wilson 95 %
interval), accuracy against the labels with its interval and its change from full depth, the mean
passes, the file's size against the full-depth file's plus the exit heads' bytes, and the peak
resident memory against the full-depth child's.

    python benchmarks/adaptive.py --model small --out benchmarks/results/adaptive-small.json
    python benchmarks/adaptive.py --model albert-base --train-minutes 12 --texts 100 \\
        --out benchmarks/results/adaptive-albert-base.json

Models: ``small`` is the demo's classifier (its cached small pretrained ALBERT, fine-tuned as the
demo bundle does); ``albert-base`` is the ALBERT-base shape (H=768, 12 passes of one layer) with the
demo tokenizer's vocabulary, trained from its initial weights on the task for --train-minutes;
``tiny`` (the tests') is the tiny preset on --tokenizer. Trained checkpoints are kept in --work, so
a second run measures without training again.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _harness as harness  # noqa: E402  (options, the child mode, rounds: the way every benchmark here times)

MODELS = ("small", "albert-base", "tiny")
# What each model's fine-tuning takes: epochs and learning rate (the small model's are the demo's).
# The exits': one epoch at a rate larger than finetune's default (only linear heads train).
_RECIPES = {"small": {"epochs": 4, "lr": 2e-4, "batch_size": 32, "exit_epochs": 1, "exit_lr": 1e-3},
            "albert-base": {"epochs": 1, "lr": 2e-4, "batch_size": 16, "exit_epochs": 1, "exit_lr": 1e-3},
            "tiny": {"epochs": 1, "lr": 1e-3, "batch_size": 16, "exit_epochs": 1, "exit_lr": 1e-3}}
MAX_SEQ_LEN = 128


# -- the models: fine-tuned, then frozen exits, cached in --work ---------------------------------

def _demo_pretrained(threads: int | None) -> Path:
    """The demo's small pretrained ALBERT (from the cache the demo bundle and pipeline share)."""
    from albert_edge.pipeline.bundle import BundleOptions, recipe
    from albert_edge.pipeline.small import pretrained

    made, _ = pretrained(recipe(BundleOptions(out_dir="-", preset="demo")), "demo-demo", threads=threads)
    return made


def _initial(model: str, spiece: Path, out: Path) -> Path:
    """A checkpoint of ``model``'s shape at its initial weights (seeded), with ``spiece``."""
    import sentencepiece
    import torch

    from albert_edge.config import AlbertConfig
    from albert_edge.model import build_model
    from albert_edge.train.state import export_model

    vocab = sentencepiece.SentencePieceProcessor(model_file=str(spiece)).get_piece_size()
    config = AlbertConfig.preset("albert-base-v2" if model == "albert-base" else "tiny").replace(
        vocab_size=vocab, max_position_embeddings=max(MAX_SEQ_LEN, 128))
    torch.manual_seed(0)
    return export_model(build_model(config, "base"), out, spiece)


def _subset(path: Path, count: int | None, out: Path) -> Path:
    """The first ``count`` rows of a JSONL file, shuffled the same way every time (all when None)."""
    import random

    rows = path.read_text(encoding="utf-8").splitlines()
    random.Random(0).shuffle(rows)
    out.write_text("\n".join(rows[:count] if count else rows) + "\n", encoding="utf-8")
    return out


def _examples_per_minute(start: Path, batch_size: int, threads: int | None) -> float:
    """How many training examples a minute of fine-tuning takes on this machine: a few optimizer
    steps of the model on texts of the task's typical length, timed."""
    import torch

    import torch.nn.functional as F

    from albert_edge.checkpoints import load
    from albert_edge.model import build_model

    if threads:
        torch.set_num_threads(threads)
    model = build_model(load(start).config.replace(num_labels=4), "classification").train()
    ids = torch.randint(5, model.config.vocab_size, (batch_size, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    seconds = []
    for _ in range(3):
        began = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids))
        F.cross_entropy(logits, torch.zeros(batch_size, dtype=torch.long)).backward()
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - began)
    return 60 * batch_size / min(seconds[1:])


def _finetune(args: argparse.Namespace, start: Path, train: Path, out: Path, exits: bool) -> dict:
    """Fine-tune (``exits``: train frozen exits) into ``out``; its record, kept beside it so a
    re-run reuses both."""
    from albert_edge.train.finetune import FinetuneOptions, finetune

    kept = out.with_name(out.name + ".json")
    if (out / "config.json").is_file():
        return json.loads(kept.read_text()) if kept.is_file() else _record_from_log(out)
    r = _RECIPES[args.model]
    epochs = r["exit_epochs"] if exits else args.epochs or r["epochs"]
    lr = r["exit_lr" if exits else "lr"]
    began = time.perf_counter()
    fine = finetune(FinetuneOptions(
        task="classification", train_file=str(train), eval_file=str(args.work / "topics" / "eval.jsonl"),
        model=str(start), out_dir=str(out), tokenizer=str(args.spiece), epochs=epochs, lr=lr,
        batch_size=r["batch_size"], max_seq_length=MAX_SEQ_LEN, seed=0, device="cpu", threads=args.threads,
        exits="frozen" if exits else None, force=True))
    metrics = {k: round(v, 4) if isinstance(v, float) else v for k, v in fine.metrics.items()}
    record = {"seconds": round(time.perf_counter() - began, 1), "steps": fine.steps, "epochs": epochs, "lr": lr,
              "batch_size": r["batch_size"], "metrics": metrics}
    harness.write_json(kept, record)
    return record


def _record_from_log(out: Path) -> dict:
    """The record of a finished fine-tuning whose own record was not kept (its run was stopped
    after it): its steps and last evaluation from the run's log; its time is not known."""
    events = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line.strip()]
    start = next(e for e in events if e["event"] == "start")
    last = [e for e in events if e["event"] == "eval"][-1]
    metrics = {k: round(v, 4) if isinstance(v, float) else v for k, v in last.items() if k not in ("event", "step")}
    return {"seconds": None, "steps": start["steps"], "metrics": metrics, "from_log": True}


def trained(args: argparse.Namespace) -> tuple[Path, dict]:
    """The checkpoint with exits (``work/exits``) and how it was trained, made once per --work."""
    from albert_edge.train.labelled import write_topic_dataset

    record_path = args.work / "training.json"
    if record_path.is_file() and (args.work / "exits" / "config.json").is_file():
        return args.work / "exits", json.loads(record_path.read_text())
    train, _ = write_topic_dataset(args.work / "topics")
    if args.model == "small":
        start, train_rows, budget = _demo_pretrained(args.threads), train, None
    else:
        start = _initial(args.model, args.spiece, args.work / "initial")
        budget = args.train_examples
        if budget is None:
            per_minute = _examples_per_minute(start, _RECIPES[args.model]["batch_size"], args.threads)
            budget = max(_RECIPES[args.model]["batch_size"], int(per_minute * args.train_minutes))
        train_rows = _subset(train, budget, args.work / "train-subset.jsonl")
    record = {"start": "the demo's small pretrained ALBERT" if args.model == "small" else "initial weights (seeded)",
              "train_examples": sum(1 for _ in train_rows.open()), "train_minutes_budget": args.train_minutes
              if args.model == "albert-base" and args.train_examples is None else None}
    record["fine_tuning"] = _finetune(args, start, train_rows, args.work / "fine-tuned", exits=False)
    record["exits"] = _finetune(args, args.work / "fine-tuned", train_rows, args.work / "exits", exits=True)
    harness.write_json(record_path, record)
    return args.work / "exits", record



# -- the files: full depth, and adaptive per setting -----------------------------------------------

def _rules(args: argparse.Namespace, default: dict | None = None) -> list[tuple[str, float]]:
    """The curve's (kind, setting)s, with the checkpoint's recorded rule where the curve lacks it."""
    rules = [("confidence", float(c)) for c in args.confidence] + [("patience", float(p)) for p in args.patience]
    chosen = [(default["kind"], float(default["setting"]))] if default else []
    return rules + [r for r in chosen if r not in rules]


def _convert_all(checkpoint: Path, wanted: dict[Path, tuple], jobs: int) -> None:
    """``convert`` into each folder of ``wanted`` ({out: (targets, rule or None)}) not made by an
    earlier run, ``jobs`` conversions at a time (each in a process of its own; none is timed)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from albert_edge.converters.export import convert

    todo = {out: spec for out, spec in wanted.items() if not (out / "manifest.json").is_file()}
    with ProcessPoolExecutor(max(1, jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
        running = [pool.submit(convert, checkpoint, out, targets=targets, seq_len=MAX_SEQ_LEN,
                               adaptive=rule or False, force=True, keep=False)
                   for out, (targets, rule) in todo.items()]
        for future in running:
            future.result()


def files(args: argparse.Namespace, checkpoint: Path, default: dict) -> dict[str, dict]:
    """{name: {"file", "runtime", "kind", "setting"}}: the full-depth files, and one adaptive .tflite
    and .onnx per rule kind, each run at every setting as an app sets it (the .tflite's
    ``set_exit_setting`` signature, the .onnx's ``exit_setting`` input)."""
    from albert_edge.exits import ExitRule

    root = args.work / "files"
    wanted = {root / "full": (("tflite", "onnx"), None)}
    made = {f"{runtime} full": {"file": str(root / "full" / f"model.{runtime}"), "runtime": runtime, "kind": None,
                                "setting": None} for runtime in ("tflite", "onnx")}
    for kind, setting in _rules(args, default):
        rule = ExitRule(kind, setting, 1)
        paths = {"tflite": root / f"tflite-{kind}", "onnx": root / f"onnx-{kind}"}
        for runtime, folder in paths.items():
            wanted.setdefault(folder, ((runtime,), rule))
            made[f"{runtime} {kind} {setting:g}"] = {"file": str(folder / f"model.{runtime}"), "runtime": runtime,
                                                     "kind": kind, "setting": setting}
    _convert_all(checkpoint, wanted, args.jobs)
    return made


def held_out(args: argparse.Namespace, labels: list[str]) -> dict:
    """The first --texts held-out texts, tokenized at their own lengths (at most MAX_SEQ_LEN), and
    their labels' indices."""
    from albert_edge.tokenizer import AlbertTokenizer

    rows = [json.loads(line) for line in (args.work / "topics" / "eval.jsonl").read_text().splitlines()]
    rows = rows[:args.texts]
    tokenizer = AlbertTokenizer(str(args.spiece))
    ids = []
    for row in rows:
        encoded = tokenizer.encode(row["text"])
        ids.append(encoded if len(encoded) <= MAX_SEQ_LEN else encoded[:MAX_SEQ_LEN - 1] + [tokenizer.sep_id])
    lengths = sorted(len(i) for i in ids)
    return {"ids": ids, "labels": [labels.index(r["label"]) for r in rows],
            "tokens": {"mean": round(sum(lengths) / len(lengths), 1), "min": lengths[0],
                       "median": lengths[len(lengths) // 2], "max": lengths[-1]}}


# -- the child: one file in its runtime, default options, every text at its own length -------------

def _tflite_call(path: str, setting: float | None):
    from ai_edge_litert.interpreter import Interpreter

    from albert_edge.exits import SETTING
    from albert_edge.formats.tflite_reader import SETTING_SIGNATURE

    # default options and threads; the signature runner resizes the inputs to each text's length
    interpreter = Interpreter(model_path=path)
    if setting is not None:  # as an app sets it: the interpreter keeps it for every later run
        if SETTING_SIGNATURE not in interpreter.get_signature_list():
            raise SystemExit(f"{path}: no {SETTING_SIGNATURE} signature to set the setting {setting:g} with")
        interpreter.get_signature_runner(SETTING_SIGNATURE)(**{SETTING: np.float32(setting)})
    runner = interpreter.get_signature_runner("serving_default")

    def call(ids: list[int]) -> tuple[list[float], int]:
        n = len(ids)
        got = runner(input_ids=np.asarray([ids], np.int32), attention_mask=np.ones((1, n), np.int32),
                     token_type_ids=np.zeros((1, n), np.int32))
        return got["logits"][0], int(got["passes"][0]) if "passes" in got else 0
    return call


def _onnx_call(path: str, setting: float | None):
    import onnxruntime

    session = onnxruntime.InferenceSession(path)  # default SessionOptions, the CPU provider
    names = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    dtypes = {i.name: np.int64 if "int64" in i.type else np.int32 for i in session.get_inputs()}
    # an optional input with a default is an initializer that a feed overrides: not in get_inputs()
    optional = {i.name for i in session.get_overridable_initializers()}
    if setting is not None and "exit_setting" not in optional | set(names):
        raise SystemExit(f"{path}: no exit_setting input to feed the setting {setting:g} to")
    extra = {"exit_setting": np.array(setting, np.float32)} if setting is not None else {}

    def call(ids: list[int]) -> tuple[list[float], int]:
        n = len(ids)
        values = {"input_ids": ids, "attention_mask": [1] * n, "token_type_ids": [0] * n}
        feeds = {name: np.asarray([values[name]], dtypes[name]) for name in harness.INPUTS if name in names}
        got = dict(zip(outputs, session.run(None, {**feeds, **extra})))
        return got["logits"][0], int(got["passes"].reshape(-1)[0]) if "passes" in got else 0
    return call


def child(job: dict) -> dict:
    """Runs in the fresh process: one untimed pass over the texts (every shape seen once; its
    answers and pass counts kept), then ``passes`` timed passes; the mean ms per text."""
    texts = json.loads(Path(job["texts"]).read_text())["ids"]
    call = (_tflite_call if job["runtime"] == "tflite" else _onnx_call)(job["file"], job["setting"])
    first = [call(ids) for ids in texts]
    clock = time.perf_counter_ns
    per_pass = []
    for _ in range(job["passes"]):
        start = clock()
        for ids in texts:
            call(ids)
        per_pass.append((clock() - start) / 1e6 / len(texts))
    return {"ms_per_text": min(per_pass), "answers": [int(np.argmax(logits)) for logits, _ in first],
            "passes": [p for _, p in first], "peak_rss_kib": _peak_rss_kib()}


def _peak_rss_kib() -> int:
    """This process's peak resident memory (VmHWM: from its exec, unlike ru_maxrss, which a child
    inherits from the process that forked it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0



# -- the rounds, and what they say ---------------------------------------------------------------

def measure(args: argparse.Namespace, contestants: dict[str, dict], texts: Path) -> dict[str, list[dict]]:
    """Every contestant in a fresh child per round, rounds interleaved: {name: [each round's result]}."""
    def one(name: str) -> dict:
        c = contestants[name]
        job = {**c, "texts": str(texts), "passes": args.passes}
        return harness.child("adaptive:child", job, name, Path(c["file"]))

    def said(name: str) -> str:
        return name

    return harness.interleave(list(contestants), args.rounds, one, said=said)


def _rate(hits: int, n: int) -> dict:
    """A rate over ``n`` with its Wilson 95 % interval."""
    from albert_edge.report.tables import accuracy_interval

    low, high = accuracy_interval({"count": n, "headline": hits / n, "headline_of": "agreement"})
    return {"rate": round(hits / n, 4), "interval": [round(low, 4), round(high, 4)], "count": n}


def _peak(runs: list[dict]) -> int:
    return int(min(r["peak_rss_kib"] for r in runs))


def row(name: str, contestants: dict, got: dict, labels: list[int], sizes: dict) -> dict:
    """One adaptive contestant against its runtime's full-depth file."""
    c = contestants[name]
    full = got[f"{c['runtime']} full"]
    mine = got[name]
    ratios = [f["ms_per_text"] / m["ms_per_text"] for f, m in zip(full, mine)]
    answers, reference = mine[0]["answers"], full[0]["answers"]
    n = len(labels)
    accuracy = _rate(sum(a == y for a, y in zip(answers, labels)), n)
    full_accuracy = sum(a == y for a, y in zip(reference, labels)) / n
    return {"runtime": c["runtime"], "kind": c["kind"], "setting": c["setting"],
            "mean_passes": round(sum(mine[0]["passes"]) / n, 3),
            "ms_per_text": harness.median((r["ms_per_text"] for r in mine), 3),
            "ms_per_text_spread": harness.spread((r["ms_per_text"] for r in mine), 3),
            "speedup": harness.median(ratios, 3), "speedup_spread": harness.spread(ratios, 3),
            "agreement": _rate(sum(a == b for a, b in zip(answers, reference)), n),
            "accuracy": accuracy, "accuracy_delta_points": round(100 * (accuracy["rate"] - full_accuracy), 2),
            "file_bytes": Path(c["file"]).stat().st_size, **sizes,
            "peak_rss_ratio": round(_peak(mine) / _peak(full), 3)}


def _full_rows(contestants: dict, got: dict, labels: list[int]) -> dict:
    out = {}
    for runtime in ("tflite", "onnx"):
        runs, n = got[f"{runtime} full"], len(labels)
        out[runtime] = {"file_bytes": Path(contestants[f"{runtime} full"]["file"]).stat().st_size,
                        "ms_per_text": harness.median((r["ms_per_text"] for r in runs), 3),
                        "ms_per_text_spread": harness.spread((r["ms_per_text"] for r in runs), 3),
                        "passes": sorted(set(runs[0]["passes"])),
                        "accuracy": _rate(sum(a == y for a, y in zip(runs[0]["answers"], labels)), n),
                        "peak_rss_kib": _peak(runs)}
    return out


def exit_head_bytes(checkpoint: Path) -> int:
    """The bytes of the exits' weights (float32): what an adaptive file may add to the full one."""
    from albert_edge.checkpoints import load_model

    _, model = load_model(checkpoint, "classification")
    return 4 * sum(p.numel() for name, p in model.named_parameters() if name.startswith("exit_classifiers"))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = harness.parser(__doc__)
    p.add_argument("--model", choices=MODELS, default="small", help="The classifier measured (see above).")
    p.add_argument("--tokenizer", type=Path, help="spiece.model of the tiny model (the others use the demo's).")
    p.add_argument("--train-minutes", type=float, default=8.0,
                   help="albert-base: minutes of fine-tuning (the training set is cut to what fits).")
    p.add_argument("--train-examples", type=int, help="Fine-tune on this many training texts (default: all; "
                   "albert-base: what --train-minutes allows).")
    p.add_argument("--epochs", type=int, help="Fine-tuning epochs (default: the model's recipe; the small "
                   "model's is the demo's 4).")
    p.add_argument("--jobs", type=int, default=2, help="Conversions run at a time (before any timing).")
    p.add_argument("--texts", type=int, default=200, help="Held-out texts timed (the first of the eval file).")
    p.add_argument("--passes", type=int, default=2, help="Timed passes over the texts per child (after one untimed).")
    p.add_argument("--confidence", type=float, nargs="*", default=[0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99],
                   help="Confidence settings on the curve.")
    p.add_argument("--patience", type=int, nargs="*", default=[1, 2, 3], help="Patience settings on the curve.")
    harness.options(p, rounds=3, threads={"default": None, "help": "torch threads for training (timing uses "
                                          "each runtime's default)."}, work={"type": Path, "required": True,
                                          "help": "Directory for the checkpoints and files (kept for re-runs)."},
                    out={"type": Path, "required": True, "help": "The result file to write."})
    args = p.parse_args(argv)
    if args.model == "tiny" and args.tokenizer is None:
        p.error("--model tiny needs --tokenizer SPIECE_MODEL")
    return args



def _default_rule(checkpoint: Path) -> dict:
    """The rule fine-tuning chose on the held-out file and recorded in the checkpoint."""
    from albert_edge.checkpoints import load

    return json.loads(load(checkpoint).config.exits)["rule"]


def targets(rows: list[dict], default: dict) -> dict:
    """The issue's targets, each with what was measured against it."""
    def at(kind, setting):
        return {r["runtime"]: r for r in rows if r["kind"] == kind and r["setting"] == setting}

    chosen = at(default["kind"], float(default["setting"]))
    faster = [(kind, setting) for kind, setting in {(r["kind"], r["setting"]) for r in rows}
              if all(r["speedup"] >= 2.5 and r["accuracy_delta_points"] >= -2 for r in at(kind, setting).values())]
    return {
        "default_agreement_at_least_0.99": {rt: r["agreement"]["rate"] >= 0.99 for rt, r in chosen.items()},
        "default_latency_at_most_0.6x": {rt: round(1 / r["speedup"], 3) <= 0.6 for rt, r in chosen.items()},
        "faster_setting_2.5x_within_2_points": [f"{kind} {setting:g}" for kind, setting in sorted(faster)],
        "size_at_most_full_plus_exit_heads": all(r["file_bytes"] <= r["full_bytes"] + r["exit_heads_bytes"]
                                                 for r in rows),
        "peak_memory_at_most_1.05x": max(r["peak_rss_ratio"] for r in rows),
    }


def run(args: argparse.Namespace) -> dict:
    """Train (or reuse), convert (or reuse), time: the result's body."""
    from albert_edge.checkpoints import load

    args.work.mkdir(parents=True, exist_ok=True)
    args.spiece = args.tokenizer or _demo_pretrained(args.threads) / "spiece.model"
    checkpoint, training = trained(args)
    default = _default_rule(checkpoint)
    contestants = files(args, checkpoint, default)
    texts = held_out(args, list(load(checkpoint).config.label_names))
    harness.write_json(args.work / "texts.json", texts)
    got = measure(args, contestants, args.work / "texts.json")
    full = _full_rows(contestants, got, texts["labels"])
    heads = exit_head_bytes(checkpoint)
    rows = [row(name, contestants, got, texts["labels"],
                {"full_bytes": full[contestants[name]["runtime"]]["file_bytes"], "exit_heads_bytes": heads})
            for name in contestants if contestants[name]["kind"]]
    config = json.loads((checkpoint / "config.json").read_text())
    shape = {k: config[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                    "embedding_size", "vocab_size")}
    return {"model": args.model, "shape": shape, "training": training, "default_rule": default,
            "texts": {"source": "the builtin topic task's eval.jsonl (albert_edge.train.labelled)",
                      "count": len(texts["ids"]), "tokens": texts["tokens"]},
            "rounds": args.rounds, "timed_passes_per_child": args.passes, "exit_heads_bytes": heads,
            "full_depth": full, "rows": rows, "targets": targets(rows, default)}


def _print(body: dict) -> None:
    print(f"{'setting':<16} {'passes':>6} {'TFLite x':>9} {'ORT x':>7} {'agree TFLite':>13} {'agree ORT':>10} "
          f"{'acc delta':>10}")
    for kind, setting in dict.fromkeys((r["kind"], r["setting"]) for r in body["rows"]):
        by = {r["runtime"]: r for r in body["rows"] if (r["kind"], r["setting"]) == (kind, setting)}
        t, o = by["tflite"], by["onnx"]
        print(f"{kind + ' ' + format(setting, 'g'):<16} {t['mean_passes']:>6.2f} {t['speedup']:>9.2f} "
              f"{o['speedup']:>7.2f} {t['agreement']['rate']:>13.3f} {o['agreement']['rate']:>10.3f} "
              f"{t['accuracy_delta_points']:>+10.1f}")
    print(json.dumps(body["targets"]))


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    header = harness.start("adaptive", versions=("torch", "onnxruntime", "ai-edge-litert"))
    body = run(args)
    _print(body)
    harness.write(args.out, header, body)
    return 0


def _train_only(argv: list[str]) -> None:
    args = _parse(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    args.spiece = args.tokenizer or _demo_pretrained(args.threads) / "spiece.model"
    print(json.dumps(trained(args)[1], indent=2))



if __name__ == "__main__":
    sys.exit(_train_only(sys.argv[2:]) if sys.argv[1:2] == ["--train-only"] else main())
