"""Peer of bench/bench_checkpoint.cpp: PyTorch Distributed Checkpoint (the checkpointing of
torchtitan and of PyTorch FSDP2 trainers) saving the same state on the CPU: the Qwen3-0.6B
tensors (f32, the HF shapes) and two f32 AdamW moments of each, from one process (gloo, world
size 1). Prints, per mode, the seconds the training thread is blocked by the call and the seconds
until the checkpoint is on disk:
  sync   dcp.save(state)                    blocked = the whole write
  async  dcp.async_save(state).result()     blocked = the call (staging a CPU copy), then the write
Usage: python bench/checkpoint_peer.py [DIR] [REPEATS]   (DIR default /tmp/sqlrl_peer_ckpt)
Any torch >= 2.4 (async_save); measured with 2.9.1 (PyPI).
"""
import os
import shutil
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def qwen3_06b_shapes():
    hidden, inter, layers, heads, kv, hd, vocab = 1024, 3072, 28, 16, 8, 128, 151936
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * hd, hidden), p + "self_attn.k_proj.weight": (kv * hd, hidden),
            p + "self_attn.v_proj.weight": (kv * hd, hidden), p + "self_attn.o_proj.weight": (hidden, heads * hd),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        })
    return shapes


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/sqlrl_peer_ckpt"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("gloo", rank=0, world_size=1)
    shapes = qwen3_06b_shapes()
    state = {"model": {}, "optim": {}}
    for name, shape in shapes.items():
        state["model"][name] = torch.full(shape, 1e-3)
        state["optim"][name + ".exp_avg"] = torch.full(shape, 1e-4)
        state["optim"][name + ".exp_avg_sq"] = torch.full(shape, 1e-8)
    params = sum(t.numel() for t in state["model"].values())
    print(f"torch {torch.__version__}, {params / 1e6:.2f}M parameters, {3 * params * 4 / 1e9:.1f} GB of f32 state")
    for mode in ("sync", "async"):
        for r in range(repeats):
            path = os.path.join(root, f"{mode}-{r}")
            shutil.rmtree(path, ignore_errors=True)
            start = time.perf_counter()
            if mode == "sync":
                dcp.save(state, checkpoint_id=path)
                blocked = time.perf_counter() - start
            else:
                future = dcp.async_save(state, checkpoint_id=path)
                blocked = time.perf_counter() - start
                future.result()
            total = time.perf_counter() - start
            print(f"{mode:5s} repeat {r}: blocked {blocked:6.2f} s, on disk after {total:6.2f} s")
            shutil.rmtree(path, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
