#!/usr/bin/env python3
"""Writes a model-size BF16 checkpoint for the loading benchmarks: Llama-3-8B's
shapes (a 128256x4096 embedding, then per layer q/o 4096x4096, k/v 1024x4096,
gate/up 14336x4096, down 4096x14336 and two norms, then the final norm and
lm_head), with values drawn as weights are (normal, each row scaled by a
log-normal factor) and rounded to BF16. 12 layers make 7.34 GB.

    scripts/corpus/model_checkpoint.py OUT.safetensors [--layers N] [--seed S] [--config]

Written tensor by tensor, a few rows at a time, so memory stays small. The
same arguments give the same bytes. With --config, a transformers config.json
of these shapes (LlamaForCausalLM) is written beside OUT, so that the folder
loads with `from_pretrained`."""

import argparse
import json
import os
import struct

import numpy as np

HIDDEN, KV, FFN, VOCAB = 4096, 1024, 14336, 128256
ROWS_PER_STEP = 2048


def shapes(layers):
    yield "model.embed_tokens.weight", (VOCAB, HIDDEN)
    for i in range(layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (HIDDEN,)
        yield p + "self_attn.q_proj.weight", (HIDDEN, HIDDEN)
        yield p + "self_attn.k_proj.weight", (KV, HIDDEN)
        yield p + "self_attn.v_proj.weight", (KV, HIDDEN)
        yield p + "self_attn.o_proj.weight", (HIDDEN, HIDDEN)
        yield p + "post_attention_layernorm.weight", (HIDDEN,)
        yield p + "mlp.gate_proj.weight", (FFN, HIDDEN)
        yield p + "mlp.up_proj.weight", (FFN, HIDDEN)
        yield p + "mlp.down_proj.weight", (HIDDEN, FFN)
    yield "model.norm.weight", (HIDDEN,)
    yield "lm_head.weight", (VOCAB, HIDDEN)


def bf16(x):
    """float32 -> BF16 bits, rounded to nearest even."""
    bits = x.astype(np.float32).view(np.uint32)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(np.uint16)


def rows(rng, shape):
    """The tensor's BF16 words, a few rows at a time."""
    if len(shape) == 1:
        # Norm weights: near 1.
        yield bf16(1.0 + 0.05 * rng.standard_normal(shape[0], dtype=np.float32))
        return
    n, width = shape
    std = 1.0 / np.sqrt(width)
    for first in range(0, n, ROWS_PER_STEP):
        k = min(ROWS_PER_STEP, n - first)
        scale = std * rng.lognormal(0.0, 0.4, size=(k, 1)).astype(np.float32)
        yield bf16(rng.standard_normal((k, width), dtype=np.float32) * scale)


def config(layers):
    """A transformers LlamaConfig of the checkpoint's shapes, as config.json holds it."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": HIDDEN, "intermediate_size": FFN, "num_attention_heads": 32,
            "num_key_value_heads": KV // 128, "num_hidden_layers": layers,
            "vocab_size": VOCAB, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0, "tie_word_embeddings": False, "hidden_act": "silu",
            "torch_dtype": "bfloat16"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--config", action="store_true", help="also write config.json beside OUT")
    args = ap.parse_args()
    if args.config:
        folder = os.path.dirname(os.path.abspath(args.out))
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config(args.layers), f, indent=1)
    header, at = {}, 0
    tensors = list(shapes(args.layers))
    for name, shape in tensors:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + size]}
        at += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(args.seed)
    with open(args.out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in tensors:
            for words in rows(rng, shape):
                f.write(words.tobytes())
    print(f"{args.out}: {len(tensors)} tensors, {8 + len(text) + at} bytes")


if __name__ == "__main__":
    main()
