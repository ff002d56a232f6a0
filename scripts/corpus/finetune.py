#!/usr/bin/env python3
"""Fine-tune a BERT-style checkpoint for a few hundred AdamW steps, keeping checkpoints.

usage: finetune.py MODEL_DIR OUT_DIR [--steps 300] [--every 100] [--seed 0]

MODEL_DIR holds config.json and model.safetensors (the corpus's minilm-f32). The task is
a real training loop on CPU: sentences made of the tokenizer's vocabulary (seeded), a
contrastive objective between each sentence and a copy with a tenth of its tokens
replaced, mean-pooled embeddings, AdamW (lr 2e-5, weight decay 0.01) over every weight.
Writes OUT_DIR/step{N}-f32/model.safetensors every --every steps and the same in BF16
(OUT_DIR/step{N}-bf16/), plus OUT_DIR/base-bf16/model.safetensors (the base rounded to
BF16), so that each checkpoint can be coded against its base or its predecessor.
Needs torch, transformers and safetensors (the bench's venv); deterministic for a seed.
"""
import argparse
import os

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel


def save(state, out_dir, name, dtype):
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in state.items()}
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=32)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    config = AutoConfig.from_pretrained(args.model_dir)
    model = AutoModel.from_config(config)
    original = load_file(os.path.join(args.model_dir, "model.safetensors"))
    # Every weight must load; tensors the model keeps elsewhere (position ids) are
    # written back as they were.
    missing, _ = model.load_state_dict(original, strict=False)
    assert not missing, f"weights missing from the checkpoint: {missing}"
    model.train()
    names = list(original)
    save({k: original[k] for k in names}, args.out_dir, "base-bf16", torch.bfloat16)

    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed)
    vocab = config.vocab_size
    for step in range(1, args.steps + 1):
        ids = torch.randint(1000, vocab, (args.batch, args.length), generator=gen)
        noisy = ids.clone()
        mask = torch.rand(ids.shape, generator=gen) < 0.1
        noisy[mask] = torch.randint(1000, vocab, (int(mask.sum()),), generator=gen)
        a = model(input_ids=ids).last_hidden_state.mean(1)
        b = model(input_ids=noisy).last_hidden_state.mean(1)
        a, b = torch.nn.functional.normalize(a, dim=-1), torch.nn.functional.normalize(b, dim=-1)
        logits = a @ b.T / 0.05
        loss = torch.nn.functional.cross_entropy(logits, torch.arange(args.batch))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.every == 0:
            state = model.state_dict()
            state = {k: state.get(k, original[k]) for k in names}
            save(state, args.out_dir, f"step{step}-f32", torch.float32)
            save(state, args.out_dir, f"step{step}-bf16", torch.bfloat16)
            print(f"step {step}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
