"""What a profile run measures (:class:`ProfileSettings`), its errors, and the command line that
asks another machine for the same measurement (:func:`forward_args`). Device side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import AlbertEdgeError
from ..runtime import ACCELERATORS, DELEGATES, GPU_PRECISIONS, PROVIDERS

__all__ = ["MLPERF", "ProfileError", "ProfileSettings", "forward_args", "NATIVE", "WEB_RUNTIMES", "RUNTIME_CHOICES",
           "parse_runtimes"]

# MLPerf inference single-stream minimums: 1024 queries and 60 seconds.
MLPERF = {"runs": 1024, "min_seconds": 60.0}


# The runtimes that time a file (profile --runtime): albert-edge's Session, and the JavaScript ones of
# profile.web; "web" asks for all three.
NATIVE = "native"
WEB_RUNTIMES = ("node", "chromium", "chromium-webgpu")
RUNTIME_CHOICES = {NATIVE: (NATIVE,), "node": ("node",), "chromium": ("chromium",),
                   "chromium-webgpu": ("chromium-webgpu",), "web": (NATIVE, "node", "chromium")}


class ProfileError(AlbertEdgeError):
    """Bad profiling input: a setting out of range, a sequence longer than the model takes, ..."""


def parse_runtimes(names) -> tuple[str, ...]:
    """The runtimes ``names`` ask for, in a fixed order: 'native', 'node', 'chromium', or 'web' (native,
    node and chromium). An unknown name raises ProfileError."""
    unknown = [n for n in names if n not in RUNTIME_CHOICES]
    if not names or unknown:
        raise ProfileError(f"runtime must be one of {', '.join(RUNTIME_CHOICES)}, got {', '.join(unknown) or '(none)'}")
    chosen = {r for n in names for r in RUNTIME_CHOICES[n]}
    return tuple(r for r in (NATIVE, *WEB_RUNTIMES) if r in chosen)


@dataclass(frozen=True)
class ProfileSettings:
    """What to measure. Each file is run once per (provider or delegate) x threads x batch x
    seq_len, and once more per (provider or delegate) x threads on real text when ``text`` is given.

    Timed calls (after ``warmup`` untimed ones) go on until at least ``runs`` calls AND at least
    ``min_seconds`` have passed, then until the p50's 95 % interval is narrower than
    ``ci_target`` of the p50 or ``max_seconds`` of timed calls have passed. With ``wait_quiet``
    seconds, each setting first waits (that long at most) for other work on the machine to stop. ``text`` is "builtin" (the builtin English corpus) or a UTF-8 text
    file; a file that takes token ids needs ``tokenizer`` (a spiece.model or a directory holding one),
    one that takes the text (``convert --to onnx-text``) is fed the sentences as they are. With
    ``mediapipe``, a file with MediaPipe metadata (``convert --to mediapipe``) is also run through
    MediaPipe Tasks' TextClassifier / TextEmbedder, the text in, once per shape (batch 1). With
    ``as_app``, every setting is also measured with the file opened as an app opens it: the
    runtime's own API with its default options (``Session(app_defaults=True)``). With ``accelerator``
    "gpu", every setting runs through ``Session(..., accelerator="gpu", gpu_precision=...)``: a static
    .tflite on LiteRT's GPU accelerator, an .onnx on onnxruntime's CUDA provider; the records carry
    the placement the accelerator reported. ``runtimes`` beyond "native" also time each .onnx / .ort
    file through onnxruntime-node in Node and onnxruntime-web in headless Chromium
    (:mod:`albert_edge.profile.web`), per threads x batch x seq_len, on the fixed-length sweep only.
    """

    seq_lens: tuple[int, ...] = (16, 32, 64, 128)
    batches: tuple[int, ...] = (1,)
    threads: tuple[int, ...] = (1, 2)
    delegates: tuple[str, ...] = ("xnnpack",)  # TFLite files
    providers: tuple[str, ...] = ("cpu",)  # ONNX files: short names (PROVIDERS) or full ones
    runs: int = 50
    min_seconds: float = 1.0
    warmup: int = 5
    text: str | None = None
    tokenizer: Path | None = None
    max_sentences: int = 200  # real-text mode: sentences fed (each at its own length)
    ops: bool = False
    ops_runs: int = 20  # --ops: profiled calls, after one that allocates
    fixed: bool = True  # the fixed-length sweep; False profiles real text only
    ci_target: float = 0.02
    max_seconds: float = 5.0
    wait_quiet: float = 0.0
    mediapipe: bool = False  # files with MediaPipe metadata also through MediaPipe Tasks, the text in
    as_app: bool = False  # every setting also as an app opens the file: the runtime's defaults
    accelerator: str = "cpu"  # "gpu": LiteRT's GPU accelerator (.tflite, static files) or CUDA (.onnx)
    gpu_precision: str = "fp32"  # with accelerator "gpu": the GPU's arithmetic, "fp32" or "fp16"
    # "native" (Session), "node" (onnxruntime-node), "chromium" (onnxruntime-web's WebAssembly),
    # "chromium-webgpu" (onnxruntime-web's WebGPU provider): see profile.web
    runtimes: tuple[str, ...] = ("native",)
    # An adaptive file's (convert --adaptive) exit-rule setting instead of its own (Session.set_exit_setting).
    exit_setting: float | None = None
    web_dir: Path | None = None  # the folder with web/'s scripts and node_modules (None: profile.web.web_dir())

    def __post_init__(self) -> None:
        for name in ("seq_lens", "batches", "threads"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
                raise ProfileError(f"{name} must be positive whole numbers, got {', '.join(map(str, values)) or '(none)'}")
        unknown = [d for d in self.delegates if d not in DELEGATES]
        if not self.delegates or unknown:
            raise ProfileError(f"delegate must be one of {', '.join(DELEGATES)}, got {', '.join(unknown) or '(none)'}")
        full = set(PROVIDERS.values())
        unknown = [p for p in self.providers if p.lower() not in PROVIDERS and p not in full]
        if not self.providers or unknown:
            raise ProfileError(f"provider must be one of {', '.join(PROVIDERS)}, got {', '.join(unknown) or '(none)'}")
        if self.runs < 1 or self.ops_runs < 1 or self.warmup < 0 or self.min_seconds < 0 or self.max_sentences < 1:
            raise ProfileError(f"runs ({self.runs}), ops_runs ({self.ops_runs}) and max_sentences "
                               f"({self.max_sentences}) must be >= 1, warmup ({self.warmup}) and min_seconds "
                               f"({self.min_seconds}) >= 0")
        if not 0 < self.ci_target < 1 or self.max_seconds < 0 or self.wait_quiet < 0:
            raise ProfileError(f"ci_target ({self.ci_target}) must be between 0 and 1 (a share of the p50), "
                               f"max_seconds ({self.max_seconds}) and wait_quiet ({self.wait_quiet}) >= 0")
        if self.accelerator not in ACCELERATORS or self.gpu_precision not in GPU_PRECISIONS:
            raise ProfileError(f"accelerator must be one of {', '.join(ACCELERATORS)} and GPU precision one of "
                               f"{', '.join(GPU_PRECISIONS)}, got {self.accelerator!r} and {self.gpu_precision!r}")
        if self.accelerator == "gpu":
            _check_gpu(self)
        _check_runtimes(self)
        if not self.fixed and self.text is None:
            raise ProfileError("nothing to profile: the fixed-length sweep is off and no --text is given")


def _check_gpu(settings: ProfileSettings) -> None:
    """The options that do not combine with --accelerator gpu, in one line each."""
    clashes = [
        (settings.as_app, "--as-app opens each file with the runtime's default options, on the CPU"),
        (settings.mediapipe, "--mediapipe runs MediaPipe Tasks' Python API, which computes on the CPU here"),
        (settings.ops, "--ops breaks down CPU runs (onnxruntime's and LiteRT's CPU profilers)"),
        (settings.delegates != ("xnnpack",), "--delegate is a CPU setting (on the GPU, the operators it leaves run "
                                             "on XNNPACK)"),
    ]
    for clash, why in clashes:
        if clash:
            raise ProfileError(f"--accelerator gpu: {why}: profile the GPU and that apart")


def _check_runtimes(settings: ProfileSettings) -> None:
    """Runtimes are known names, and the web ones do not combine with what they cannot do."""
    unknown = [r for r in settings.runtimes if r not in RUNTIME_CHOICES or r == "web"]
    if not settings.runtimes or unknown:
        raise ProfileError(f"runtime must be one of {', '.join(RUNTIME_CHOICES)}, got {', '.join(unknown) or '(none)'}")
    web = [r for r in settings.runtimes if r != NATIVE]
    if web and settings.accelerator == "gpu":
        raise ProfileError(f"--runtime {web[0]} runs on the CPU (onnxruntime-node's CPU provider, onnxruntime-web's "
                           "WebAssembly): profile --accelerator gpu apart")
    if web and not settings.fixed:
        raise ProfileError(f"--runtime {web[0]} times the fixed-length sweep only, and --no-fixed turns it off")


def forward_args(settings: ProfileSettings) -> list[str]:
    """The `albert-edge profile` options that reproduce ``settings`` (for running the same sweep
    on another machine). Paths in ``text``/``tokenizer`` are passed as they are: replace them
    (``dataclasses.replace``) with the paths on the other machine first."""
    def joined(values) -> str:
        return ",".join(str(v) for v in values)

    args = ["--seq-len", joined(settings.seq_lens), "--batch", joined(settings.batches),
            "--threads", joined(settings.threads), "--delegate", joined(settings.delegates),
            "--provider", joined(settings.providers), "--runs", str(settings.runs),
            "--min-seconds", repr(float(settings.min_seconds)), "--warmup", str(settings.warmup),
            "--max-sentences", str(settings.max_sentences), "--ci-target", repr(100 * settings.ci_target),
            "--max-seconds", repr(float(settings.max_seconds)), "--wait-quiet", repr(float(settings.wait_quiet))]
    if settings.text is not None:
        args += ["--text", str(settings.text)]
    if settings.tokenizer is not None:
        args += ["--tokenizer", str(settings.tokenizer)]
    if settings.ops:
        args += ["--ops", "--ops-runs", str(settings.ops_runs)]
    if not settings.fixed:
        args.append("--no-fixed")
    if settings.mediapipe:
        args.append("--mediapipe")
    if settings.as_app:
        args.append("--as-app")
    if settings.runtimes != ("native",):
        args += ["--runtime", joined(settings.runtimes)]
    if settings.exit_setting is not None:
        args += ["--exit-setting", repr(float(settings.exit_setting))]
    if settings.accelerator != "cpu":  # a device with an older albert-edge knows no --accelerator for the CPU
        args += ["--accelerator", settings.accelerator, "--gpu-precision", settings.gpu_precision]
    return args
