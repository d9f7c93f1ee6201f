"""Pretraining examples streamed from a corpus, in chunks, with a position a checkpoint can save.

The corpus is read ``chunk_documents`` documents at a time. Each chunk's examples are built and
shuffled with a random generator seeded by (seed, epoch, first document of the chunk) alone, so a
chunk always gives the same examples in the same order, wherever reading started. The stream's
state is therefore three small numbers — epoch, where the current chunk starts in the files, how
many of its examples were used — and a resumed run rebuilds one chunk and carries on with exactly
the examples an uninterrupted run would have seen. Each epoch draws new masks and new A/B cuts.

Every ``holdout_every``-th document is held out of training and used for evaluation.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..text import DocPosition, iter_documents
from .data import Example, MaskingOptions, examples_from_document
from .errors import DataError
from .tokens import Vocabulary

__all__ = ["ExampleStream", "StreamState", "held_out_examples", "collate"]

log = logging.getLogger(__name__)

_EVAL_PASSES = 5


@dataclass(frozen=True)
class StreamState:
    epoch: int = 0
    chunk_start: DocPosition = DocPosition()
    consumed: int = 0  # examples of the current chunk already handed out

    def to_dict(self) -> dict:
        return {"epoch": self.epoch, "chunk_start": self.chunk_start.to_dict(), "consumed": self.consumed}

    @classmethod
    def from_dict(cls, data: dict) -> StreamState:
        return cls(int(data["epoch"]), DocPosition.from_dict(data["chunk_start"]), int(data["consumed"]))


def _held_out(index: int, holdout_every: int) -> bool:
    return holdout_every > 0 and index % holdout_every == 0


def _tokenize(sentences: list[str], vocab: Vocabulary) -> list[list[int]]:
    return [vocab.ids(s) for s in sentences]


class ExampleStream:
    """An endless stream of training examples, epoch after epoch, resumable at any example."""

    def __init__(self, files: Sequence[Path], vocab: Vocabulary, opts: MaskingOptions, seed: int = 0,
                 chunk_documents: int = 1000, holdout_every: int = 0):
        if chunk_documents < 1:
            raise DataError(f"chunk_documents ({chunk_documents}) must be at least 1")
        self.files = list(files)
        self.vocab = vocab
        self.opts = opts
        self.seed = seed
        self.chunk_documents = chunk_documents
        self.holdout_every = holdout_every
        self._state = StreamState()

    def state(self) -> StreamState:
        """The position after the last example handed out."""
        return self._state

    def load_state(self, state: StreamState) -> None:
        self._state = state

    def _chunk(self, epoch: int, start: DocPosition) -> tuple[list[Example], DocPosition, int]:
        """Examples of the chunk at ``start`` (shuffled), where the next chunk starts, documents read."""
        rng = random.Random(f"albert-edge/pretrain/{self.seed}/{epoch}/{start.index}")
        examples: list[Example] = []
        end, read = start, 0
        for end, sentences in iter_documents(self.files, start):
            read += 1
            if not _held_out(end.index, self.holdout_every):
                examples.extend(examples_from_document(_tokenize(sentences, self.vocab), self.vocab, self.opts, rng))
            if read >= self.chunk_documents:
                break
        rng.shuffle(examples)
        return examples, end, read

    def __iter__(self) -> Iterator[Example]:
        state = self._state
        seen_in_epoch = state.consumed > 0 or state.chunk_start.index > 0
        while True:
            examples, end, read = self._chunk(state.epoch, state.chunk_start)
            for i in range(state.consumed, len(examples)):
                self._state = state = StreamState(state.epoch, state.chunk_start, i + 1)
                seen_in_epoch = True
                yield examples[i]
            if read < self.chunk_documents or end.file >= len(self.files):  # end of the corpus
                if not seen_in_epoch:
                    raise _no_examples(self.files, read, state.chunk_start.index, self.holdout_every)
                log.info("epoch %d done", state.epoch)
                state = StreamState(state.epoch + 1, DocPosition(), 0)
                seen_in_epoch = False
            else:
                state = StreamState(state.epoch, end, 0)
            self._state = state


def _no_examples(files: Sequence[Path], read: int, before: int, holdout_every: int) -> DataError:
    where = str(files[0]) if len(files) == 1 else f"{len(files)} corpus files"
    if read + before == 0:
        return DataError(f"the corpus ({where}) is empty: it holds no text")
    held = f" (every {holdout_every}th document is held out for evaluation)" if holdout_every else ""
    return DataError(
        f"the corpus ({where}) gives no sentence-order pairs: no training document{held} has two or "
        "more sentences. Sentences end with . ! or ? followed by a space and a capital letter; "
        "documents are separated by blank lines"
    )


def held_out_examples(files: Sequence[Path], vocab: Vocabulary, opts: MaskingOptions, seed: int,
                      holdout_every: int, limit: int) -> list[Example]:
    """Up to ``limit`` examples from the held-out documents (every document when
    ``holdout_every`` is 1), always the same ones for a given seed. When the documents give
    fewer than ``limit``, they are cut and masked again (up to 5 passes)."""
    rng = random.Random(f"albert-edge/eval/{seed}")
    documents = []
    for position, sentences in iter_documents(files):
        if _held_out(position.index, holdout_every):
            documents.append(_tokenize(sentences, vocab))
            if len(documents) >= limit:
                break
    out: list[Example] = []
    for _ in range(_EVAL_PASSES):  # a small held-out set is seen again with other cuts and masks
        for doc in documents:
            out.extend(examples_from_document(doc, vocab, opts, rng))
        if len(out) >= limit or not out:
            break
    return out[:limit]


def collate(examples: Sequence[Example], pad_id: int) -> dict:
    """Examples -> tensors, padded to the longest in the batch: input_ids, attention_mask,
    token_type_ids (B, T), mlm_labels (B, T) with -100 where nothing is predicted, sop_labels (B,)."""
    import torch

    B = len(examples)
    T = max(len(e.input_ids) for e in examples)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    token_type_ids = torch.zeros((B, T), dtype=torch.long)
    mlm_labels = torch.full((B, T), -100, dtype=torch.long)
    for row, e in enumerate(examples):
        n = len(e.input_ids)
        input_ids[row, :n] = torch.tensor(e.input_ids)
        attention_mask[row, :n] = 1
        token_type_ids[row, e.len_a + 2:n] = 1  # [CLS] A [SEP] is type 0, B [SEP] type 1
        if e.positions:
            mlm_labels[row, list(e.positions)] = torch.tensor(e.labels)
    sop_labels = torch.tensor([e.sop_label for e in examples], dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
            "mlm_labels": mlm_labels, "sop_labels": sop_labels}
