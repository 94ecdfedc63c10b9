#!/usr/bin/env python3
"""Check a GGUF written by train.py without PyTorch: parse it from the GGUF v3 spec, run the
qwen3 forward pass the way llama.cpp lays it out (ggml dims, F16 matrices, NeoX RoPE, GQA,
per-head Q/K RMSNorm) in float64 numpy, and compare with the reference .npy files.

    python3 tools/train/check_gguf.py models/gostd-qwen3-4m.gguf models/reference
"""

import os
import struct
import sys

import numpy as np

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
GGML_DTYPES = {0: "<f4", 1: "<f2"}


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.at:self.at + n].decode("utf-8")
        self.at += n
        return s

    def value(self, kind):
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            elem, n = self.take("<I"), self.take("<Q")
            return [self.value(elem) for _ in range(n)]
        return self.take(SCALARS[kind])


def read_gguf(path):
    data = open(path, "rb").read()
    r = Reader(data)
    assert data[:4] == b"GGUF", "not a GGUF file"
    r.at = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    assert version == 3, f"version {version}"
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        infos.append((name, dims, r.take("<I"), r.take("<Q")))
    align = meta.get("general.alignment", 32)
    base = -(-r.at // align) * align
    tensors = {}
    for name, dims, kind, offset in infos:
        count = int(np.prod(dims))
        flat = np.frombuffer(data, dtype=GGML_DTYPES[kind], count=count, offset=base + offset)
        tensors[name] = flat.astype(np.float64).reshape(dims[::-1])  # ggml dims[0] is the row length
    return meta, tensors


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def forward(meta, t, ids):
    """Returns logits [T, vocab] and each layer's output [layers, T, d]."""
    n_layer, n_head = meta["qwen3.block_count"], meta["qwen3.attention.head_count"]
    n_kv, hd = meta["qwen3.attention.head_count_kv"], meta["qwen3.attention.key_length"]
    eps, theta = meta["qwen3.attention.layer_norm_rms_epsilon"], meta["qwen3.rope.freq_base"]
    T = len(ids)
    angles = np.arange(T)[:, None] * theta ** (-np.arange(0, hd, 2) / hd)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]

    def rope(x):  # [T, heads, hd]; NeoX pairs dims i and i + hd/2
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    x = t["token_embd.weight"][ids]
    resid = []
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(n_layer):
        w = lambda n: t[f"blk.{i}.{n}.weight"]  # noqa: E731
        h = rms_norm(x, w("attn_norm"), eps)
        q = rms_norm((h @ w("attn_q").T).reshape(T, n_head, hd), w("attn_q_norm"), eps)
        k = rms_norm((h @ w("attn_k").T).reshape(T, n_kv, hd), w("attn_k_norm"), eps)
        v = (h @ w("attn_v").T).reshape(T, n_kv, hd)
        q, k = rope(q), rope(k)
        out = np.empty((T, n_head, hd))
        for head in range(n_head):
            kv = head // (n_head // n_kv)
            s = q[:, head] @ k[:, kv].T / np.sqrt(hd) + causal
            p = np.exp(s - s.max(-1, keepdims=True))
            out[:, head] = (p / p.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(T, -1) @ w("attn_output").T
        h = rms_norm(x, w("ffn_norm"), eps)
        gate = h @ w("ffn_gate").T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w("ffn_up").T)) @ w("ffn_down").T
        resid.append(x)
    return rms_norm(x, t["output_norm.weight"], eps) @ t["output.weight"].T, np.stack(resid)


def main(gguf_path, ref_dir):
    meta, tensors = read_gguf(gguf_path)
    assert meta["general.architecture"] == "qwen3"
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "qwen2"
    assert len(meta["tokenizer.ggml.tokens"]) == tensors["output.weight"].shape[0]
    ids = np.load(os.path.join(ref_dir, "tokens.npy"))
    logits, resid = forward(meta, tensors, ids)
    want_logits = np.load(os.path.join(ref_dir, "logits.npy"))
    want_resid = np.load(os.path.join(ref_dir, "resid_post.npy"))
    dl, dr = np.abs(logits - want_logits).max(), np.abs(resid - want_resid).max()
    print(f"{gguf_path}: {len(tensors)} tensors, {sum(v.size for v in tensors.values())} parameters; "
          f"max |diff| vs reference: logits {dl:.2e} (max |logit| {np.abs(want_logits).max():.1f}), "
          f"resid_post {dr:.2e} (max |x| {np.abs(want_resid).max():.1f})")
    # The reference is float64 math stored as float32, so it is off by at most half a float32
    # ulp (6e-8 of the largest value); 1e-6 of it leaves margin yet catches any real mismatch.
    ok = dl <= 1e-6 * max(1.0, np.abs(want_logits).max()) and dr <= 1e-6 * max(1.0, np.abs(want_resid).max())
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
