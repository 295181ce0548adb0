"""An independent reference for mpr-llm's logits: the same Llama forward pass in numpy
(float64), over weights dequantized by the `gguf` package (llama.cpp's own Python reader).

usage: python3 reference.py MODEL.gguf TOKEN_IDS OUT
  TOKEN_IDS: comma-separated; OUT: the logits of every position, a line each.
Prints the token ids' text (decoded with the model's vocabulary) on stdout.
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main(path, ids, out):
    r = GGUFReader(path)
    fields = r.fields
    tensors = {t.name: t for t in r.tensors}

    def meta(key):
        return fields[key].contents()

    def weight(name):
        t = tensors[name]
        shape = [int(d) for d in reversed(t.shape)]
        return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(shape)

    dim = meta("llama.embedding_length")
    heads = meta("llama.attention.head_count")
    kv_heads = meta("llama.attention.head_count_kv")
    layers = meta("llama.block_count")
    eps = meta("llama.attention.layer_norm_rms_epsilon")
    base = meta("llama.rope.freq_base")
    hd = dim // heads
    group = heads // kv_heads

    # The prompt's text, from the vocabulary (GPT-2's byte map inverted).
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    vocab = meta("tokenizer.ggml.tokens")
    sys.stdout.write(bytes(chars[c] for i in ids for c in vocab[i]).decode("utf-8", "replace"))

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(x, positions):
        # x: (T, heads, hd), rotated on adjacent pairs.
        i = np.arange(hd // 2)
        theta = positions[:, None] * base ** (-2.0 * i / hd)
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = a * c - b * s
        y[..., 1::2] = a * s + b * c
        return y

    emb = weight("token_embd.weight")
    x = emb[ids]
    t_n = len(ids)
    pos = np.arange(t_n, dtype=np.float64)
    mask = np.triu(np.full((t_n, t_n), -np.inf), 1)
    for l in range(layers):
        w = lambda s: weight(f"blk.{l}.{s}.weight")
        h = rms(x, w("attn_norm"))
        q = rope((h @ w("attn_q").T).reshape(t_n, heads, hd), pos)
        k = rope((h @ w("attn_k").T).reshape(t_n, kv_heads, hd), pos)
        v = (h @ w("attn_v").T).reshape(t_n, kv_heads, hd)
        att = np.empty((t_n, heads, hd))
        for j in range(heads):
            g = j // group
            s = q[:, j, :] @ k[:, g, :].T / np.sqrt(hd) + mask
            p = np.exp(s - s.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            att[:, j, :] = p @ v[:, g, :]
        x = x + att.reshape(t_n, dim) @ w("attn_output").T
        h = rms(x, w("ffn_norm"))
        gate, up = h @ w("ffn_gate").T, h @ w("ffn_up").T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w("ffn_down").T
    out_w = weight("output.weight") if "output.weight" in tensors else emb
    logits = rms(x, weight("output_norm.weight")) @ out_w.T
    with open(out, "w") as f:
        for row in logits:
            f.write(" ".join(f"{v:e}" for v in row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], [int(i) for i in sys.argv[2].split(",")], sys.argv[3])
