#!/usr/bin/env python3
"""Writes splits.json: pre-tokenizer splits of random strings computed with the
third-party `regex` module from the patterns llama.cpp uses (src/llama-vocab.cpp),
as an independent reference for the hand-written scanners in pretokenize.go.

The alphabet avoids U+001C..U+001F, which Python's \\s matches but llama.cpp's
whitespace set does not."""
import json
import random

import regex

LLAMA3 = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]


def split(pieces, pattern):
    """llama.cpp's unicode_regex_split_stl: matches and the gaps between them."""
    out = []
    for p in pieces:
        end = 0
        for m in regex.finditer(pattern, p):
            if m.start() > end:
                out.append(p[end:m.start()])
            out.append(m.group())
            end = m.end()
        if end < len(p):
            out.append(p[end:])
    return out


def splits(pre, text):
    patterns = {"llama-bpe": [LLAMA3], "qwen2": [QWEN2], "gpt2": [GPT2], "default": DEFAULT}[pre]
    pieces = [text]
    for pattern in patterns:
        pieces = split(pieces, pattern)
    return pieces


ALPHABET = list("aZzs Stt'Ll eEvVrRmMdD1234567890!.,?$+<=>^~|`-_\"\t\n\r") + [
    "é", "ß", "日", "本", "٣", "½", "Ⅻ", "\u00a0", "\u3000", "\u2028", "\u0085",
    "😀", "\u0301", "™", "  ", "\n\n", " \n", "'s", "'LL", "123456",
]


def main():
    rng = random.Random(1)
    cases = []
    for pre in ["llama-bpe", "qwen2", "gpt2", "default"]:
        for _ in range(150):
            text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 14)))
            cases.append({"pre": pre, "text": text, "want": splits(pre, text)})
    with open("splits.json", "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")


if __name__ == "__main__":
    main()
