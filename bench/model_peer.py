#!/usr/bin/env python3
# Peer for bench/bench_model.cpp: transformers Qwen3ForCausalLM on the CPU, float32, eager
# attention, the same configs and batch shapes, the same thread count.
# Run by hand, never by CI:
#   .venv-fixtures/bin/python bench/model_peer.py [--threads 2] [--repeats 3]
#   (.venv-fixtures: the virtual environment tools/make_weight_fixtures.py's docstring creates)
# Pinned: torch==2.9.1 (PyPI wheel; BLAS_INFO=mkl), transformers==4.57.6.
#
# Train step: input_ids [16, 256] (16 sequences of 256 tokens: the same tokens and FLOPs as our
#   packed batch of 16 x 256, no padding), logits -> log_softmax -> gather of the next-token
#   targets -> token-mean NLL -> backward to every parameter; zero_grad(set_to_none) first.
# Decode: a 128-token prompt prefilled into a DynamicCache for a batch of G=8 copies (not timed),
#   then 128 steps of model(next_ids [8, 1], past_key_values=cache) under inference_mode, each
#   next token the argmax of the last logits (a manual loop, not generate(), so only the model's
#   own work is timed, as in bench_model's BM_Decode).
import argparse
import statistics
import time

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

CONFIGS = {
    "tiny": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16),
    "25m": dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                num_attention_heads=8, num_key_value_heads=4, head_dim=64),
}


def make_model(name, attn):
    cfg = Qwen3Config(**CONFIGS[name], tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1000000.0,
                      max_position_embeddings=1024, attention_bias=False, attention_dropout=0.0,
                      attn_implementation=attn, torch_dtype=torch.float32)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).float()
    return model


def train_step_tps(model, seqs, length, repeats):
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (seqs, length), generator=g)
    targets = torch.cat([ids[:, 1:], torch.zeros(seqs, 1, dtype=ids.dtype)], dim=1)
    model.train()

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids, use_cache=False).logits
        logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        loss = -logp.mean()
        loss.backward()

    step()  # warm-up
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return [seqs * length / t for t in times], [seqs * length / t for t in cpu]


def decode_tps(model, G, prompt_len, steps, repeats):
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, vocab, (1, prompt_len), generator=g).expand(G, prompt_len).contiguous()
    model.eval()
    rates, cpu_rates = [], []
    with torch.inference_mode():
        for r in range(repeats + 1):
            cache = transformers.DynamicCache()
            out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            if r > 0:  # the first pass is warm-up
                rates.append(G * steps / dt)
                cpu_rates.append(G * steps / dc)
    return rates, cpu_rates


def fmt(rates_and_cpu):
    # Wall-clock rates, then rates per second of process CPU time (all threads; steadier on a
    # loaded machine, and the work done when pinned to one core).
    rates, cpu = rates_and_cpu
    return (f"median {statistics.median(rates):,.0f} tokens/s (min {min(rates):,.0f}, max {max(rates):,.0f}, "
            f"n={len(rates)}); per CPU-second {statistics.median(cpu):,.0f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--configs", default="tiny,25m")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}, "
          f"attn {args.attn}")
    for line in torch.__config__.show().splitlines():
        for part in line.strip().split(", "):
            if part.startswith("BLAS_INFO") or "Math Kernel" in part or "OpenBLAS" in part:
                print("  " + part.lstrip("- "))
    with open("/proc/loadavg") as f:
        print("loadavg before:", f.read().strip())
    for name in args.configs.split(","):
        model = make_model(name, args.attn)
        n = sum(p.numel() for p in model.parameters())
        print(f"[{name}] params {n:,}")
        print(f"[{name}] train 16x256: {fmt(train_step_tps(model, 16, 256, args.repeats))}")
        print(f"[{name}] decode G=8 prompt=128 new=128: {fmt(decode_tps(model, 8, 128, 128, args.repeats))}")
        with open("/proc/loadavg") as f:
            print(f"[{name}] loadavg:", f.read().strip())


if __name__ == "__main__":
    main()
