#!/usr/bin/env python3
"""Cross-check tools/train/bpe's tokenizer against an independent implementation: Hugging Face's
tokenizers library configured as Qwen2's tokenizer.json is (the Qwen2 split regex, byte-level
mapping, BPE merges by rank). Every held-out file and the reference prompt must tokenize to the
ids that bpe wrote. Exits 1 on any difference.

    python3 tools/train/check_tokenizer.py .traindata
"""

import gzip
import json
import os
import sys

import numpy as np
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def main(data):
    tok = json.load(open(os.path.join(data, "tokenizer.json")))
    corpus = json.load(open(os.path.join(data, "corpus.json")))
    vocab = {t: i for i, t in enumerate(tok["tokens"]) if tok["token_types"][i] == 1}
    merges = [tuple(m.split(" ")) for m in tok["merges"]]
    hf = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    with gzip.open(os.path.join(data, "val_text.bin.gz")) as f:
        text = f.read()
    with gzip.open(os.path.join(data, "val.bin.gz")) as f:
        ids = np.frombuffer(f.read(), dtype="<u2")

    docs, byte_at, id_at = [], 0, 0
    for d in corpus["val_documents"]:
        id_at += 1  # <|endoftext|> before each file
        docs.append((d["path"], text[byte_at:byte_at + d["bytes"]].decode("utf-8"), ids[id_at:id_at + d["tokens"]].tolist()))
        byte_at += d["bytes"]
        id_at += d["tokens"]
    assert byte_at == len(text) and id_at == len(ids), "corpus.json lengths do not cover val_text and val ids"
    docs.append(("reference prompt", corpus["prompt"]["text"], corpus["prompt"]["ids"][1:]))

    encoded = hf.encode_batch([d[1] for d in docs], add_special_tokens=False)
    bad = 0
    for (path, doc, want), got in zip(docs, encoded):
        if got.ids != want:
            bad += 1
            k = next(i for i in range(min(len(want), len(got.ids)) + 1) if i == len(want) or i == len(got.ids) or want[i] != got.ids[i])
            near = got.offsets[k][0] if k < len(got.offsets) else len(doc)
            print(f"MISMATCH {path}: first difference at token {k} (bpe {want[k:k + 5]}, hf {got.ids[k:k + 5]}), text {doc[near:near + 40]!r}")
    total = sum(len(d[2]) for d in docs)
    print(f"tokenizer cross-check: {len(docs) - bad} of {len(docs)} texts ({total} tokens) identical to Hugging Face tokenizers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".traindata"))
