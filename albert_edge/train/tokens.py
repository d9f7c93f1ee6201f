"""The view of a sentencepiece vocabulary that the training data needs: text to ids without
[CLS]/[SEP], which ids start a word, which ids are special, and a fingerprint of the model file."""

from __future__ import annotations

import hashlib
import os
from functools import cached_property
from pathlib import Path

from ..errors import TokenizerError
from ..tokenizer import SPIECE_UNDERLINE, AlbertTokenizer, find_spiece

__all__ = ["Vocabulary"]


class Vocabulary:
    """An :class:`AlbertTokenizer` plus the tables the masking and the trainers use."""

    def __init__(self, spiece: str | os.PathLike):
        self.path = find_spiece(spiece)
        self.tokenizer = AlbertTokenizer(self.path)
        tok = self.tokenizer
        self.pad_id, self.unk_id, self.cls_id = tok.pad_id, tok.unk_id, tok.cls_id
        self.sep_id, self.mask_id = tok.sep_id, tok.mask_id
        self.vocab_size = tok.vocab_size
        pieces = tok.id_to_piece(range(self.vocab_size))
        self.special_ids = frozenset((self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id))
        # A piece that opens with "▁" starts a new word; n-gram masking masks whole words.
        self.word_start = [p.startswith(SPIECE_UNDERLINE) or i in self.special_ids for i, p in enumerate(pieces)]
        # What the 10% "random token" replacement draws from: every non-special piece.
        self.replacement_ids = [i for i in range(self.vocab_size) if i not in self.special_ids]

    def ids(self, text: str) -> list[int]:
        """Piece ids of ``text``, without [CLS] and [SEP]."""
        return self.tokenizer.encode(text, max_length=None, truncation=False)[1:-1]

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(Path(self.path).read_bytes()).hexdigest()

    def check_matches(self, vocab_size: int, what: str = "the model config") -> None:
        """Raise TokenizerError unless this vocabulary has exactly ``vocab_size`` pieces."""
        if self.vocab_size != vocab_size:
            raise TokenizerError(
                f"tokenizer {self.path} has {self.vocab_size} pieces but {what} has vocab_size "
                f"{vocab_size}; they must be equal (e.g. --set vocab_size={self.vocab_size})"
            )
