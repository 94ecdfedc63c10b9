#!/usr/bin/env python3
"""Train Strata's default model, a small qwen3, on the Go standard library's sources.

Reads the data that tools/train/bpe writes, trains with bf16 autocast on a GPU (or float32 on
the CPU, for a quick check), and writes into --out:
  <name>.gguf           the model as llama.cpp's qwen3 loads it (F16 matrices, F32 norms)
  loss.csv, loss.png    training and held-out loss through training
  summary.json          hyper-parameters, steps, times, final losses, unigram baseline, samples
  reference/            engine reference for a held-out prompt: prompt.txt, tokens.npy, logits.npy,
                        resid_post.npy (see models/MODEL.md)
See tools/train/README.md for the commands.
"""

import argparse
import csv
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=".traindata", help="folder written by tools/train/bpe")
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="gostd-qwen3-4m")
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--ffn", type=int, default=768)
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--batch", type=int, default=128, help="sequences of --ctx tokens per step")
    p.add_argument("--steps", type=int, default=0, help="training steps; 0 = as many as fit in --minutes")
    p.add_argument("--minutes", type=float, default=5.0, help="training-loop time budget when --steps is 0")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-windows", type=int, default=64, help="held-out windows per periodic evaluation")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


RMS_EPS = 1e-6


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # At least float32 under bf16 autocast; float64 stays float64 for the reference.
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
        return (xf * self.weight.to(xf.dtype)).to(x.dtype)


def rope_tables(ctx, head_dim, theta, device, dtype):
    inv = theta ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim)
    angles = torch.arange(ctx, device=device, dtype=torch.float64)[:, None] * inv[None, :]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rope_neox(x, cos, sin):
    """NeoX rotation, as llama.cpp's qwen3 runs it: dims i and i + head_dim/2 form a pair.
    x is [B, T, heads, head_dim]; cos and sin are [T, head_dim/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = a.heads, a.kv_heads, a.head_dim
        d, q_dim, kv_dim = a.d_model, a.heads * a.head_dim, a.kv_heads * a.head_dim
        self.attn_norm = RMSNorm(d)
        self.attn_q = nn.Linear(d, q_dim, bias=False)
        self.attn_k = nn.Linear(d, kv_dim, bias=False)
        self.attn_v = nn.Linear(d, kv_dim, bias=False)
        self.attn_output = nn.Linear(q_dim, d, bias=False)
        self.attn_q_norm = RMSNorm(a.head_dim)
        self.attn_k_norm = RMSNorm(a.head_dim)
        self.ffn_norm = RMSNorm(d)
        self.ffn_gate = nn.Linear(d, a.ffn, bias=False)
        self.ffn_up = nn.Linear(d, a.ffn, bias=False)
        self.ffn_down = nn.Linear(a.ffn, d, bias=False)

    def forward(self, x, cos, sin, probs=None):
        """probs, when a list, gets this layer's attention probabilities [B, heads, T, T],
        computed explicitly instead of by the fused kernel."""
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.attn_q_norm(self.attn_q(h).view(B, T, self.heads, self.head_dim))
        k = self.attn_k_norm(self.attn_k(h).view(B, T, self.kv_heads, self.head_dim))
        v = self.attn_v(h).view(B, T, self.kv_heads, self.head_dim)
        q, k = rope_neox(q, cos[:T], sin[:T]), rope_neox(k, cos[:T], sin[:T])
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        # GQA: query head h reads kv head h // (heads / kv_heads), as llama.cpp groups them.
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if probs is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            p = scores.masked_fill(mask, float("-inf")).softmax(-1)
            probs.append(p)
            y = p @ v
        x = x + self.attn_output(y.transpose(1, 2).reshape(B, T, -1))
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class Qwen3(nn.Module):
    def __init__(self, a, vocab):
        super().__init__()
        self.token_embd = nn.Embedding(vocab, a.d_model)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.output_norm = RMSNorm(a.d_model)
        self.output = nn.Linear(a.d_model, vocab, bias=False)  # untied from token_embd
        self.rope = (a.ctx, a.head_dim, a.rope_theta)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # GPT-2's init: residual projections shrink with depth.
                std = 0.02 / math.sqrt(2 * a.layers) if name.endswith(("attn_output.weight", "ffn_down.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, ids, resid=None, probs=None):
        """ids [B, T] -> logits [B, T, vocab]; resid, when a list, gets each layer's output."""
        cos, sin = rope_tables(*self.rope, ids.device, self.output.weight.dtype)
        x = self.token_embd(ids)
        for block in self.blocks:
            x = block(x, cos, sin, probs)
            if resid is not None:
                resid.append(x)
        return self.output(self.output_norm(x))


def load_ids(path):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype="<u2").astype(np.int64)


def unigram_baseline(train, val, vocab):
    """Cross-entropy (nats/token) of held-out tokens under training-set unigram frequencies,
    add-one smoothed so tokens unseen in training have finite cost."""
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[val[1:]].mean())


def windows(stream, ctx, count=None):
    """Non-overlapping windows of ctx + 1 tokens (inputs and next-token targets), count of them
    spread evenly over the stream, or all of them."""
    most = (len(stream) - 1) // ctx
    count = most if count is None else min(count, most)
    starts = torch.arange(count, device=stream.device) * most // count * ctx
    return stream[starts[:, None] + torch.arange(ctx + 1, device=stream.device)]


@torch.no_grad()
def mean_loss(model, wins, batch, autocast):
    total, count = 0.0, 0
    for k in range(0, len(wins), batch):
        w = wins[k:k + batch]
        with torch.autocast(w.device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum")
        total += loss.item()
        count += w[:, 1:].numel()
    return total / count


def lr_at(step, a, total):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    progress = min(1.0, (step - a.warmup) / max(1, total - a.warmup))
    return a.lr * (a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def train(a, model, train_ids, val_ids, log_rows):
    device = a.device
    autocast = device.startswith("cuda")
    decay = [p for p in model.parameters() if p.dim() == 2 and p is not model.token_embd.weight]
    no_decay = [p for p in model.parameters() if p.dim() < 2 or p is model.token_embd.weight]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if autocast else {}))
    gen = torch.Generator(device=device).manual_seed(a.seed)
    val_wins = windows(val_ids, a.ctx, a.eval_windows)
    offsets = torch.arange(a.ctx + 1, device=device)
    total = a.steps
    start, timed_from, running, running_n = time.time(), None, 0.0, 0
    step = 0
    while total == 0 or step < total:
        if total == 0 and step == 20:
            sync(device)
            timed_from = time.time()
        if total == 0 and step == 60:
            sync(device)
            per_step = (time.time() - timed_from) / 40
            # 5% of the budget is left for the periodic held-out evaluations.
            total = max(step + 1, int(0.95 * (a.minutes * 60 - (time.time() - start)) / per_step) + step)
            print(f"{per_step * 1e3:.1f} ms/step: training {total} steps", flush=True)
        lr = lr_at(step, a, total if total else 10**9)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train_ids) - a.ctx - 1, (a.batch, 1), device=device, generator=gen)
        w = train_ids[starts + offsets]
        with torch.autocast(w.device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running += loss.detach()
        running_n += 1
        step += 1
        if step % a.eval_every == 0 or step == total:
            model.eval()
            val = mean_loss(model, val_wins, a.batch, autocast)
            model.train()
            row = {"step": step, "tokens": step * a.batch * a.ctx, "seconds": round(time.time() - start, 2),
                   "lr": lr, "train_loss": (running / running_n).item(), "val_loss": val}
            running, running_n = 0.0, 0
            log_rows.append(row)
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    sync(device)
    return step, time.time() - start


def f16_rounded(model):
    """The weights as the GGUF stores them: matrices rounded to F16, norm vectors kept F32."""
    out = {}
    for name, p in model.state_dict().items():
        p = p.detach().float().cpu()
        out[name] = p.half().float() if p.dim() == 2 else p
    return out


# GGUF v3 (llama.cpp's gguf.md): little-endian; header, key-values, tensor infos, aligned data.
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1
ALIGN = 32


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, v):
    if kind == GGUF_STRING:
        return gguf_string(v)
    if kind == GGUF_BOOL:
        return struct.pack("<B", 1 if v else 0)
    return struct.pack({GGUF_U32: "<I", GGUF_I32: "<i", GGUF_F32: "<f"}[kind], v)


def gguf_kv(key, kind, v):
    if isinstance(kind, tuple):  # (GGUF_ARRAY, element kind)
        body = struct.pack("<IQ", kind[1], len(v)) + b"".join(gguf_value(kind[1], x) for x in v)
        return gguf_string(key) + struct.pack("<I", GGUF_ARRAY) + body
    return gguf_string(key) + struct.pack("<I", kind) + gguf_value(kind, v)


def gguf_tensor_name(name):
    if name.startswith("blocks."):
        _, n, rest = name.split(".", 2)
        return f"blk.{n}.{rest}"
    return name


def write_gguf(path, a, tok, weights):
    kvs = [
        ("general.architecture", GGUF_STRING, "qwen3"),
        ("general.name", GGUF_STRING, a.name),
        ("general.license", GGUF_STRING, "BSD-3-Clause"),
        ("general.file_type", GGUF_U32, 1),  # mostly F16
        ("general.alignment", GGUF_U32, ALIGN),
        ("qwen3.block_count", GGUF_U32, a.layers),
        ("qwen3.context_length", GGUF_U32, a.ctx),
        ("qwen3.embedding_length", GGUF_U32, a.d_model),
        ("qwen3.feed_forward_length", GGUF_U32, a.ffn),
        ("qwen3.attention.head_count", GGUF_U32, a.heads),
        ("qwen3.attention.head_count_kv", GGUF_U32, a.kv_heads),
        ("qwen3.attention.key_length", GGUF_U32, a.head_dim),
        ("qwen3.attention.value_length", GGUF_U32, a.head_dim),
        ("qwen3.rope.freq_base", GGUF_F32, a.rope_theta),
        ("qwen3.attention.layer_norm_rms_epsilon", GGUF_F32, RMS_EPS),
        ("tokenizer.ggml.model", GGUF_STRING, tok["model"]),
        ("tokenizer.ggml.pre", GGUF_STRING, tok["pre"]),
        ("tokenizer.ggml.tokens", (GGUF_ARRAY, GGUF_STRING), tok["tokens"]),
        ("tokenizer.ggml.token_type", (GGUF_ARRAY, GGUF_I32), tok["token_types"]),
        ("tokenizer.ggml.merges", (GGUF_ARRAY, GGUF_STRING), tok["merges"]),
        ("tokenizer.ggml.bos_token_id", GGUF_U32, tok["bos_token_id"]),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, tok["eos_token_id"]),
        # Every training file starts after <|endoftext|>, so prompts should too.
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, True),
    ]
    tensors = []  # (gguf name, ggml dims: dims[0] = row length, ggml type, bytes)
    for name, w in weights.items():
        if w.dim() == 2:
            data = w.numpy().astype("<f2").tobytes()  # row-major [out, in] is ggml's [in, out]
            tensors.append((gguf_tensor_name(name), (w.shape[1], w.shape[0]), GGML_F16, data))
        else:
            tensors.append((gguf_tensor_name(name), (w.shape[0],), GGML_F32, w.numpy().astype("<f4").tobytes()))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(gguf_kv(*kv) for kv in kvs)
    infos, offset = [], 0
    for name, dims, kind, data in tensors:
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
                     + struct.pack("<IQ", kind, offset))
        offset += -(-len(data) // ALIGN) * ALIGN
    head += b"".join(infos)
    with open(path, "wb") as f:
        f.write(head + b"\0" * (-len(head) % ALIGN))
        for _, _, _, data in tensors:
            f.write(data + b"\0" * (-len(data) % ALIGN))


def decode(tok, ids):
    """GPT-2 byte-level token strings back to text (the inverse of bytes_to_unicode)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    rune_to_byte, n = {}, 0
    for b in range(256):
        if b in printable:
            rune_to_byte[chr(b)] = b
        else:
            rune_to_byte[chr(256 + n)] = b
            n += 1
    out = bytearray()
    for i in ids:
        t = tok["tokens"][i]
        out += t.encode() if tok["token_types"][i] == 3 else bytes(rune_to_byte[c] for c in t)
    return out.decode("utf-8", errors="replace")


@torch.no_grad()
def greedy(model, ids, n):
    ids = list(ids)
    for _ in range(n):
        logits = model(torch.tensor([ids[-model.rope[0]:]], dtype=torch.long))
        ids.append(int(logits[0, -1].argmax()))
    return ids


@torch.no_grad()
def head_scores(model, vocab, eot, seq=50, batch=16, seed=0):
    """Per-head induction and previous-token scores on <|endoftext|> + random tokens repeated
    twice: induction = mean attention from a second-half token to the token after its first
    occurrence; previous-token = mean attention to the position just before, over all tokens."""
    seq = min(seq, (model.rope[0] - 1) // 2)
    g = torch.Generator().manual_seed(seed)
    rand = torch.randint(0, vocab - 1, (batch, seq), generator=g)
    ids = torch.cat([torch.full((batch, 1), eot), rand, rand], dim=1)
    probs = []
    model(ids, probs=probs)
    second = torch.arange(seq + 1, 2 * seq + 1)
    pos = torch.arange(1, 2 * seq + 1)
    induction = [p[:, :, second, second - seq + 1].mean((0, 2)).tolist() for p in probs]
    previous = [p[:, :, pos, pos - 1].mean((0, 2)).tolist() for p in probs]
    return induction, previous


def plot_loss(path, rows, baseline, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    ax.plot([r["step"] for r in rows], [r["train_loss"] for r in rows], label="training (mean since last point)")
    ax.plot([r["step"] for r in rows], [r["val_loss"] for r in rows], label="held-out")
    ax.axhline(baseline, color="gray", linestyle="--", label=f"unigram baseline {baseline:.2f}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def write_reference(model, corpus, tok, ref):
    """Writes the engine reference for corpus's prompt into the folder ref and returns the
    probes: greedy continuation text, induction and previous-token scores per layer and head.
    model should be the shipped weights in float64 on the CPU."""
    prompt = corpus["prompt"]["ids"]
    resid = []
    with torch.no_grad():
        logits = model(torch.tensor([prompt]), resid=resid)
    with open(os.path.join(ref, "prompt.txt"), "w") as f:
        f.write(corpus["prompt"]["text"])
    np.save(os.path.join(ref, "tokens.npy"), np.array(prompt, dtype=np.int32))
    np.save(os.path.join(ref, "logits.npy"), logits[0].float().numpy())
    np.save(os.path.join(ref, "resid_post.npy"), torch.stack([r[0] for r in resid]).float().numpy())
    completion = greedy(model, prompt, 48)
    induction, previous = head_scores(model, len(tok["tokens"]), tok["eos_token_id"])
    return decode(tok, completion[len(prompt):]), induction, previous


def main():
    a = parse_args()
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(os.path.join(a.out, "reference"), exist_ok=True)
    tok = json.load(open(os.path.join(a.data, "tokenizer.json")))
    corpus = json.load(open(os.path.join(a.data, "corpus.json")))
    vocab = len(tok["tokens"])
    train_np, val_np = load_ids(os.path.join(a.data, "train.bin.gz")), load_ids(os.path.join(a.data, "val.bin.gz"))
    baseline = unigram_baseline(train_np, val_np, vocab)
    print(f"{len(train_np)} training and {len(val_np)} held-out tokens; unigram baseline {baseline:.4f} nats/token", flush=True)
    train_ids, val_ids = torch.from_numpy(train_np).to(a.device), torch.from_numpy(val_np).to(a.device)

    model = Qwen3(a, vocab).to(a.device)
    n_params = sum(p.numel() for p in model.parameters())
    rows = []
    steps, seconds = train(a, model, train_ids, val_ids, rows)

    weights = f16_rounded(model)
    write_gguf(os.path.join(a.out, a.name + ".gguf"), a, tok, weights)
    with open(os.path.join(a.out, "loss.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    plot_loss(os.path.join(a.out, "loss.png"), rows, baseline,
              f"{a.name}: {n_params / 1e6:.2f}M parameters, {steps * a.batch * a.ctx / 1e6:.0f}M tokens")

    # Everything from here uses the shipped weights (F16-rounded): full held-out loss in float32
    # on the device, then the reference and the probes in float64 on the CPU.
    model.load_state_dict(weights)
    model.eval()
    val_wins = windows(val_ids, a.ctx)
    val_full = mean_loss(model, val_wins, a.batch, autocast=False)
    train_sample = mean_loss(model, windows(train_ids, a.ctx, len(val_wins)), a.batch, autocast=False)

    completion, induction, previous = write_reference(model.double().cpu(), corpus, tok, os.path.join(a.out, "reference"))

    summary = {
        "name": a.name, "parameters": n_params, "vocab": vocab, "args": vars(a),
        "steps": steps, "train_seconds": round(seconds, 1),
        "tokens_seen": steps * a.batch * a.ctx, "epochs": steps * a.batch * a.ctx / len(train_np),
        "unigram_baseline": baseline,
        "final_val_loss_f16_weights_fp32": val_full, "final_train_sample_loss_f16_weights_fp32": train_sample,
        "last_logged": rows[-1],
        "prompt": corpus["prompt"], "greedy_completion": completion,
        "induction_scores": induction, "previous_token_scores": previous,
        "device": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
    }
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("args", "prompt")}, indent=1), flush=True)


if __name__ == "__main__":
    main()
