#!/usr/bin/env python3
"""Golden fixtures for weights/ (safetensors reader/writer, HF checkpoints), made by the
reference implementations, plus the interop check of our writer.

Pinned (Python 3.11, PyPI):  torch==2.9.1  transformers==4.57.6  safetensors==0.7.0  numpy==2.3.5

    python3 -m venv .venv-fixtures
    .venv-fixtures/bin/pip install torch==2.9.1 transformers==4.57.6 safetensors==0.7.0 numpy==2.3.5
    .venv-fixtures/bin/python tools/make_weight_fixtures.py --binary build-weights/llm_sqlrl

Writes tests/fixtures/weights/:
  st_all_dtypes.safetensors + .json   safetensors.torch.save_file: one tensor per dtype (BOOL U8 I8
                                      I16 I32 I64 F16 BF16 F32 F64), a scalar, an empty and a 5-D
                                      tensor; the .json lists every value exactly.
  qwen3_tiny/          Qwen3ForCausalLM.save_pretrained, bf16, tied embeddings (single file)
  qwen3_bias_sharded/  Qwen3 with attention_bias, untied, f32, max_shard_size=200KB (index + shards)
  qwen2_tiny/          Qwen2ForCausalLM (q/k/v biases), untied, f32 (single file)
  <model>/expected.json  per tensor: dtype, shape, float64 sum, sum of |x|, first 8 values
  README.md            what was made and what was verified

Then, with --binary, checks our writer: `llm_sqlrl inspect X --resave DIR` loads each fixture
and saves it with weights/safetensors_write.cpp; the result must open in `safetensors` with
bit-identical tensors and, for models, load with transformers' from_pretrained giving the same
state dict and the same logits as the original model. The outcome is recorded in README.md.
The build and the tests never run this script; its outputs are committed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "weights")


def values_of(t):
    """Exact values as JSON numbers: floats through float64 (bf16/f16/f32 are exact in it)."""
    if t.dtype == torch.bool:
        return t.to(torch.int64).flatten().tolist()
    if t.dtype.is_floating_point:
        return t.to(torch.float64).flatten().tolist()
    return t.to(torch.int64).flatten().tolist()


ST_NAME = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
           torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
           torch.float64: "F64"}


def make_all_dtypes():
    g = torch.Generator().manual_seed(3)
    base = torch.randn(3, 5, generator=g, dtype=torch.float64) * 100
    tensors = {
        "bool": torch.tensor([[True, False, True], [False, False, True]]),
        "u8": torch.tensor([0, 1, 127, 128, 255], dtype=torch.uint8),
        "i8": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
        "i16": torch.tensor([[-32768, -2], [3, 32767]], dtype=torch.int16),
        "i32": torch.tensor([-2147483648, -7, 0, 9, 2147483647], dtype=torch.int32),
        "i64": torch.tensor([-(2**63), -5, 0, 11, 2**63 - 1], dtype=torch.int64),
        # f16: a subnormal (2^-24), the largest finite value, a negative fraction.
        "f16": torch.cat([base.flatten()[:6], torch.tensor([2.0**-24, 65504.0, -0.3330078125],
                                                             dtype=torch.float64)]).to(torch.float16),
        "bf16": base.to(torch.bfloat16),
        "f32": base.to(torch.float32),
        "f64": base.clone(),
        "scalar_f32": torch.tensor(1.5, dtype=torch.float32),
        "empty_f32": torch.zeros(0, 3, dtype=torch.float32),
        "five_dims_u8": torch.arange(6, dtype=torch.uint8).reshape(1, 1, 1, 2, 3),
    }
    path = os.path.join(OUT, "st_all_dtypes.safetensors")
    save_file(tensors, path, metadata={"format": "pt", "made_by": "safetensors " + safetensors.__version__})
    expected = {name: {"dtype": ST_NAME[t.dtype], "shape": list(t.shape), "values": values_of(t)}
                for name, t in tensors.items()}
    with open(os.path.join(OUT, "st_all_dtypes.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    return tensors


def tiny_config(arch, **overrides):
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-6, rope_theta=1000000.0, bos_token_id=1, eos_token_id=2)
    common.update(overrides)
    if arch == "qwen3":
        return transformers.Qwen3Config(head_dim=16, **common)
    return transformers.Qwen2Config(**common)


MODELS = {
    # name: (arch, config overrides, dtype, max_shard_size)
    "qwen3_tiny": ("qwen3", dict(tie_word_embeddings=True), torch.bfloat16, "5GB"),
    "qwen3_bias_sharded": ("qwen3", dict(tie_word_embeddings=False, attention_bias=True), torch.float32, "200KB"),
    "qwen2_tiny": ("qwen2", dict(tie_word_embeddings=False), torch.float32, "5GB"),
}


def build_model(name):
    arch, overrides, dtype, _ = MODELS[name]
    torch.manual_seed({"qwen3_tiny": 11, "qwen3_bias_sharded": 12, "qwen2_tiny": 13}[name])
    config = tiny_config(arch, **overrides)
    cls = transformers.Qwen3ForCausalLM if arch == "qwen3" else transformers.Qwen2ForCausalLM
    model = cls(config)
    # Default init leaves norms at 1 and biases at 0: randomise them so a mix-up shows.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight") or pname.endswith(".bias"):
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if pname.endswith("norm.weight") else 0.0))
    return model.to(dtype).eval()


def tensor_summary(sd):
    out = {}
    for k, v in sd.items():
        x = v.to(torch.float64).flatten()
        out[k] = {"dtype": ST_NAME[v.dtype], "shape": list(v.shape), "sum": float(x.sum()),
                  "abs_sum": float(x.abs().sum()), "first": x[:8].tolist()}
    return out


def make_models():
    made = {}
    for name, (_, _, _, shard) in MODELS.items():
        model = build_model(name)
        folder = os.path.join(OUT, name)
        shutil.rmtree(folder, ignore_errors=True)
        model.save_pretrained(folder, safe_serialization=True, max_shard_size=shard)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(folder, extra)):
                os.remove(os.path.join(folder, extra))
        # What is on disk (tied lm_head absent), read back by the reference reader.
        on_disk = {}
        for fname in sorted(os.listdir(folder)):
            if fname.endswith(".safetensors"):
                with safe_open(os.path.join(folder, fname), framework="pt") as f:
                    for k in f.keys():
                        on_disk[k] = f.get_tensor(k)
        with open(os.path.join(folder, "expected.json"), "w") as f:
            json.dump(tensor_summary(on_disk), f, indent=1, sort_keys=True)
            f.write("\n")
        made[name] = model
    return made


def verify_writer(binary, originals, models):
    lines = []
    work = tempfile.mkdtemp(prefix="sqlrl_weights_")
    try:
        # 1. Every dtype, re-saved raw by our writer, read by the safetensors package.
        out_dir = os.path.join(work, "all_dtypes")
        subprocess.run([binary, "inspect", os.path.join(OUT, "st_all_dtypes.safetensors"), "--resave", out_dir],
                       check=True, stdout=subprocess.DEVNULL)
        with safe_open(os.path.join(out_dir, "model.safetensors"), framework="pt") as f:
            keys = set(f.keys())
            assert keys == set(originals), (keys, set(originals))
            for k in keys:
                got = f.get_tensor(k)
                assert got.dtype == originals[k].dtype and torch.equal(got, originals[k]), k
            meta = f.metadata()
        lines.append(f"- our writer's copy of st_all_dtypes.safetensors ({len(keys)} tensors, 10 dtypes) opens in "
                     f"safetensors {safetensors.__version__}; every tensor bit-identical; metadata {meta}")
        # 2. Models: resave (bf16 stays bf16, f32 stays f32; the sharded one re-sharded by us).
        ids = torch.tensor([[1, 17, 42, 99, 200, 255, 3, 64]])
        for name, model in models.items():
            dtype = {torch.bfloat16: "bf16", torch.float32: "f32"}[MODELS[name][2]]
            out_dir = os.path.join(work, name)
            cmd = [binary, "inspect", os.path.join(OUT, name), "--resave", out_dir, "--dtype", dtype]
            if name == "qwen3_bias_sharded":
                cmd += ["--max-shard-mb", "0.15"]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            files = sorted(os.listdir(out_dir))
            for fname in files:
                if fname.endswith(".safetensors"):
                    with safe_open(os.path.join(out_dir, fname), framework="pt") as f:
                        assert f.metadata() == {"format": "pt"}, f.metadata()
            # Both through from_pretrained, so both run the same attention implementation.
            cls = type(model)
            reference = cls.from_pretrained(os.path.join(OUT, name), dtype=MODELS[name][2]).eval()
            loaded = cls.from_pretrained(out_dir, dtype=MODELS[name][2]).eval()
            ref_sd, got_sd = model.state_dict(), loaded.state_dict()
            assert set(ref_sd) == set(got_sd)
            for k in ref_sd:
                assert torch.equal(ref_sd[k], got_sd[k]), k
            with torch.no_grad():
                same_logits = torch.equal(reference(ids).logits, loaded(ids).logits)
            assert same_logits, name
            lines.append(f"- {name}: `llm_sqlrl inspect --resave` wrote {', '.join(files)}; "
                         f"transformers {transformers.__version__} from_pretrained loads it: state dict bit-identical "
                         f"to the original model's, logits on 8 tokens bit-identical to from_pretrained of the fixture")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lines


def write_readme(verified):
    text = f"""# weights fixtures

Made by `tools/make_weight_fixtures.py` with torch {torch.__version__}, transformers {transformers.__version__},
safetensors {safetensors.__version__}, numpy {np.__version__} (Python {sys.version.split()[0]}).

| file | made by | contents |
|---|---|---|
| st_all_dtypes.safetensors | safetensors.torch.save_file | BOOL U8 I8 I16 I32 I64 F16 BF16 F32 F64 tensors, a scalar, an empty [0, 3] and a 5-D tensor; metadata format=pt |
| st_all_dtypes.json | same script | every value of every tensor (floats exactly, via float64) |
| qwen3_tiny/ | Qwen3ForCausalLM.save_pretrained | bf16, vocab 256, hidden 64, 2 layers, 4/2 heads, head_dim 16, tied embeddings (no lm_head.weight) |
| qwen3_bias_sharded/ | same, max_shard_size=200KB | f32, attention_bias=true (q/k/v/o biases), untied; index + shards |
| qwen2_tiny/ | Qwen2ForCausalLM.save_pretrained | f32, q/k/v biases, untied |
| */expected.json | same script, read back with safe_open | per tensor: dtype, shape, float64 sum, sum of abs, first 8 values |

Norm weights and biases are randomised (transformers initialises them to 1 and 0).

## Verified (our writer, read by the reference implementations)

"""
    text += "\n".join(verified) if verified else "- not run (no --binary given)"
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(text + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", help="built llm_sqlrl, to verify our writer against safetensors/transformers")
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    originals = make_all_dtypes()
    models = make_models()
    verified = verify_writer(os.path.abspath(args.binary), originals, models) if args.binary else []
    write_readme(verified)
    for line in verified:
        print(line)


if __name__ == "__main__":
    main()
