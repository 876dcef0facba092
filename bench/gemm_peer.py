#!/usr/bin/env python3
"""Peer for bench_gemm (run by hand, never by CI): PyTorch CPU f32 matmul GFLOP/s at the same
shapes, same thread count. Pinned: torch==2.9.1 (PyPI wheel; its BLAS is printed).
Usage: python bench/gemm_peer.py [threads]"""
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.set_num_threads(threads)
config = torch.__config__.show()
blas = next((part.strip() for part in config.replace("\n", ",").split(",") if part.strip().startswith("BLAS_INFO=")), "?")
print(f"torch {torch.__version__}, {threads} threads, {blas}")
shapes = [(256, 256, 256, False), (512, 512, 512, False), (1024, 1024, 1024, False), (2048, 2048, 2048, False),
          (256, 1024, 256, True), (512, 151936 // 16, 256, True)]
for m, n, k, trans_b in shapes:
    a = torch.rand(m, k) * 2 - 1
    b = torch.rand(n, k) * 2 - 1 if trans_b else torch.rand(k, n) * 2 - 1
    run = (lambda: a @ b.t()) if trans_b else (lambda: a @ b)
    for _ in range(3):
        run()
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < 0.5:
        run()
        reps += 1
    seconds = (time.perf_counter() - start) / reps
    print(f"M={m} N={n} K={k} transB={int(trans_b)}: {2 * m * n * k / seconds / 1e9:.1f} GFLOP/s")
