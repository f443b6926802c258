#!/usr/bin/python3
"""Export two tiny decoders with a standard past/present KV cache, for the KV-cache tests.

Run from the repository root (Debian's system python, torch 1.13):

    /usr/bin/python3 testdata/scripts/export_decoders.py

Writes (opset 14, fp32, deterministic random weights from torch.manual_seed):
    testdata/models/kv/gpt2_kv.onnx   GPT-2 style: learned positions (computed from the past
        length inside the model), LayerNorm, GELU (tanh) MLP, 4-head attention.
        inputs  input_ids [batch, seq] i64, attention_mask [batch, total] i64,
                past_key_<i>/past_value_<i> [batch, 4, past, 16]
        outputs logits [batch, seq, 256], present_key_<i>/present_value_<i> [batch, 4, total, 16]
    testdata/models/kv/llama_kv.onnx  LLaMA style: RMSNorm, rotary (cos/sin tables indexed by
        position_ids), SwiGLU MLP, grouped-query attention (4 query heads, 2 key/value heads).
        inputs  input_ids [batch, seq], attention_mask [batch, total], position_ids [batch, seq],
                past_key_<i>/past_value_<i> [batch, 2, past, 16]
        outputs logits [batch, seq, 256], present_key_<i>/present_value_<i> [batch, 2, total, 16]
    testdata/models/kv/prompt.npy     the fixed prompt, int64 [1, 8]

Both: hidden 64, 2 layers, vocab 256, 64 positions; present = Concat(past, new) on axis 2,
`total` = past + seq. Each export is checked: a cached step equals the uncached model on the
same tokens. testdata/scripts/kv_greedy_reference.py (onnxruntime) writes the reference ids.
"""

import math
import os
import sys

sys.dont_write_bytecode = True

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "models", "kv"))
HIDDEN, LAYERS, VOCAB, POSITIONS, HEAD_DIM = 64, 2, 256, 64, 16
NEG = -1e9  # masked scores: finite, so a row never becomes all -inf


def causal_and_mask(scores, attention_mask, past_length):
    """scores [b, h, seq, total]: key j is visible to query i when j <= past + i and mask[j]."""
    seq, total = scores.shape[-2], scores.shape[-1]
    q_pos = torch.arange(seq, dtype=torch.long) + past_length
    k_pos = torch.arange(total, dtype=torch.long)
    causal = k_pos[None, :] <= q_pos[:, None]
    scores = torch.where(causal, scores, torch.tensor(NEG, dtype=scores.dtype))
    return scores + (1.0 - attention_mask[:, None, None, :].to(scores.dtype)) * NEG


# ---------------------------------------------------------------- GPT-2 style
class GptBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = HIDDEN // HEAD_DIM
        self.ln_1 = nn.LayerNorm(HIDDEN, eps=1e-5)
        self.c_attn = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.c_proj = nn.Linear(HIDDEN, HIDDEN)
        self.ln_2 = nn.LayerNorm(HIDDEN, eps=1e-5)
        self.fc = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.proj = nn.Linear(4 * HIDDEN, HIDDEN)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, HEAD_DIM).permute(0, 2, 1, 3)

    def forward(self, x, past_k, past_v, attention_mask, past_length):
        q, k, v = self.c_attn(self.ln_1(x)).split(HIDDEN, dim=2)
        q, k, v = self.split(q), self.split(k), self.split(v)
        k = torch.cat((past_k, k), dim=2)
        v = torch.cat((past_v, v), dim=2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
        probs = torch.softmax(causal_and_mask(scores, attention_mask, past_length), dim=-1)
        a = torch.matmul(probs, v).permute(0, 2, 1, 3)
        a = a.reshape(a.shape[0], a.shape[1], HIDDEN)
        x = x + self.c_proj(a)
        h = nn.functional.gelu(self.fc(self.ln_2(x)), approximate="tanh")
        return x + self.proj(h), k, v


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, HIDDEN)
        self.wpe = nn.Embedding(POSITIONS, HIDDEN)
        self.h = nn.ModuleList([GptBlock() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(HIDDEN, eps=1e-5)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids, attention_mask, *past):
        past_length = past[0].shape[2]
        pos = torch.arange(past_length, past_length + input_ids.shape[1], dtype=torch.long)
        x = self.wte(input_ids) + self.wpe(pos)[None]
        presents = []
        for i, block in enumerate(self.h):
            x, k, v = block(x, past[2 * i], past[2 * i + 1], attention_mask, past_length)
            presents += [k, v]
        return (self.lm_head(self.ln_f(x)), *presents)


# ---------------------------------------------------------------- LLaMA style
class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + 1e-6))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads, self.kv_heads = HIDDEN // HEAD_DIM, 2
        self.input_layernorm = RMSNorm()
        self.q_proj = nn.Linear(HIDDEN, self.heads * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, self.kv_heads * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, self.kv_heads * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.post_attention_layernorm = RMSNorm()
        self.gate_proj = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)
        self.down_proj = nn.Linear(2 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x, cos, sin, past_k, past_v, attention_mask, past_length):
        b, s, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, s, self.heads, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.kv_heads, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.kv_heads, HEAD_DIM).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = torch.cat((past_k, k), dim=2)
        v = torch.cat((past_v, v), dim=2)
        rep = self.heads // self.kv_heads
        kk = k[:, :, None].expand(b, self.kv_heads, rep, k.shape[2], HEAD_DIM).reshape(b, self.heads, -1, HEAD_DIM)
        vv = v[:, :, None].expand(b, self.kv_heads, rep, v.shape[2], HEAD_DIM).reshape(b, self.heads, -1, HEAD_DIM)
        scores = torch.matmul(q, kk.transpose(2, 3)) / math.sqrt(HEAD_DIM)
        probs = torch.softmax(causal_and_mask(scores, attention_mask, past_length), dim=-1)
        a = torch.matmul(probs, vv).transpose(1, 2).reshape(b, s, HIDDEN)
        x = x + self.o_proj(a)
        h = self.post_attention_layernorm(x)
        x = x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))
        return x, k, v


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaBlock() for _ in range(LAYERS)])
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        freqs = torch.outer(torch.arange(POSITIONS).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, input_ids, attention_mask, position_ids, *past):
        past_length = past[0].shape[2]
        x = self.embed_tokens(input_ids)
        cos = self.cos_cached[position_ids][:, None]  # [b, 1, seq, head_dim]
        sin = self.sin_cached[position_ids][:, None]
        presents = []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, cos, sin, past[2 * i], past[2 * i + 1], attention_mask, past_length)
            presents += [k, v]
        return (self.lm_head(self.norm(x)), *presents)


# ---------------------------------------------------------------- export
def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.startswith("norm") or "ln_" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "wte" in name or "wpe" in name or "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:  # [out, in]: spread enough that the argmax is well separated
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))


def export(model, path, kv_heads, with_positions):
    batch, past, seq = 2, 5, 3
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    pasts = [torch.randn(batch, kv_heads, past, HEAD_DIM, generator=g) for _ in range(2 * LAYERS)]
    names_in = ["input_ids", "attention_mask"] + (["position_ids"] if with_positions else [])
    args = [ids, mask] + ([torch.arange(past, past + seq).expand(batch, seq)] if with_positions else [])
    past_names, present_names = [], []
    for i in range(LAYERS):
        past_names += [f"past_key_{i}", f"past_value_{i}"]
        present_names += [f"present_key_{i}", f"present_value_{i}"]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            "logits": {0: "batch", 1: "seq"}}
    if with_positions:
        axes["position_ids"] = {0: "batch", 1: "seq"}
    axes.update({n: {0: "batch", 2: "past"} for n in past_names})
    axes.update({n: {0: "batch", 2: "total"} for n in present_names})
    torch.onnx.export(model, tuple(args + pasts), path, input_names=names_in + past_names,
                      output_names=["logits"] + present_names, dynamic_axes=axes,
                      opset_version=14, do_constant_folding=True)
    # A cached step must equal the uncached model on the same tokens.
    with torch.no_grad():
        full_ids = torch.randint(0, VOCAB, (1, 7), generator=g)
        empty = [torch.zeros(1, kv_heads, 0, HEAD_DIM) for _ in range(2 * LAYERS)]

        def call(ids_, start, pasts_):
            extra = [torch.arange(start, start + ids_.shape[1])[None]] if with_positions else []
            m = torch.ones(1, start + ids_.shape[1], dtype=torch.long)
            return model(ids_, m, *extra, *pasts_)

        full = call(full_ids, 0, empty)[0]
        pre = call(full_ids[:, :4], 0, empty)
        step = call(full_ids[:, 4:], 4, pre[1:])[0]
        err = (full[:, 4:] - step).abs().max().item()
        assert err < 1e-4, err
    print(f"wrote {path} ({os.path.getsize(path)} bytes), cached vs full max diff {err:.3g}")


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    gpt = Gpt().eval()
    init_weights(gpt, 10)
    export(gpt, os.path.join(OUT, "gpt2_kv.onnx"), HIDDEN // HEAD_DIM, False)
    llama = Llama().eval()
    init_weights(llama, 20)
    export(llama, os.path.join(OUT, "llama_kv.onnx"), 2, True)
    prompt = np.array([[17, 200, 3, 99, 42, 7, 128, 64]], dtype=np.int64)
    np.save(os.path.join(OUT, "prompt.npy"), prompt)


if __name__ == "__main__":
    main()
