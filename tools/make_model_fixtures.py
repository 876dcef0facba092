#!/usr/bin/env python3
"""Golden fixtures for model/ (Qwen2/Qwen3 forward, backward, greedy generation), made by
Hugging Face transformers on the CPU.

Pinned (Python 3.11, PyPI):  torch==2.9.1  transformers==4.57.6  safetensors==0.7.0  numpy==2.3.5

    .venv-fixtures/bin/python tools/make_model_fixtures.py [--binary build-model/llm_sqlrl]

Writes tests/fixtures/model/<name>/ for
  qwen3_tied    Qwen3ForCausalLM, q_norm/k_norm, tied embeddings, rope_theta 1e6
  qwen2_untied  Qwen2ForCausalLM, q/k/v biases, separate lm_head, rope_theta 1e4
each holding
  config.json, model.safetensors   save_pretrained of the random model, stored in bf16 (every
                                   value is exactly a bf16, so f32 computations on both sides
                                   start from identical weights)
  expected.safetensors             tokens/positions/cu_seqlens (I32) of a packed batch of three
                                   sequences (lengths 11, 5, 16), targets and loss mask (I32),
                                   logits [T, vocab] and log-probs of the targets [T] (F32),
                                   grad.<hf name> for every parameter (F32) of
                                       loss = -sum_t mask_t * logprob_t / sum_t mask_t,
                                   greedy_prompt (the first sequence) and greedy_tokens (20
                                   argmax continuations by full re-forward, also checked against
                                   transformers' generate() with its KV cache).
References are computed in float64 (model.double()): the C++ fp32 path is then compared with
the exact answer, not with another fp32 rounding. The script asserts that the top-2 margin of
every greedy step is large enough that fp32 cannot flip the argmax.

Random weights are larger than transformers' init (std 0.15; norm weights 1 + 0.1·N(0,1);
biases 0.1·N(0,1)) so logits are far from uniform and every parameter matters.

With --binary, also checks interop of our writer: `llm_sqlrl generate --weights <fixture>
--resave DIR` loads the fixture into the model's parameter buffer and saves it with
weights/checkpoint; transformers must load DIR and give the same logits.
The build and the tests never run this script; its outputs are committed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import save_file

assert torch.__version__.startswith("2.9.1"), torch.__version__
assert transformers.__version__ == "4.57.6", transformers.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "model")
LENGTHS = [11, 5, 16]
GREEDY_STEPS = 20


def make_config(arch):
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
    if arch == "qwen3":
        return transformers.Qwen3Config(head_dim=16, tie_word_embeddings=True, rope_theta=1e6, **common)
    return transformers.Qwen2Config(tie_word_embeddings=False, rope_theta=1e4, **common)


def build_model(arch, seed):
    torch.manual_seed(seed)
    config = make_config(arch)
    cls = transformers.Qwen3ForCausalLM if arch == "qwen3" else transformers.Qwen2ForCausalLM
    model = cls(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
            p.copy_(p.to(torch.bfloat16).float())  # exactly representable in bf16
    return model


def make_batch(seed, vocab):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(3, vocab, (n,), generator=g) for n in LENGTHS]
    tokens = torch.cat(seqs)
    positions = torch.cat([torch.arange(n) for n in LENGTHS])
    cu = torch.tensor(np.cumsum([0] + LENGTHS))
    targets, mask = [], []
    for s in seqs:
        t = torch.cat([s[1:], torch.randint(3, vocab, (1,), generator=g)])
        m = (torch.rand(len(s), generator=g) < 0.75).long()
        m[-1] = 0
        targets.append(t)
        mask.append(m)
    return seqs, tokens, positions, cu, torch.cat(targets), torch.cat(mask)


def greedy(model, prompt, steps):
    ids = prompt.clone()
    margins = []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(ids[None]).logits[0, -1]
            top = torch.topk(logits, 2).values
            margins.append(float(top[0] - top[1]))
            ids = torch.cat([ids, logits.argmax()[None]])
    return ids[len(prompt):], min(margins)


def make_fixture(name, arch, seed):
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    model = build_model(arch, seed)
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    # Reload rather than widen in place: .to(bfloat16) also rounded the rotary inv_freq buffer,
    # which a fresh load recomputes in f32 as any user of the checkpoint would.
    cls = type(model)
    model = cls.from_pretrained(folder, torch_dtype=torch.float32).eval().double()
    seqs, tokens, positions, cu, targets, mask = make_batch(seed + 1, model.config.vocab_size)

    model.zero_grad()
    logits_all, logprob_all = [], []
    loss = 0
    start = 0
    for s in seqs:
        n = len(s)
        logits = model(s[None]).logits[0]
        lp = torch.log_softmax(logits, -1).gather(1, targets[start:start + n, None])[:, 0]
        loss = loss - (lp * mask[start:start + n].double()).sum()
        logits_all.append(logits.detach())
        logprob_all.append(lp.detach())
        start += n
    loss = loss / mask.sum()
    loss.backward()
    loss = loss.detach()

    out = {
        "tokens": tokens.int(), "positions": positions.int(), "cu_seqlens": cu.int(),
        "targets": targets.int(), "mask": mask.int(),
        "logits": torch.cat(logits_all).float(), "logprobs": torch.cat(logprob_all).float(),
    }
    for pname, p in model.named_parameters():
        out["grad." + pname] = p.grad.float().contiguous()
    if model.config.tie_word_embeddings:
        out.pop("grad.lm_head.weight", None)

    gen, margin = greedy(model, seqs[0], GREEDY_STEPS)
    assert margin > 2e-3, f"{name}: greedy top-2 margin {margin} too small for an fp32 comparison"
    # transformers' own cached generation (fp32) must agree with the float64 re-forward loop.
    m32 = model.float()
    hf = m32.generate(seqs[0][None], do_sample=False, max_new_tokens=GREEDY_STEPS, min_new_tokens=GREEDY_STEPS,
                      eos_token_id=None, pad_token_id=0)[0, len(seqs[0]):]
    assert torch.equal(hf, gen), (name, hf, gen)
    out["greedy_prompt"] = seqs[0].int()
    out["greedy_tokens"] = gen.int()
    save_file(out, os.path.join(folder, "expected.safetensors"), metadata={"format": "pt"})
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, loss {loss.item():.6f}, "
          f"greedy margin {margin:.4f}, greedy {gen.tolist()}")
    return folder


def verify_resave(binary, folder):
    with tempfile.TemporaryDirectory() as tmp:
        dest = os.path.join(tmp, "resaved")
        subprocess.run([binary, "generate", "--weights", folder, "--resave", dest], check=True)
        a = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
        b = transformers.AutoModelForCausalLM.from_pretrained(dest, torch_dtype=torch.float32).eval()
        ids = torch.arange(3, 40)[None]
        with torch.no_grad():
            la, lb = a(ids).logits, b(ids).logits
        assert torch.equal(la, lb), f"{folder}: resaved checkpoint gives different logits"
        print(f"{os.path.basename(folder)}: resaved by {binary} -> transformers logits identical")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", help="llm_sqlrl to check the writer round trip with")
    args = parser.parse_args()
    torch.set_num_threads(2)
    folders = [make_fixture("qwen3_tied", "qwen3", 1234), make_fixture("qwen2_untied", "qwen2", 4321)]
    if args.binary:
        for f in folders:
            verify_resave(args.binary, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
