"""albert-edge: ALBERT from PyTorch to phones, Raspberry Pis and Jetsons.

The device side (config, tokenizer, runtime, profile, report) imports without torch or
tensorflow; the build side (model, checkpoints, converters, quantize, train) imports them lazily.
"""

from .config import PRESETS, AlbertConfig, ConfigError, load_config

__version__ = "0.1.0"
__all__ = ["AlbertConfig", "ConfigError", "PRESETS", "load_config", "__version__"]
