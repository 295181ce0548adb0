"""An independent reference for mpr-llm's logits: the same Llama forward pass in numpy
(float64), over weights dequantized by the `gguf` package (llama.cpp's own Python reader).

usage: python3 reference.py MODEL.gguf TOKEN_IDS OUT
  TOKEN_IDS: comma-separated; OUT: the logits of every position, a line each.
Prints the token ids' text (decoded with the model's vocabulary) on stdout.

usage: python3 reference.py --to-hf MODEL.gguf DIR
  Writes the model as a Hugging Face directory: config.json, model.safetensors (F32, the Q
  and K rows put back in Hugging Face's rotate-half order, as llama.cpp's converter undoes
  them), tokenizer.json and tokenizer_config.json from the GGUF metadata.
"""
import json
import os
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


def to_hf(path, out):
    r = GGUFReader(path)
    fields = r.fields
    meta = lambda key: fields[key].contents()
    heads = meta("llama.attention.head_count")
    kv_heads = meta("llama.attention.head_count_kv")
    os.makedirs(out, exist_ok=True)

    def unpermute(w, n_head):
        # GGUF row 2i of a head is Hugging Face's row i, row 2i+1 its row i + hd/2.
        rows, cols = w.shape
        return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)

    names = {
        "token_embd": "model.embed_tokens",
        "output_norm": "model.norm",
        "output": "lm_head",
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    header, blobs, offset = {}, [], 0
    for t in r.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(
            [int(d) for d in reversed(t.shape)]
        )
        parts = t.name.split(".")
        if parts[0] == "blk":
            if parts[2] == "attn_q":
                w = unpermute(w, heads)
            elif parts[2] == "attn_k":
                w = unpermute(w, kv_heads)
            name = f"model.layers.{parts[1]}.{names[parts[2]]}.weight"
        else:
            name = names[parts[0]] + ".weight"
        blob = np.ascontiguousarray(w).tobytes()
        header[name] = {"dtype": "F32", "shape": list(w.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for b in blobs:
            f.write(b)
    tokens = meta("tokenizer.ggml.tokens")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": meta("llama.embedding_length"),
        "intermediate_size": meta("llama.feed_forward_length"),
        "num_hidden_layers": meta("llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": meta("llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": meta("llama.rope.freq_base"),
        "max_position_embeddings": meta("llama.context_length"),
        "vocab_size": len(tokens),
        "hidden_act": "silu",
        "tie_word_embeddings": "output.weight" not in {t.name for t in r.tensors},
        "rope_scaling": None,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    types = meta("tokenizer.ggml.token_type")
    special = [i for i, ty in enumerate(types) if ty in (3, 4)]
    assert meta("tokenizer.ggml.pre") == "smollm", "the pre-tokenizer below is SmolLM's"
    tokenizer = {
        "version": "1.0",
        "added_tokens": [
            {
                "id": i,
                "content": tokens[i],
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i in special
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": meta("tokenizer.ggml.merges"),
        },
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)
    tc = {
        "bos_token": tokens[meta("tokenizer.ggml.bos_token_id")],
        "eos_token": tokens[meta("tokenizer.ggml.eos_token_id")],
        "chat_template": meta("tokenizer.chat_template"),
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f)


if __name__ == "__main__":
    if sys.argv[1] == "--to-hf":
        to_hf(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], [int(i) for i in sys.argv[2].split(",")], sys.argv[3])
