"""The head a model is, and a model with only some of its outputs: what a file holds."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from albert_edge.errors import ConversionError

__all__ = ["head_of", "select_outputs"]


def head_of(model) -> str:
    """The --head name of a model object."""
    from albert_edge.model import CHOICE_HEADS, HEADS

    from .task_heads import AdaptiveClassifier

    if isinstance(model, AdaptiveClassifier):  # convert --adaptive: the classifier that stops early
        model = model.classifier
    for name, cls in HEADS.items():
        if isinstance(model, cls):
            return name
    for name, cls in CHOICE_HEADS.items():
        if isinstance(model, cls):
            raise ConversionError(f"the {name} head (inputs of shape batch x choices x sequence) cannot be "
                                  "converted yet; it loads and runs in PyTorch")
    raise ConversionError(f"{type(model).__name__} is not an albert-edge model")


# Outputs a file may leave out, and the submodule only that output reads: leaving the output
# out leaves that submodule's weights out of the file too.
_DROPPABLE = {"pooler_output": "pooler"}


def select_outputs(model, outputs: Sequence[str] | None):
    """``model`` with only ``outputs`` (None or all of them: ``model`` itself). An output can be
    left out when the weights only it reads can go with it: ``pooler_output`` of the base head
    (its 590,592 parameters in ALBERT-base). The model given is not changed: the result is a
    shallow copy sharing its parameters, without the dropped submodules."""
    if outputs is None:
        return model
    wanted = tuple(dict.fromkeys(outputs))
    have = tuple(model.output_names)
    unknown = [o for o in wanted if o not in have]
    if not wanted or unknown:
        raise ConversionError(f"--outputs {', '.join(unknown or ['(none)'])}: the {head_of(model)!r} head has "
                              f"outputs {', '.join(have)}")
    if set(wanted) == set(have):
        return model
    dropped = [o for o in have if o not in wanted]
    kept = [o for o in have if o in wanted]
    # Outputs come out in the head's own order; only a trailing output whose weights go with it can go.
    if kept != list(have[:len(kept)]) or any(o not in _DROPPABLE or getattr(model, _DROPPABLE[o], None) is None
                                             for o in dropped):
        leavable = [o for o in have if o in _DROPPABLE and getattr(model, _DROPPABLE[o], None) is not None]
        raise ConversionError(f"the {head_of(model)!r} head cannot leave out {', '.join(dropped)}; "
                              f"outputs it can leave out: {', '.join(leavable) or 'none'}")
    lean = copy.copy(model)
    lean._modules = dict(model._modules)  # noqa: SLF001 (nn.Module keeps submodules there)
    for name in dropped:
        setattr(lean, _DROPPABLE[name], None)
    lean.output_names = tuple(kept)
    return lean
