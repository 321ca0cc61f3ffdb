"""Corpus BLEU (sacrebleu) and the GLEU reward of section 5."""
