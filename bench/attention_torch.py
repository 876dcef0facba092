#!/usr/bin/env python3
"""Baseline for bench_attention_cuda (run by scripts/gpu_check.sh when torch is present):
PyTorch scaled_dot_product_attention restricted to the flash backend, bf16, causal, head_dim
128, the same shapes (16k tokens = batch x seq, 16 heads; and 32 q / 8 kv heads at seq 4096)
and the same FLOP convention (forward 4 * seq^2 * D * heads * batch / 2, backward 2.5x).
Times are the median of 20 CUDA-event timings after 3 warm-up runs. The GQA row repeats k/v
to 32 heads before timing (the flash backend takes equal head counts).
Runs on the GPU machine's preinstalled torch (2.11 on the machines this was written for; no
network there, so nothing is installed); the heading prints the version that ran. Markdown rows as bench/cuda_bench.h."""
import sys

import torch_timing

try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
except ImportError as e:
    print(f"attention_torch.py: skipped: {e}")
    sys.exit(0)

if not torch.cuda.is_available():
    print("attention_torch.py: skipped: no CUDA device")
    sys.exit(0)


def median_ms(fn, warmup=3, reps=20):
    return torch_timing.median_ms(fn, warmup, reps)


name = torch.cuda.get_device_name(0)
peak = 989.4 if ("H100" in name and "PCIe" not in name) or "H200" in name else 756.5 if "H100" in name else 312.0 if "A100" in name else 0.0
print(f"### PyTorch {torch.__version__} SDPA (flash backend) on {name}\n")
print("| benchmark | ours | unit | baseline | baseline value | ours / baseline |")
print("|---|---|---|---|---|---|")


def row(label, value, unit, base_name, base):
    print(f"| {label} | {value:.3f} | {unit} | {base_name} | {base:.3f} | {value / base if base > 0 else 0:.3f} |", flush=True)


def bench(seq, heads, kv_heads, D=128):
    batch = max(1, 16384 // seq)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    def rnd(h):
        return torch.randn(batch, h, seq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    q, k, v, dout = rnd(heads), rnd(kv_heads), rnd(kv_heads), rnd(heads)
    if kv_heads != heads:
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        with torch.no_grad():
            fwd_ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        bwd_ms = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    flops = 4.0 * seq * seq * D * heads * batch / 2
    tag = f" causal seq {seq} d{D} b{batch} h{heads}/{kv_heads}"
    row("torch sdpa flash fwd" + tag, flops / fwd_ms / 1e9, "TFLOP/s", "spec peak", peak)
    row("torch sdpa flash bwd" + tag, 2.5 * flops / bwd_ms / 1e9, "TFLOP/s", "spec peak", peak)


for seq in (1024, 2048, 4096, 8192):
    bench(seq, 16, 16)
bench(4096, 32, 8)
