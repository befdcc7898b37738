#!/usr/bin/env python3
"""Golden logits for the real models from Hugging Face transformers, loading the GGUF itself
(transformers dequantizes with the gguf package and runs its own model code, float32, eager).

Usage: python3 oracle/gen_real_golden.py MODEL.gguf NAME OUT_DIR
Writes OUT_DIR/NAME.json (prompts, token ids, versions, model sha256) and, per prompt i,
OUT_DIR/NAME.p<i>.npy: float32 [n_positions, 1 + 2K] rows = (logsumexp of the full row,
K token ids of the largest logits (exact in float32), their K logits), K = 256. The compact form
keeps the golden small for a 262k vocabulary while pinning the top of each distribution.
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

K = 256
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Translate to German: The weather is nice today, and we are going for a walk in the park.",
]


def main(path, name, out):
    os.makedirs(out, exist_ok=True)
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    meta = {"model": name, "model_sha256": sha, "transformers": transformers.__version__,
            "torch": torch.__version__, "K": K, "prompts": []}
    for i, text in enumerate(PROMPTS):
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        vals, top = torch.topk(logits, K, dim=-1)
        rows = torch.cat([lse, top.double(), vals], dim=-1).float().numpy()
        np.save(os.path.join(out, f"{name}.p{i}.npy"), rows)
        meta["prompts"].append({"text": text, "ids": ids})
        print(name, i, len(ids), "top1", top[:, 0].tolist()[:8], flush=True)
    with open(os.path.join(out, f"{name}.json"), "w") as fh:
        json.dump(meta, fh, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
