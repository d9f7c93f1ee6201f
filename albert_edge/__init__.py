"""albert-edge: ALBERT from PyTorch to phones, Raspberry Pis and Jetsons.

The device side imports without torch or tensorflow and never imports the build side:
config, params, errors, files, tokenizer, text, hub, device/, formats/ (reading every file we
write), runtime/ (Session on each engine), profile/, report/ and demo (demo_app/). The build
side imports torch (and tensorflow) lazily: model, checkpoints, train/, pipeline/, converters
(converters/) and quantize (quantize/). The CLI (cli/) and info are fronts over both.
"""

from .config import PRESETS, AlbertConfig, ConfigError, load_config

__version__ = "0.1.0"
__all__ = ["AlbertConfig", "ConfigError", "PRESETS", "load_config", "__version__"]
