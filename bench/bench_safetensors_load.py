#!/usr/bin/env python3
"""Peer for bench_safetensors_load.cpp: the `safetensors` package loading the same layout
(32 bf16 tensors of [4096, 8192], 2 GiB) from a temp folder, deleted afterwards.

Pinned (Python 3.11, PyPI): torch==2.9.1 safetensors==0.7.0  (the .venv-fixtures environment)
    .venv-fixtures/bin/python bench/bench_safetensors_load.py
Prints GB/s (10^9 bytes of file per second) for: load_file (bf16 tensors), load_file + .float()
(warm page cache, best of 4), and load_file + .float() after posix_fadvise DONTNEED (cold).
"""
import os
import shutil
import tempfile
import time

import torch
from safetensors.torch import load_file, save_file


def main():
    torch.set_num_threads(os.cpu_count())
    folder = tempfile.mkdtemp(prefix="sqlrl_bench_st_py_")
    path = os.path.join(folder, "model.safetensors")
    try:
        blob = ((torch.arange(4096 * 8192) % 65521).float() * 1e-3 - 30.0).to(torch.bfloat16).reshape(4096, 8192)
        save_file({f"model.layers.{t}.mlp.up_proj.weight": blob.clone() for t in range(32)}, path,
                  metadata={"format": "pt"})
        del blob
        size = os.path.getsize(path)

        def drop_cache():
            fd = os.open(path, os.O_RDONLY)
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)

        def timed(fn, cold, runs):
            best = float("inf")
            for _ in range(runs):
                if cold:
                    drop_cache()
                t0 = time.perf_counter()
                out = fn()
                best = min(best, time.perf_counter() - t0)
                del out
            return size / best / 1e9

        load_file(path)  # warm the page cache
        print(f"file {size / 1e9:.3f} GB, torch {torch.__version__}, {torch.get_num_threads()} threads")
        print(f"load_file bf16            : {timed(lambda: load_file(path), False, 4):.2f} GB/s")
        print(f"load_file + .float()      : {timed(lambda: {k: v.float() for k, v in load_file(path).items()}, False, 4):.2f} GB/s")
        print(f"load_file + .float() cold : {timed(lambda: {k: v.float() for k, v in load_file(path).items()}, True, 3):.2f} GB/s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
