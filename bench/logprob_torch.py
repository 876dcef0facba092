#!/usr/bin/env python3
"""PyTorch baselines for bench_ops_cuda, same shapes, same device.

Masked log-prob as RL trainers usually write it: logits = hidden @ W^T materialised (bf16), upcast
to f32, log_softmax, gather the targets; forward alone, and forward + backward with half the
tokens masked. Time is the median of CUDA-event timings after warm-up; memory is
torch.cuda.max_memory_allocated over the measured region (inputs included, as bench_ops_cuda's
figure includes its inputs).

Sampling: softmax(logits / T), top-p by a full sort + cumsum, torch.multinomial: the path
transformers / plain PyTorch samplers take. Rows/s at 64 and 256 rows of 151,936.

Runs on the GPU machine's preinstalled torch (2.11 on the machines this was written for; any
2.x with torch.cuda.Event works); the headings print the version that ran. Prints markdown tables.
"""
import sys

import torch_timing

try:
    import torch
except ImportError:
    print("logprob_torch.py: skipped: torch is not installed")
    sys.exit(0)


def median_ms(fn, warmup=2, reps=10):
    return torch_timing.median_ms(fn, warmup, reps)


def logprob_bench(dev):
    T, V, C = 4096, 151936, 2560
    g = torch.Generator(device=dev).manual_seed(0)
    hidden = (torch.rand(T, C, device=dev, generator=g) * 2 - 1).to(torch.bfloat16)
    weight = ((torch.rand(V, C, device=dev, generator=g) * 2 - 1) * 0.05).to(torch.bfloat16)
    targets = (torch.arange(T, device=dev) * 104729) % V
    mask = (torch.arange(T, device=dev) % 2 == 1).float()

    def forward(h, w):
        logits = (h @ w.t()).float()
        return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)

    print(f"### PyTorch {torch.__version__} masked log-prob, tokens 4096 x vocab 151,936 x hidden 2560 on", torch.cuda.get_device_name(dev))
    print()
    print("| benchmark | time ms | peak memory MB |")
    print("|---|---|---|")
    with torch.no_grad():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        ms = median_ms(lambda: forward(hidden, weight))
        print(f"| torch log_softmax+gather fwd (no grad) | {ms:.3f} | {torch.cuda.max_memory_allocated(dev) / 1e6:.1f} |")

    h = hidden.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)

    def fwd_bwd():
        h.grad = None
        w.grad = None
        loss = (forward(h, w) * mask).sum() / T
        loss.backward()

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(dev)
    ms = median_ms(fwd_bwd)
    print(f"| torch log_softmax+gather fwd+bwd (50% masked) | {ms:.3f} | {torch.cuda.max_memory_allocated(dev) / 1e6:.1f} |")
    print()


def sampling_bench(dev):
    V = 151936
    print(f"### PyTorch {torch.__version__} sampling over 151,936-wide f32 rows on", torch.cuda.get_device_name(dev))
    print()
    print("| benchmark | rows/s |")
    print("|---|---|")
    for rows in (64, 256):
        logits = torch.rand(rows, V, device=dev) * 20 - 10

        def greedy():
            return logits.argmax(dim=-1)

        def plain(t=1.0):
            return torch.multinomial(torch.softmax(logits / t, dim=-1), 1)

        def top_p(t=0.6, p=0.95):
            probs = torch.softmax(logits / t, dim=-1)
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            cumulative = sorted_probs.cumsum(dim=-1)
            sorted_probs[(cumulative - sorted_probs) >= p] = 0
            choice = torch.multinomial(sorted_probs, 1)
            return order.gather(-1, choice)

        def top_k(k=50):
            values, order = logits.topk(k, dim=-1)
            return order.gather(-1, torch.multinomial(torch.softmax(values, dim=-1), 1))

        for name, fn in (("greedy", greedy), ("T=1", plain), ("T=0.6 top-p 0.95", top_p), ("top-k 50", top_k)):
            ms = median_ms(fn, warmup=3, reps=20)
            print(f"| torch sample {rows} rows {name} | {rows / (ms * 1e-3):.1f} |")
    print()


def main():
    if not torch.cuda.is_available():
        print("logprob_torch.py: skipped: no CUDA device")
        return
    dev = torch.device("cuda:0")
    logprob_bench(dev)
    torch.cuda.empty_cache()
    sampling_bench(dev)


if __name__ == "__main__":
    main()
