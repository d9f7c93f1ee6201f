"""How albert_edge.runtime runs an ExecuTorch .pte file, and what that costs the device.

Two bindings of the same ExecuTorch C++ runtime, the first installed one used
(the order of :data:`albert_edge.formats.kinds.EXECUTORCH`'s engines):

- ``executorch-numpy-runtime``: numpy in, numpy out, no torch (little memory to import).
  A community build of ExecuTorch 1.3.1 for CPython 3.12+ (x86-64 and aarch64 Linux); it
  loads the .pte files ExecuTorch 1.5.1 writes and gives the same outputs bit for bit.
- ``executorch``'s own bindings (``executorch.extension.pybindings._C``): they accept only
  torch tensors, and the library links libtorch, so this route imports torch (far more
  memory before the model loads; ``executorch.runtime`` adds ``executorch.exir`` on top).
  The workstation fallback, as tensorflow.lite is for .tflite files.

Weights once in memory: XNNPACK packs each delegate's weights when it loads, so a weight
that L layers share (one named blob in the file) is packed L times unless XNNPACK's weights
cache is on. Neither binding exposes it, so it is switched on through the runtime's own C
entry point, ``executorch::runtime::set_option("XnnpackBackend", {weight_cache_enabled:
true})``, before the program loads (without it, the process's peak memory grows with every
layer that shares a weight). The thread pool is sized the same way.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
from pathlib import Path

import numpy as np

from ..errors import DataError, RuntimeUnavailable, first_line, install_line, optional_import
from ..formats.graph import INPUT_NAMES, TensorSpec
from ..formats.pte_reader import METHOD, XNNPACK, read
from ..formats.kinds import EXECUTORCH
from .engines import engines_of

__all__ = ["PteBackend", "PTE_DELEGATES"]

log = logging.getLogger(__name__)

# A .pte runs the delegates it was lowered for: there is nothing to choose at run time.
PTE_DELEGATES = ("xnnpack",)

# ExecuTorch's C++ entry points, by their (Itanium ABI) names.
_SET_OPTION = "_ZN10executorch7runtime10set_optionEPKcNS0_4SpanINS0_13BackendOptionEEE"
_GET_THREADPOOL = "_ZN10executorch9extension10threadpool14get_threadpoolEv"
_RESET_THREADPOOL = "_ZN10executorch9extension10threadpool10ThreadPool24_unsafe_reset_threadpoolEj"
_THREAD_COUNT = "_ZNK10executorch9extension10threadpool10ThreadPool16get_thread_countEv"


class _BackendOption(ctypes.Structure):
    """executorch::runtime::BackendOption: a 64-byte key and a std::variant<bool, int,
    std::array<char, 256>> (256 bytes of storage, 4-aligned, then its one-byte index)."""

    _fields_ = [("key", ctypes.c_char * 64), ("storage", ctypes.c_int32 * 64), ("index", ctypes.c_ubyte)]


class PteBackend:
    """A .pte file's ``forward`` method in the first installed ExecuTorch binding."""

    def __init__(self, path: Path, num_threads: int | None, delegate: str = "xnnpack", weights_once: bool = True):
        if delegate not in PTE_DELEGATES:
            raise RuntimeUnavailable(f"{path}: a .pte runs the delegates it was lowered for "
                                     f"(delegate {delegate!r} cannot be chosen at run time)")
        try:
            contents = read(path, weights=False)  # a damaged file can crash the runtime, not just fail to load
        except ValueError as exc:
            raise RuntimeUnavailable(str(exc)) from None
        _check_albert(path, contents)
        self.inputs: list[TensorSpec] = contents.inputs
        self.outputs: list[TensorSpec] = contents.outputs
        xnnpack = XNNPACK in contents.metadata["backends"]
        self.accelerator = "xnnpack" if xnnpack else "portable"
        binding = _binding()
        self.name = binding.name
        # Every weight is packed once (the cache), or the file has no XNNPACK blocks that pack.
        self.weights_once: bool = (binding.enable_weights_cache() if weights_once else False) if xnnpack else True
        self.threads = binding.set_threads(num_threads) if num_threads else None
        try:
            self._method = binding.load(path)
        except Exception as exc:  # each binding raises its own types for a program it refuses
            raise RuntimeUnavailable(f"{path}: {binding.name} cannot load it: {first_line(exc)}") from None

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        longest = self.inputs[0].shape[1]  # the upper bound the program was exported with
        given = np.shape(feeds[self.inputs[0].name])
        if len(given) > 1 and given[1] > longest:
            raise DataError(f"{given[1]} tokens is more than this .pte takes ({longest}): truncate the input, or "
                            "convert with a larger --max-seq-len")
        outputs = self._method([feeds[s.name] for s in self.inputs])
        return {s.name: np.asarray(o) for s, o in zip(self.outputs, outputs)}


def _check_albert(path: Path, contents) -> None:
    """The program is an ALBERT's: three integer inputs, the model's forward arguments."""
    names = [s.name for s in contents.inputs]
    if names != list(INPUT_NAMES) or any(np.dtype(s.dtype).kind not in "iu" for s in contents.inputs):
        took = ", ".join(f"{s.dtype}{list(s.shape)}" for s in contents.inputs) or "nothing"
        raise RuntimeUnavailable(f"{path}: not an ALBERT program: its {METHOD} method takes {took}, not "
                                 f"{', '.join(INPUT_NAMES)} as integer tensors")


class _Binding:
    """What PteBackend needs of a binding: load a program, and the native library whose
    ExecuTorch entry points size the thread pool and switch on XNNPACK's weights cache."""

    name: str
    library: str | None

    def load(self, path: Path):
        raise NotImplementedError

    def _native(self) -> ctypes.CDLL | None:
        try:  # the binding has loaded this library already: the same copy of the runtime is returned
            return ctypes.CDLL(self.library) if self.library else None
        except OSError as exc:
            log.info("ExecuTorch library %s not reachable: %s", self.library, exc)
            return None

    def enable_weights_cache(self) -> bool:
        """Switch XNNPACK's weights cache on for every program loaded from now on (process-wide);
        whether the runtime accepted it."""
        lib = self._native()
        fn = getattr(lib, _SET_OPTION, None) if lib is not None else None
        if fn is None:
            log.info("this ExecuTorch build offers no set_option: XNNPACK packs each shared weight per layer")
            return False
        fn.restype, fn.argtypes = ctypes.c_uint32, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
        option = _BackendOption(key=b"weight_cache_enabled")
        option.storage[0], option.index = 1, 0  # the variant's bool alternative: true
        error = fn(XNNPACK.encode(), ctypes.addressof(option), 1)  # a Span is passed as (data, size)
        if error:
            log.info("XNNPACK refused its weights cache (ExecuTorch error %d)", error)
        return error == 0

    def set_threads(self, num_threads: int) -> int | None:
        """Size ExecuTorch's thread pool (XNNPACK's threads); the size it reports, or None."""
        lib = self._native()
        if lib is None or not all(hasattr(lib, s) for s in (_GET_THREADPOOL, _RESET_THREADPOOL, _THREAD_COUNT)):
            log.info("this ExecuTorch build offers no thread pool to size: its default is kept")
            return None
        get, reset, count = getattr(lib, _GET_THREADPOOL), getattr(lib, _RESET_THREADPOOL), getattr(lib, _THREAD_COUNT)
        get.restype, get.argtypes = ctypes.c_void_p, []
        reset.restype, reset.argtypes = ctypes.c_bool, [ctypes.c_void_p, ctypes.c_uint]
        count.restype, count.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
        pool = get()
        if not pool:
            return None
        reset(pool, num_threads)
        return int(count(pool))


class _NumpyRuntime(_Binding):
    """executorch-numpy-runtime: numpy arrays in and out, no torch."""

    def __init__(self, module):
        self.name = module.__name__
        self._module = module
        self.library = optional_import(f"{module.__name__}._core").__file__

    def load(self, path: Path):
        return self._module.Runtime.get().load_program(str(path)).load_method(METHOD)


class _Pybindings(_Binding):
    """executorch's own bindings: torch tensors in and out, so torch is imported."""

    name = "executorch"

    def __init__(self, module):
        self._C = module
        lib = Path(importlib.util.find_spec("executorch").submodule_search_locations[0]) / "lib"
        self.library = str(lib / "libexecutorch.so")

    def set_threads(self, num_threads: int) -> int | None:
        self._C._unsafe_reset_threadpool(num_threads)
        return int(self._C._threadpool_get_thread_count())

    def load(self, path: Path):
        torch = optional_import("torch")  # the only inputs these bindings take are torch tensors
        module = self._C._load_for_executorch(str(path))

        def run(feeds: list[np.ndarray]) -> list[np.ndarray]:
            return [o.numpy() for o in module.forward([torch.from_numpy(f) for f in feeds])]
        return run


_BINDINGS = {"executorch_numpy_runtime": _NumpyRuntime, "executorch": _Pybindings}


def _binding() -> _Binding:
    """The first installed ExecuTorch binding (in the order of the format's engines)."""
    for engine in engines_of(EXECUTORCH):
        if importlib.util.find_spec(engine.package) is None:
            continue
        try:
            module = optional_import(engine.module)
        except ImportError as exc:
            log.info("ExecuTorch binding %s not usable: %s", engine.module, exc)
            continue
        return _BINDINGS[engine.package](module)
    raise RuntimeUnavailable(
        "running .pte files needs executorch-numpy-runtime (Python 3.12+, no torch) or executorch "
        f"({install_line('executorch')})"
    )
