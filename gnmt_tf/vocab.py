"""Special token ids shared by the model, the tokenizer and the data pipeline.

The wordpiece vocabulary (section 4.1) always starts with these four entries.
"""

PAD = "<pad>"
BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)

PAD_ID = 0  # padding; masked everywhere in the model and the loss
BOS_ID = 1  # y_0, prepended to every target input (eq. 2)
EOS_ID = 2  # ends every target sentence
UNK_ID = 3  # wordpieces outside the vocabulary
