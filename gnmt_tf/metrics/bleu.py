"""Corpus BLEU with sacrebleu, reported with its signature so scores are comparable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass
class BleuResult:
    score: float
    signature: str
    text: str  # sacrebleu's full line, e.g. "BLEU = 23.41 55.2/29.0/17.7/11.0 (BP = ...)"

    def __str__(self) -> str:
        return f"{self.text}  [{self.signature}]"


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> BleuResult:
    """sacrebleu's corpus BLEU (13a tokenization, exponential smoothing off) of detokenized text."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu = BLEU()
    result = bleu.corpus_score(list(hypotheses), [list(references)])
    return BleuResult(score=float(result.score), signature=str(bleu.get_signature()), text=str(result))
