"""ALBERT pretraining (masked LM with n-gram masking + sentence-order prediction) and fine-tuning.

- Corpora and the builtin corpus are read by :mod:`albert_edge.text` (device side, shared with
  quantization's calibration, ``profile --text`` and the demo).
- ``tokens``: the sentencepiece view the data pipeline needs (ids, word starts, special ids).
- ``data``: pretraining examples (sentence-order pairs, n-gram masking) streamed in chunks, with a
  position that a checkpoint saves so a resumed run sees exactly the data it would have seen.
- ``optim``: LAMB and AdamW, warmup then linear decay.
- ``loop``: one optimizer step (accumulation, clipping, DDP, NaN check) shared by both trainers.
- ``state``: training checkpoints (HF directory + optimizer + data position), written atomically.
- ``pretrain`` / ``finetune``: the two trainers; ``distributed``: torchrun / DDP plumbing.

Importing this package is cheap; torch is imported by the modules that need it.
"""
