"""MLX's side of benches/llm.sh: one generation with mlx-lm on the CPU, its speeds printed
as mpr-llm prints its own (`prefill: 5 tokens, 26.3 tok/s`, `decode: 32 tokens, 19.3 tok/s`).

usage: python3 llm_mlx.py HF_DIR PROMPT TOKENS {q4|f32}
  Run alone (1 rank) or under `mlx.launch --backend ring -n N` (tensor parallel over the
  ring group through mlx-lm's Model.shard(), Megatron's scheme as mpr-llm's).
  q4: the weights quantized by MLX, 4 bits in affine groups of 32 (a scale and a bias per
  group: the layout of GGUF's Q4_1), the embedding and the tied head too; f32: as stored.
  Greedy decoding, the prompt as it is (no chat template), like mpr-llm --prompt.
"""
import sys
import time

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.generate import stream_generate
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import load


def main(path, prompt, tokens, kind):
    mx.set_default_device(mx.cpu)
    group = mx.distributed.init()
    model, tokenizer = load(path)
    if kind == "q4":
        nn.quantize(model, group_size=32, bits=4)
    if group.size() > 1:
        # mlx-lm divides the heads evenly among the ranks: a model whose heads the ranks do
        # not divide cannot be sharded (SmolLM2's 9 query and 3 KV heads over 2 ranks).
        heads, kv = model.args.num_attention_heads, model.args.num_key_value_heads
        if heads % group.size() or kv % group.size():
            if group.rank() == 0:
                print(f"mlx: cannot shard {heads} query / {kv} KV heads over {group.size()} ranks", flush=True)
            return 3
        model.shard(group)
    mx.eval(model.parameters())
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    text, last = "", None
    t0 = time.perf_counter()
    for r in stream_generate(model, tokenizer, ids, max_tokens=tokens, sampler=make_sampler(0.0)):
        text += r.text
        last = r
    wall = time.perf_counter() - t0
    if group.rank() == 0:
        print(text.replace("\n", " "), flush=True)
        print(f"prefill: {last.prompt_tokens} tokens, {last.prompt_tps:.1f} tok/s", flush=True)
        print(f"decode: {last.generation_tokens} tokens, {last.generation_tps:.1f} tok/s", flush=True)
        print(f"wall: {wall:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
