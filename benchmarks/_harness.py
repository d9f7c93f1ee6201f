"""What every benchmark here runs on: the options they share, the child mode (one measurement of
one file in a fresh process, its result as JSON), rounds interleaved with their spread, and the
result file that says where its figures come from.

A measurement is a function of a JSON-ready job in a benchmark's module; ``child`` runs it in a
fresh Python (one model per process: two runtimes in one process steal each other's threads, and
the kernel's peak RSS then belongs to that model alone) as

    python benchmarks/_harness.py --child MODULE:FUNCTION JOB

and returns the JSON object it printed. ``interleave`` runs every contestant once per round, so
load from other processes falls on all of them alike; ``spread`` gives the rounds' range beside a
median. A result file names the command, the commit, the date, the machine (CPU, its flags, the
load while it ran) and the versions of the packages that ran; the documentation renders its tables
from these files (benchmarks/render_results.py), and each table names the file, its machine, date
and commit.

    parser = harness.parser(__doc__)
    harness.options(parser, rounds=3, runs=20, json=True, out={"help": "The result file to write."})
    args = parser.parse_args(argv)
    header = harness.start("peers", versions=("onnxruntime", "ai-edge-litert"))
    got = harness.interleave(plan, args.rounds, lambda key: harness.child("memory:child", job(key), str(key)))
    harness.write(args.out, header, {"rows": rows})
"""

from __future__ import annotations

# Every child imports this module before it measures: what it imports at the top is in each
# child's memory figures, so only modules a benchmark's child imports anyway; the rest inside
# the functions that need them.
import argparse
import importlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path

HARNESS = Path(__file__).resolve()


# -- the options the benchmarks share ------------------------------------------------------------

# name -> (flag, argparse keywords, help); a benchmark takes the ones it names in ``options``.
_OPTIONS: dict[str, tuple[str, dict, str]] = {
    "seq_lens": ("--seq-lens", {"nargs": "+", "type": int}, "Sequence lengths timed."),
    "seq_len": ("--seq-len", {"type": int}, "Sequence length."),
    "batch": ("--batch", {"type": int}, "Batch size of the timed calls."),
    "threads": ("--threads", {"type": int}, "Runtime threads."),
    "runs": ("--runs", {"type": int}, "Timed calls per length per child."),
    "warmup": ("--warmup", {"type": int}, "Untimed calls per child before timing."),
    "rounds": ("--rounds", {"type": int}, "Fresh children per (file, route), interleaved."),
    "work": ("--work", {}, "Directory for the files (default: a temporary one)."),
    "json": ("--json", {"action": "store_true"}, "Print the results as JSON."),
    "out": ("--out", {"type": Path}, "Also write the result file the docs render (see benchmarks/render_results.py)."),
}


def parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser, described by the first paragraph of its docstring."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0])


def options(parser: argparse.ArgumentParser, **taken: object) -> None:
    """Add the shared options ``taken`` names (see ``_OPTIONS``), each with its default, or with a
    dict of argparse keywords where the benchmark's differ (``{"default": 5, "help": "..."}``);
    a flag (``json=True``) takes no default."""
    for name, given in taken.items():
        flag, keywords, help_ = _OPTIONS[name]
        extra = given if isinstance(given, dict) else {} if keywords.get("action") else {"default": given}
        parser.add_argument(flag, **{**keywords, "help": help_, **extra})


def model_options(p: argparse.ArgumentParser, checkpoint_help: str) -> None:
    """--checkpoint, or --preset with --set overrides (read by ``model_config``): the model a benchmark builds."""
    p.add_argument("--checkpoint", help=checkpoint_help)
    p.add_argument("--preset", default="albert-base-v2", help="Config preset when no --checkpoint.")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="Override a preset config field (e.g. vocab_size=8000); repeatable.")


def model_config(args: argparse.Namespace):
    """The config of --preset with each --set KEY=VALUE applied (the value read as the field's type)."""
    from albert_edge.config import AlbertConfig

    config = AlbertConfig.preset(args.preset)
    changes = {}
    for item in args.overrides:
        key, _, value = item.partition("=")
        current = getattr(config, key)
        changes[key] = type(current)(value) if current is not None else value
    return config.replace(**changes)


# -- the child mode: one measurement in a fresh process ------------------------------------------

# ``python benchmarks/_harness.py --child ...`` as an import: a script run as __main__ is compiled
# every time, an imported module comes from its cached bytecode, and a compile leaves its memory in
# the child's figures.
_BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); import _harness; sys.exit(_harness.main())"


def child_argv(target: str, job: dict) -> list[str]:
    """The command that runs ``target`` (``module:function``, a benchmark's measurement) on ``job``
    in a fresh Python; the function's return value is the last line it prints, as JSON."""
    return [sys.executable, "-c", _BOOT, str(HARNESS.parent), "--child", target, json.dumps(job)]


def child(target: str, job: dict, what: str, model: Path | None = None, env: dict | None = None) -> dict:
    """``target`` on ``job`` in a fresh process (see ``fresh_process``): the JSON object it returned."""
    return fresh_process(child_argv(target, job)[1:], what, model, env)


def run_child(target: str, job: dict) -> object:
    """The child's side: import ``module``, call ``function(job)``."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)(job)


def evict(path: Path) -> None:
    """Drop ``path`` (a file, or each file of a checkpoint directory) from the page cache, so every
    child reads its model cold, as after a boot. Runtimes map model files, and a mapped file's
    resident pages count in the process's RSS: how many a fault maps depends on how the kernel
    holds the file in its cache (a file written in one large write() is cached in large folios,
    and the same ALBERT-base int8 file then peaked 8 MiB higher), so a warm cache would make the
    figure depend on how and when the file was written."""
    for file in ([path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fdatasync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fresh_process(argv: list[str], what: str, model: Path | None = None, env: dict | None = None) -> dict:
    """Run ``python ARGV`` (a child, see ``child``) in a fresh process, OpenMP threads passive,
    ``model`` read cold (see ``evict``), and return the JSON object it printed last; a failed
    child stops the benchmark with the tail of its stderr. Every benchmark here times this way."""
    import subprocess

    if model is not None:
        evict(model)
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"{what}: child failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed(call: Callable[[], object], runs: int) -> list[float]:
    """Milliseconds of each of ``runs`` calls of ``call``, one after another (in a child, after
    its warm-up)."""
    clock = time.perf_counter_ns
    times = []
    for _ in range(runs):
        start = clock()
        call()
        times.append((clock() - start) / 1e6)
    return times


# -- rounds and their spread ---------------------------------------------------------------------

def interleave(keys: Iterable[Hashable], rounds: int, measure: Callable[[Hashable], dict], *,
               alternate: bool = False, said: Callable[[Hashable], str] | None = None,
               after_round: Callable[[int, dict], str] | None = None) -> dict[Hashable, list[dict]]:
    """``measure(key)`` for every key once per round, ``rounds`` times, so that load from other
    processes falls on every key alike: {key: [its result in each round]}. ``alternate``: every
    other round in reverse order (of two, neither always runs first). Progress on stderr: after
    each measurement ``round R/N: said(key)``, after each round ``after_round(r, results so far)``."""
    keys = list(keys)
    got: dict[Hashable, list[dict]] = {key: [] for key in keys}
    for r in range(rounds):
        for key in keys[::-1] if alternate and r % 2 else keys:
            got[key].append(measure(key))
            if said is not None:
                print(f"round {r + 1}/{rounds}: {said(key)}", file=sys.stderr)
        if after_round is not None:
            print(after_round(r, got), file=sys.stderr)
    return got


def median(values: Iterable[float], digits: int) -> float:
    """The median of ``values``, rounded."""
    return round(statistics.median(values), digits)


def spread(values: Iterable[float], digits: int) -> list[float]:
    """[lowest, highest] of ``values`` (one per round), rounded: the range beside a median."""
    values = list(values)
    return [round(min(values), digits), round(max(values), digits)]


# -- the models and inputs the benchmarks measure ------------------------------------------------

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def random_model(config, head: str, seed: int = 0):
    """``head`` on ``config``, seeded, with every parameter moved off its initial value (no zero
    biases or unit LayerNorms that a converter could fold away and flatter the figures)."""
    import torch

    from albert_edge.model import build_model

    torch.manual_seed(seed)
    model = build_model(config, head)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model.eval()


def reference_row(vocab_size: int, pad_id: int, T: int, seed: int = 1) -> dict:
    """One row of random ids, its last quarter padding, its second half segment 1 (int32 arrays)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab_size, size=(1, T)).astype(np.int32)
    mask = np.ones((1, T), np.int32)
    ids[0, T - T // 4:], mask[0, T - T // 4:] = pad_id, 0
    types = np.zeros((1, T), np.int32)
    types[0, T // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def cosine(a, b) -> float:
    """The cosine of two arrays, flattened, in float64."""
    import numpy as np

    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- the result file -----------------------------------------------------------------------------

RESULTS = Path(__file__).parent / "results"
# The CPU flags that decide which kernels the runtimes take (MLAS, XNNPACK, oneDNN).
_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
          "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "i8mm", "sve")


def commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _dirty() -> bool | None:
    """Whether tracked files differ from the commit (the figures then come from a changed tree)."""
    import subprocess

    try:
        done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent)
        return bool(done.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return None


def _cpu() -> dict:
    """The CPU's model name, core count and the kernel-deciding flags it has."""
    import platform

    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in (platform.processor(), platform.machine()):
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in _FLAGS if f in flags]}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def platform_info() -> dict:
    """The platform string and the Python version: the machine as every result file names it."""
    import platform

    return {"platform": platform.platform(), "python": platform.python_version()}


def package_versions(names: Iterable[str]) -> dict[str, str | None]:
    """{distribution: its version, None where it is not installed}, in the order given."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def start(benchmark: str, versions: tuple[str, ...] = ()) -> dict:
    """The header of a result, taken when the benchmark starts: what ran, where, when."""
    import datetime

    argv = [Path(sys.argv[0]).name if i == 0 else a for i, a in enumerate(sys.argv)]
    return {"benchmark": benchmark, "command": "python benchmarks/" + " ".join(argv),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit(), "tree_changed": _dirty(),
            "machine": {**platform_info(), "cpu": _cpu(), "load_at_start": _load()},
            "versions": package_versions(("albert-edge", "numpy", *versions))}


def write(path: Path, header: dict, body: dict) -> Path:
    """The result file: ``header`` (from :func:`start`), the load when it ended, and ``body``."""
    return write_json(path, {**header, "machine": {**header["machine"], "load_at_end": _load()}, **body})


def write_json(path: Path, result: dict, ensure_ascii: bool = True) -> Path:
    """``result`` written to ``path`` whole or not at all (a temporary name, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, ensure_ascii=ensure_ascii) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The child mode of the benchmarks here: one measurement in this process.")
    p.add_argument("--child", nargs=2, required=True, metavar=("MODULE:FUNCTION", "JOB"),
                   help="Call FUNCTION of the benchmark module MODULE with the job (JSON); print its result as JSON.")
    args = p.parse_args(argv)
    print(json.dumps(run_child(args.child[0], json.loads(args.child[1]))))
    return 0


if __name__ == "__main__":
    sys.modules.setdefault("_harness", sys.modules[__name__])  # the benchmark's import finds this copy
    sys.exit(main())
