"""The main job in one call: checkpoint -> converted files for each device (ONNX, TFLite) ->
quantized files (the schemes that make sense for each format) -> measured profile -> report.

    from albert_edge.pipeline import PipelineOptions, run_pipeline
    result = run_pipeline(PipelineOptions(out_dir=Path("out"), source="run/"))

Each model gets a directory in ``out_dir``: ``checkpoint/`` (built-in default only),
``files/`` (the conversion, with manifest.json, and what an app reads beside the files: the
checkpoint's spiece.model and a classifier's labels.json), ``profile.json`` and ``report/``; with
``static``, ``files-static/`` beside ``files/``: static-shape files for phone GPUs and NPUs (with
their own spiece.model and labels.json, so either folder goes into an app as it is).
``pipeline.json`` records the sha256 of what each step read and wrote; a re-run skips a step
whose outputs are all there, unchanged, and made from the same inputs. With no source the
built-in default (see :mod:`.default`) is used.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..converters.targets import TARGETS, model_files, of_file
from ..errors import AlbertEdgeError
from ..files import atomic_write, check_not_input, missing_root, staged_dir
from ..hub import is_hub_id, repo_name, resolve
from ..quantize.schemes import Scheme
from ..tokenizer import MIN_SEQ_LEN
from .adaptive import ADAPTIVE_DIR, adaptive_model_files, adaptive_targets, convert_adaptive, profile_on_text
from .state import PipelineError, State, digest
from .static import (STATIC_DIR, STATIC_SCHEMES, quantize_static, static_fp32_files, static_model_files, static_of,
                     static_setting)

__all__ = ["PipelineOptions", "PipelineResult", "StepResult", "PipelineError", "run_pipeline", "STEPS",
           "DEFAULT_SCHEMES", "STATIC_SCHEMES", "STATIC_DIR"]

log = logging.getLogger(__name__)

STEPS = ("checkpoint", "convert", "quantize", "profile", "report")
# Schemes worth making for each format on a phone-class CPU: the fast int8 path and half the bytes.
# Static/full-integer int8 and int16x8 are for integer-only hardware (see the README).
_FAST_AND_SMALL = (Scheme.INT8_DYNAMIC, Scheme.FP16)
DEFAULT_SCHEMES = {"onnx": _FAST_AND_SMALL, "ort": (), "tflite": _FAST_AND_SMALL, "executorch": (),
                   "mediapipe": _FAST_AND_SMALL, "onnx-text": (),
                   "transformers-js": ()}  # its folder holds its int8 and fp16 files already
# A target whose files are quantized with another format's schemes (a MediaPipe file is a .tflite).
QUANTIZED_AS = {"mediapipe": "tflite"}
# Formats whose int8 file the conversion makes (the PyTorch model, or for .ort the int8 .onnx it
# converts): target -> its convert --scheme, from the target's entry.
CONVERT_SCHEMES = {t.name: t.schemes[0] for t in TARGETS.values() if t.schemes}
# Targets whose file or folder carries the tokenizer: left out, with the reason, for a checkpoint
# without a spiece.model (the built-in default's random ALBERT-base has none).
TOKENIZER_TARGETS = ("mediapipe", "onnx-text", "transformers-js")
SUFFIXES = tuple(t.suffix for t in TARGETS.values())

Step = Callable[[str, int, int], None]  # (what is starting, steps done, steps in all)


@dataclass(frozen=True)
class PipelineOptions:
    out_dir: Path
    source: str | None = None  # a checkpoint; None: the built-in default
    targets: tuple[str, ...] = ("onnx", "tflite")
    schemes: tuple[str, ...] | None = None  # None: DEFAULT_SCHEMES of each format
    seq_len: int = 128  # conversion (TFLite is built for it)
    profile_seq_lens: tuple[int, ...] = (32, 128)
    threads: int = 2
    runs: int = 20
    min_seconds: float = 0.5
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    force: bool = False
    static: bool = False  # also static-shape files for the GPU and NPUs (STATIC_DIR)

    def __post_init__(self) -> None:
        for name in ("only", "skip"):
            unknown = [s for s in getattr(self, name) if s not in STEPS]
            if unknown:
                raise PipelineError(f"--{name} {', '.join(unknown)}: steps are {', '.join(STEPS)}")
        if self.only and self.skip:
            raise PipelineError("give --only or --skip, not both")
        for scheme in self.schemes or ():
            if not _formats_of(scheme, self.targets):
                raise PipelineError(f"scheme {scheme!r} is not available for {' or '.join(self.targets)}")
        if self.static and not self.static_targets:
            raise PipelineError(f"--static makes static {' and '.join(STATIC_SCHEMES)} files; targets given: "
                                f"{', '.join(self.targets)} (add --to onnx or --to tflite)")
        if self.seq_len < MIN_SEQ_LEN:
            raise PipelineError(f"--seq-len {self.seq_len} is too short: the pipeline verifies and quantizes on "
                                f"texts of --seq-len ids, [CLS] and [SEP] included; give {MIN_SEQ_LEN} or more (up to "
                                "the model's max_position_embeddings)")
        if any(n > self.seq_len for n in self.profile_seq_lens):
            raise PipelineError(f"profile sequence lengths {self.profile_seq_lens} go beyond the conversion's "
                                f"--seq-len {self.seq_len}")

    @property
    def static_targets(self) -> tuple[str, ...]:
        """The targets of which static-shape files are made (none without ``static``)."""
        return tuple(t for t in self.targets if t in STATIC_SCHEMES) if self.static else ()

    def wants(self, step: str) -> bool:
        return step in self.only if self.only else step not in self.skip

    def schemes_for(self, fmt: str) -> tuple[str, ...]:
        if self.schemes is None:
            return DEFAULT_SCHEMES[fmt]
        return tuple(s for s in self.schemes if fmt in _formats_of(s, (fmt,)))


def _formats_of(scheme: str, formats) -> list[str]:
    """The formats among ``formats`` that have ``scheme``."""
    from ..quantize.schemes import schemes_for

    return [f for f in formats if scheme in {s.value for s in schemes_for(QUANTIZED_AS.get(f, f))}
            or CONVERT_SCHEMES.get(f) == scheme]


@dataclass
class StepResult:
    model: str
    step: str
    status: str  # "ran" | "skipped (up to date)" | "left out" | "given"
    seconds: float = 0.0
    detail: str = ""


@dataclass
class PipelineResult:
    out_dir: Path
    description: str
    reports: dict[str, Path] = field(default_factory=dict)  # model -> report.html
    steps: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "description": self.description,
                "reports": {k: str(v) for k, v in self.reports.items()},
                "steps": [asdict(s) for s in self.steps], "seconds": round(self.seconds, 1)}


@dataclass
class _Model:
    name: str
    dir: Path
    checkpoint: Path
    make: Callable[[Path, Callable[[str], None]], dict] | None = None  # builds the checkpoint into a directory
    #   (built-in default only)
    recipe: str = ""  # what decides the made checkpoint (its cache key)
    shape: str | None = None  # the preset whose shape it has: the report compares with the paper
    random_weights: bool = False  # agreement figures mean nothing: measure them on a few batches only
    context: dict[str, Any] = field(default_factory=dict)
    static: bool = True  # static-shape files are made for it when the options ask (not for the random base shape)
    adaptive: bool = False  # a classifier trained with exits: adaptive files too, profiled on its held-out texts

    @property
    def adaptive_files(self) -> Path:
        return self.dir / ADAPTIVE_DIR

    @property
    def files(self) -> Path:
        return self.dir / "files"

    @property
    def static_files(self) -> Path:
        return self.dir / STATIC_DIR

    @property
    def profile(self) -> Path:
        return self.dir / "profile.json"


def run_pipeline(options: PipelineOptions, on_step: Step | None = None) -> PipelineResult:
    """Run the chosen steps for the source (or the built-in default) into ``options.out_dir``."""
    start = time.perf_counter()
    step = on_step or (lambda *_: None)
    if options.source is not None and not Path(options.source).exists() and not is_hub_id(options.source):
        raise PipelineError(f"SOURCE {options.source}: no such checkpoint")
    if options.source is not None and not is_hub_id(options.source):
        check_not_input(options.out_dir, [options.source])  # --force replaces our earlier run, never the source
    made = missing_root(options.out_dir)  # removed again when the run fails before any step ran
    ran: list[StepResult] = []
    try:
        state = State.open(Path(options.out_dir), options.force)
        models, description = _models(options, state.root)
        state.source = {"source": options.source, "description": description}
        result = PipelineResult(state.root, description)
        plan = [(m, s) for m in models for s in STEPS]
        for done, (model, name) in enumerate(plan):
            step(f"{model.name}: {name}", done, len(plan))
            ran.append(_run_step(name, model, options, state,
                                 lambda what: step(f"{model.name}: {what}", done, len(plan))))
            result.steps.append(ran[-1])
            if (model.dir / "report" / "report.html").is_file():
                result.reports[model.name] = model.dir / "report" / "report.html"
    except BaseException:
        if made is not None and not any(s.status == "ran" for s in ran):
            shutil.rmtree(made, ignore_errors=True)
        raise
    step("done", len(plan), len(plan))
    result.seconds = time.perf_counter() - start
    return result


def _models(options: PipelineOptions, root: Path) -> tuple[list[_Model], str]:
    from . import default

    if options.source is None:
        random = _Model(default.RANDOM_NAME, root / default.RANDOM_NAME, root / default.RANDOM_NAME / "checkpoint",
                        recipe="albert-base-v2 seed 0 v1", random_weights=True, shape="albert-base-v2", static=False)
        random.make = lambda out, progress: (default.make_random(out), {"weights": "random-init"})[1]
        random.context["accuracy_in"] = f"../../{default.SMALL_NAME}/report/report.html"
        if options.static:  # the built-in default stays quick: static files of the small model only
            random.context["static_in"] = f"../../{default.SMALL_NAME}/report/report.html"
        small = _Model(default.SMALL_NAME, root / default.SMALL_NAME, root / default.SMALL_NAME / "checkpoint",
                       recipe=json.dumps(asdict(default.PIPELINE_RECIPE), sort_keys=True))
        small.make = lambda out, progress: {"pretraining": default.make_small(out, _training(progress))[1]}
        name = default.CLASSIFIER_NAME
        classifier = _Model(name, root / name, root / name / "checkpoint", static=False, adaptive=True,
                            recipe=json.dumps({"start": small.recipe, **asdict(default.CLASSIFIER_RECIPE)},
                                              sort_keys=True))
        classifier.make = lambda out, progress: {"fine_tuning": default.make_classifier(out, _training(progress))[1]}
        return [random, small, classifier], default.DESCRIPTION
    hub_id = is_hub_id(options.source)
    source = resolve(options.source)
    name = repo_name(options.source) if hub_id else source.resolve().name
    return ([_Model(name, root / name, source, adaptive=_trained_with_exits(source))],
            f"checkpoint {options.source if hub_id else source}")


def _training(progress: Callable[[str], None]) -> Callable[[dict], None]:
    """Pretraining events as progress lines."""
    def on_event(event: dict) -> None:
        if event.get("event") == "start":
            progress("tokenizer trained; pretraining")
        elif event.get("event") == "train" and "mlm_acc" in event:
            progress(f"pretraining step {event['step']}, MLM accuracy {100 * event['mlm_acc']:.1f}%")
        elif event.get("event") == "train":
            progress(f"fine-tuning step {event['step']}, loss {event.get('loss', 0):.3f}")
        elif event.get("event") == "eval":
            progress("evaluating")

    return on_event


def _run_step(name: str, model: _Model, options: PipelineOptions, state: State,
              progress: Callable[[str], None]) -> StepResult:
    if name == "checkpoint" and model.make is None:
        return StepResult(model.name, name, "given", detail=str(model.checkpoint))
    key = f"{model.name}/{name}"
    model.context.update(state.steps.get(key, {}).get("context", {}))  # what an earlier run of it learned
    if not options.wants(name):
        return StepResult(model.name, name, "left out")
    inputs = _INPUTS[name](model, options, state)
    if state.is_done(key, inputs) and _in_manifest(model, state.outputs(key), state.root):
        log.info("%s: up to date, skipped", key)
        return StepResult(model.name, name, "skipped (up to date)")
    t0 = time.perf_counter()
    outputs, detail, context = _RUN[name](model, options, state, progress)
    model.context.update(context)
    state.record(key, inputs, digest(outputs, state.root), context=context)
    return StepResult(model.name, name, "ran", time.perf_counter() - t0, detail)


def _in_manifest(model: _Model, outputs: dict[str, str], root: Path) -> bool:
    """Model files a step wrote must also be in their conversion's manifest with the same sha256."""
    from ..formats import manifest as manifest_io

    for folder in (model.files, model.static_files, model.adaptive_files):
        files = {Path(rel).name: sha for rel, sha in outputs.items()
                 if (root / rel).parent == folder and Path(rel).suffix in SUFFIXES}
        if not files:
            continue
        try:
            listed = {e.name: e.sha256 for e in manifest_io.read(folder).files}
        except AlbertEdgeError:
            return False
        if any(listed.get(name) != sha for name, sha in files.items()):
            return False
    return True


# -- what each step reads ---------------------------------------------------------------------

def _settings(options: PipelineOptions, *names: str) -> dict[str, str]:
    return {f"option:{n}": json.dumps(getattr(options, n)) for n in names}


def _checkpoint_inputs(model: _Model, options, state) -> dict[str, str]:
    return {"recipe": model.recipe}


def _convert_inputs(model: _Model, options, state) -> dict[str, str]:
    if not model.checkpoint.exists():
        return {"checkpoint": "missing"}
    return {**digest([model.checkpoint], model.checkpoint.parent), **_settings(options, "targets", "seq_len"),
            **static_setting(model, options)}


def _fp32_files(model: _Model) -> list[Path]:
    return [model.files / f"model{s}" for s in SUFFIXES if (model.files / f"model{s}").is_file()]


def _model_files(model: _Model) -> list[Path]:
    return model_files(model.files)


def _quantize_inputs(model: _Model, options, state) -> dict[str, str]:
    return {**digest(_fp32_files(model) + static_fp32_files(model, options), state.root),
            **_settings(options, "schemes"), **static_setting(model, options)}


def _profile_inputs(model: _Model, options, state) -> dict[str, str]:
    return {**digest(_model_files(model) + adaptive_model_files(model), state.root),
            **_settings(options, "profile_seq_lens", "threads", "runs", "min_seconds")}


def _reported(model: _Model, options) -> list[Path]:
    """The conversion folders the report reads: files/, and files-static/ and files-adaptive/ where
    this run makes them (each with its manifest)."""
    folders = [model.files, *([model.static_files] if static_of(model, options) else []),
               *([model.adaptive_files] if model.adaptive else [])]
    return [f for f in folders if (f / "manifest.json").is_file()]


def _report_inputs(model: _Model, options, state) -> dict[str, str]:
    extra = [model.profile] if model.profile.is_file() else []
    manifest = [folder / "manifest.json" for folder in _reported(model, options)]
    made = _model_files(model) + static_model_files(model, options) + adaptive_model_files(model)
    return {**digest(made + manifest + extra, state.root),
            **static_setting(model, options)}


_INPUTS = {"checkpoint": _checkpoint_inputs, "convert": _convert_inputs, "quantize": _quantize_inputs,
           "profile": _profile_inputs, "report": _report_inputs}


# -- what each step does ------------------------------------------------------------------------

def _make_checkpoint(model: _Model, options, state, progress) -> tuple[list[Path], str, dict]:
    progress("checkpoint (build or train)")
    with staged_dir(model.checkpoint, keep=False) as staging:  # the old checkpoint stays whole until then
        context = model.make(staging, progress)
    return [model.checkpoint], str(model.checkpoint), context


def _convert(model: _Model, options: PipelineOptions, state, progress) -> tuple[list[Path], str, dict]:
    from ..converters.export import convert

    targets = options.targets
    has_tokenizer = (model.checkpoint / "spiece.model").is_file()
    left_out = [t for t in targets if t in TOKENIZER_TARGETS and not has_tokenizer]
    targets = tuple(t for t in targets if t not in left_out)
    if not targets:
        raise PipelineError(f"{model.checkpoint} has no spiece.model, and every target asked for "
                            f"({', '.join(left_out)}) carries the tokenizer: add another --to, or give a checkpoint "
                            "with its spiece.model")
    # transformers.js has no pretraining model: with that target, a pretraining checkpoint's files
    # are its masked-LM part (the sentence-order head is for training; no app reads it).
    head = "mlm" if "transformers-js" in targets and _pretraining(model.checkpoint) else None
    # Ours, re-made whole because its inputs or outputs changed; the old files stay until then.
    schemes = {CONVERT_SCHEMES[t] for t in targets if t in CONVERT_SCHEMES
               and (options.schemes is None or CONVERT_SCHEMES[t] in options.schemes)}
    result = convert(model.checkpoint, model.files, targets=targets, head=head, seq_len=options.seq_len, force=True,
                     keep=False, on_step=lambda what, done, total: progress(f"convert: {what}"),
                     **({"scheme": schemes.pop()} if schemes else {}))
    made = _made(model.files, result)
    detail = f"{len(result.files)} files"
    if head:
        detail += f" ({head} head: transformers.js has no pretraining model)"
    if left_out:
        detail += (f" (left out: {', '.join(left_out)}; {'it carries' if len(left_out) == 1 else 'they carry'} the "
                   "tokenizer, and the checkpoint has no spiece.model)")
    if adaptive_targets(model, options):
        result, line = convert_adaptive(model, options, progress)
        made, detail = made + _made(model.adaptive_files, result), f"{detail}; {line}"
    static = static_of(model, options)
    if not static:
        return made, detail, {}
    result = convert(model.checkpoint, model.static_files, targets=static, seq_len=options.seq_len, static=True,
                     force=True, keep=False, on_step=lambda what, done, total: progress(f"convert --static: {what}"))
    made_static = _made(model.static_files, result)
    return made + made_static, f"{detail}; {len(result.files)} static in {STATIC_DIR}/", {}


def _pretraining(checkpoint: Path) -> bool:
    """Whether the checkpoint directory was saved as a pretraining model (MLM and sentence order)."""
    try:
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return "AlbertForPreTraining" in (config.get("architectures") or ())


def _trained_with_exits(checkpoint: Path) -> bool:
    """Whether the checkpoint directory is a classifier trained with early exits (finetune --exits)."""
    try:
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool((config.get("albert_edge_exits") or {}).get("rule"))


def _made(folder: Path, result) -> list[Path]:
    """What a conversion made in ``folder``: its model files and the app files beside them (a
    re-run converts again when one of them is missing or changed)."""
    return [folder / f.name for f in result.files] + [folder / a.name for a in result.app_files]


def _quantize(model: _Model, options: PipelineOptions, state, progress) -> tuple[list[Path], str, dict]:
    from ..converters.quantized import quantize_file
    from ..quantize import QuantizeConfig

    parents = _fp32_files(model)
    if not parents:
        raise PipelineError(f"{model.files}: no converted files to quantize; run the convert step first")
    tokenizer = model.checkpoint / "spiece.model"
    made = []
    for parent in parents:
        fmt = of_file(parent).name
        if fmt in CONVERT_SCHEMES:  # made by the conversion, beside its fp32 file
            continue
        for scheme in options.schemes_for(fmt):
            progress(f"quantize {parent.name} {scheme}")
            config = QuantizeConfig(scheme, calibration=("builtin",) if tokenizer.is_file() else (),
                                    tokenizer=tokenizer if tokenizer.is_file() else None,
                                    eval_samples=8 if model.random_weights else 64, num_threads=options.threads)
            result = quantize_file(parent, config, force=True)  # the files directory is the pipeline's own
            made.append(result.out_path)
    static, left_out = quantize_static(model, options, progress)
    detail = f"{len(made)} files" + (f"; {len(static)} static" if static else "") + \
        (f"; left out: {'; '.join(left_out)}" if left_out else "")
    return made + static, detail, {}


def _profile(model: _Model, options: PipelineOptions, state, progress) -> tuple[list[Path], str, dict]:
    from ..profile import ProfileSettings, profile

    files = _model_files(model)
    if not files:
        raise PipelineError(f"{model.files}: no model files to profile; run the convert step first")
    # A MediaPipe file is timed through Session and, as an app runs it, through MediaPipe Tasks.
    settings = ProfileSettings(seq_lens=tuple(options.profile_seq_lens), threads=(options.threads,),
                               runs=options.runs, min_seconds=options.min_seconds, warmup=2,
                               mediapipe="mediapipe" in options.targets)
    records = profile(files, settings, progress=lambda line: progress(f"profile: {line}"))
    on_text = profile_on_text(model, options, progress) if adaptive_model_files(model) else []
    atomic_write(model.profile, json.dumps([r.to_dict() for r in records + on_text], indent=2) + "\n")
    detail = f"{len(records)} records" + (f", {len(on_text)} on held-out text" if on_text else "")
    return [model.profile], detail, {}


def _report(model: _Model, options: PipelineOptions, state, progress) -> tuple[list[Path], str, dict]:
    from ..report import write_report

    folders = _reported(model, options)
    sources = ([] if model.files in folders else [str(model.checkpoint)]) + [str(f) for f in folders]
    context = {"pipeline": state.source.get("description"), "model": model.name, **model.context}
    if model.static_files in folders:
        context["static_dir"] = STATIC_DIR
    if model.profile.is_file():
        sources.append(str(model.profile))
    result = write_report(sources, model.dir / "report", force=True, extra=context, name=model.shape or model.name,
                          title=f"albert-edge pipeline: {model.name}", on_step=lambda what: progress(f"report: {what}"))
    return [p for p in result.files if p.suffix != ".svg"], str(result.html), {}


_RUN = {"checkpoint": _make_checkpoint, "convert": _convert, "quantize": _quantize, "profile": _profile,
        "report": _report}
