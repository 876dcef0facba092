#!/usr/bin/env python3
"""Golden fixtures for model/lora (LoRA adapters in PEFT's format), made by Hugging Face PEFT on the
CPU.

Pinned (Python 3.11, PyPI):  torch==2.9.1  transformers==4.57.6  safetensors==0.7.0  numpy==2.3.5
                             peft==0.17.1

    .venv-fixtures/bin/python tools/make_lora_fixtures.py [--resaved DIR] [--merged DIR]

The base models are the random checkpoints of tests/fixtures/model (tools/make_model_fixtures.py),
loaded from there, not copied. Writes tests/fixtures/lora/<name>/ for
  qwen3_tied         on model/qwen3_tied: r 4, lora_alpha 8, all seven projections (scale 2)
  qwen2_untied       on model/qwen2_untied (q/k/v biases, untied lm_head): the same
  qwen3_tied_rslora  on model/qwen3_tied: r 8, lora_alpha 16, use_rslora, q_proj and v_proj only
                     (scale alpha / sqrt(r) = 5.657, where alpha / r would give 2)
each holding
  adapter_config.json,        PEFT's save_pretrained of get_peft_model(base, LoraConfig(...)) with
  adapter_model.safetensors   every lora_A and lora_B set to 0.1 N(0, 1) rounded to bf16 (stored
                              as f32: both sides start from identical numbers; PEFT's own init
                              has B = 0, which would hide the adapter)
  expected.safetensors        tokens, positions, cu_seqlens (I32): the base fixture's packed batch
                              of three sequences;
                              logits [T, vocab] (F32) of base + adapter, unmerged, and
                              merged_logits [T, vocab] (F32) after merge_and_unload(), both
                              computed in float64 (model.double()), one sequence at a time.
The script asserts that PEFT's merged and unmerged float64 logits agree (1e-12 of the largest
logit) and that the adapter moves the logits by more than 5% of the largest one, so a C++ check
within 1e-4 cannot pass with the adapter dropped or mis-scaled.

PYTHONHASHSEED is fixed (the script re-executes itself) because PEFT keeps target_modules in a
set and writes it in iteration order: the files then come out the same on every run.
PEFT's save_pretrained also writes a README.md model card; it is removed (tests/fixtures/lora/
README.md says how the files were made).

With --resaved DIR, checks the C++ writer: DIR/<name> must hold the adapter of fixture <name> as
model/lora's save_adapter wrote it (the test LoraFixture.SaveLoadRoundTripsBitExactly writes them
there when SQLRL_LORA_RESAVE_DIR=DIR is set), and DIR/init_qwen3_tied a fresh init_adapter. PEFT
must load each: the resaved ones give logits identical (torch.equal) to the fixture's adapter; the
fresh one has lora_B = 0, lora_A within PEFT's kaiming bound 1 / sqrt(in_features), and gives the
base model's logits.
With --merged DIR, checks `llm_sqlrl merge`: DIR/<name>-f32 and DIR/<name>-bf16 must hold its output
for fixtures qwen3_tied and qwen2_untied (`llm_sqlrl merge --weights tests/fixtures/model/<name>
--adapter tests/fixtures/lora/<name> --out DIR/<name>-<dtype> --dtype <dtype>`). transformers must
load each in its stored dtype; every f32 tensor must equal PEFT's float32 merge_and_unload() within
1e-6 of the tensor's largest value, every bf16 tensor PEFT's merge rounded to bf16 within one bf16
step; the f32 checkpoint's float64 logits must match merged_logits within 1e-6 of the largest logit.
The bf16 checkpoint's logit error (the bf16 rounding of the weights) is printed beside that of
PEFT's own merge cast to bf16.
With --trained DIR, makes tests/fixtures/lora/trained_qwen3_tied from an adapter TRAINED by this
project (DIR holds what the test SftLora.AnAdapterTrainedHereGivesPeftsLogits saved there when run
with SQLRL_LORA_TRAINED_DIR=DIR: a rank-4 adapter on model/qwen3_tied after 6 SFT updates): the
adapter's two files copied as they are, and expected.safetensors with the base fixture's batch and
PEFT's float64 logits of base + that adapter (PeftModel.from_pretrained), which the test compares
with its own. The script asserts the adapter moves the logits by more than 1% of the largest one.
The build and the tests never run this script; its outputs are committed.
"""
import argparse
import copy
import json
import os
import shutil
import sys

if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402
import transformers  # noqa: E402
import peft  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

assert torch.__version__.startswith("2.9.1"), torch.__version__
assert transformers.__version__ == "4.57.6", transformers.__version__
assert peft.__version__ == "0.17.1", peft.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join("tests", "fixtures", "lora")
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# name -> (base fixture, LoraConfig arguments, seed)
FIXTURES = {
    "qwen3_tied": ("qwen3_tied", dict(r=4, lora_alpha=8, target_modules=ALL), 11),
    "qwen2_untied": ("qwen2_untied", dict(r=4, lora_alpha=8, target_modules=ALL), 22),
    "qwen3_tied_rslora": ("qwen3_tied", dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], use_rslora=True), 33),
}


def base_path(base):
    # Relative (the script runs from the repository root): PEFT writes it into adapter_config.json
    # as base_model_name_or_path, which must not depend on where the repository is.
    return os.path.join("tests", "fixtures", "model", base)


def load_base(base):
    return transformers.AutoModelForCausalLM.from_pretrained(base_path(base), torch_dtype=torch.float32).eval()


def batch_of(base):
    e = load_file(os.path.join(base_path(base), "expected.safetensors"))
    return e["tokens"], e["positions"], e["cu_seqlens"]


def logits_of(model, tokens, cu):
    out = []
    with torch.no_grad():
        for s in range(len(cu) - 1):
            out.append(model(tokens[cu[s]:cu[s + 1]].long()[None]).logits[0])
    return torch.cat(out)


def make_fixture(name):
    base, args, seed = FIXTURES[name]
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    config = peft.LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **args)
    model = peft.get_peft_model(load_base(base), config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "lora_" in pname:
                p.copy_((0.1 * torch.randn_like(p)).to(torch.bfloat16).float())
    model.save_pretrained(folder)
    os.remove(os.path.join(folder, "README.md"))

    # Fresh objects from the files, as any user of the adapter would get them.
    tokens, positions, cu = batch_of(base)
    plain = load_base(base).double()
    base_logits = logits_of(plain, tokens, cu)
    adapted = peft.PeftModel.from_pretrained(load_base(base), folder).double().eval()
    logits = logits_of(adapted, tokens, cu)
    merged = adapted.merge_and_unload()
    merged_logits = logits_of(merged, tokens, cu)
    scale = logits.abs().max().item()
    merge_gap = (merged_logits - logits).abs().max().item() / scale
    moved = (logits - base_logits).abs().max().item() / scale
    assert merge_gap < 1e-12, f"{name}: PEFT's merged and unmerged logits differ by {merge_gap}"
    assert moved > 0.05, f"{name}: the adapter moves the logits by only {moved} of the largest"
    save_file({"tokens": tokens, "positions": positions, "cu_seqlens": cu, "logits": logits.float(),
               "merged_logits": merged_logits.float()},
              os.path.join(folder, "expected.safetensors"), metadata={"format": "pt"})
    n = sum(p.numel() for k, p in load_file(os.path.join(folder, "adapter_model.safetensors")).items())
    print(f"{name}: {n} adapter parameters, scaling {model.base_model.model.model.layers[0].self_attn.q_proj.scaling}, "
          f"logits moved {moved:.3f} of max |logit|, merged vs unmerged {merge_gap:.2e}")


def verify_resaved(directory):
    for name, (base, args, _) in FIXTURES.items():
        ours = os.path.join(directory, name)
        tokens, _, cu = batch_of(base)
        want = logits_of(peft.PeftModel.from_pretrained(load_base(base), os.path.join(OUT, name)).double().eval(), tokens, cu)
        got_model = peft.PeftModel.from_pretrained(load_base(base), ours).double().eval()
        got = logits_of(got_model, tokens, cu)
        assert torch.equal(got, want), f"{name}: the adapter saved by save_adapter gives other logits"
        cfg = got_model.peft_config["default"]
        assert (cfg.r, cfg.lora_alpha, cfg.use_rslora, set(cfg.target_modules)) == \
            (args["r"], args["lora_alpha"], args.get("use_rslora", False), set(args["target_modules"])), cfg
        print(f"{name}: resaved by save_adapter -> PEFT loads it, logits identical, config {cfg.r=} {cfg.lora_alpha=}")
    fresh_dir = os.path.join(directory, "init_qwen3_tied")
    tokens, _, cu = batch_of("qwen3_tied")
    fresh = peft.PeftModel.from_pretrained(load_base("qwen3_tied"), fresh_dir).double().eval()
    for pname, p in fresh.named_parameters():
        if "lora_B" in pname:
            assert torch.count_nonzero(p) == 0, pname
        elif "lora_A" in pname:
            bound = 1 / p.shape[1] ** 0.5
            assert p.abs().max() <= bound and p.abs().max() > 0.9 * bound, (pname, p.abs().max(), bound)
    assert torch.equal(logits_of(fresh, tokens, cu), logits_of(load_base("qwen3_tied").double(), tokens, cu))
    with open(os.path.join(fresh_dir, "adapter_config.json")) as f:
        print(f"init_qwen3_tied: PEFT loads it, B = 0, A within 1/sqrt(in), base logits; config {json.load(f)}")


def verify_merged(directory):
    for name in ("qwen3_tied", "qwen2_untied"):
        base = FIXTURES[name][0]
        tokens, _, cu = batch_of(base)
        want = load_file(os.path.join(OUT, name, "expected.safetensors"))["merged_logits"].double()
        scale = want.abs().max().item()
        peft_merged = peft.PeftModel.from_pretrained(load_base(base), os.path.join(OUT, name)).merge_and_unload().eval()
        ref = peft_merged.state_dict()
        for dtype, torch_dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(directory, f"{name}-{dtype}"),
                                                                      torch_dtype="auto").eval()
            assert model.dtype == torch_dtype, (name, dtype, model.dtype)
            state = model.state_dict()
            assert set(state) == set(ref), set(state) ^ set(ref)
            worst, differing = 0.0, 0
            for k, p in state.items():
                r = ref[k].to(torch_dtype)
                if dtype == "f32":
                    worst = max(worst, ((p - r).abs().max() / r.abs().max()).item())
                else:
                    # One bf16 step (8 significant bits) of the value: a rounding boundary that the two
                    # f32 merges, summed in another order, land on either side of.
                    step = torch.ldexp(torch.ones_like(r, dtype=torch.float32), torch.frexp(r.float()).exponent - 8)
                    assert ((p.float() - r.float()).abs() <= step).all(), k
                    differing += int((p != r).sum())
            if dtype == "f32":
                assert worst <= 1e-6, (name, worst)
            err = ((logits_of(model.double(), tokens, cu) - want).abs().max() / scale).item()
            peft_cast = copy.deepcopy(peft_merged).to(torch_dtype).double()  # .to() converts in place
            peft_err = ((logits_of(peft_cast, tokens, cu) - want).abs().max() / scale).item()
            if dtype == "f32":
                assert err <= 1e-6, (name, err)
                print(f"{name}-f32: transformers loads it (float32); tensors vs PEFT's merge_and_unload within "
                      f"{worst:.3g} of each tensor's largest value; float64 logits vs merged_logits {err:.3g}")
            else:
                print(f"{name}-bf16: transformers loads it (bfloat16); {differing} elements one bf16 step from PEFT's "
                      f"merge cast to bf16, the rest equal; logits vs merged_logits {err:.3g} "
                      f"(PEFT's merge cast by .to(bfloat16), which also rounds the rotary inv_freq buffer "
                      f"from_pretrained keeps in f32: {peft_err:.3g})")


def make_trained_fixture(directory):
    folder = os.path.join(OUT, "trained_qwen3_tied")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(os.path.join(directory, f), os.path.join(folder, f))
    tokens, positions, cu = batch_of("qwen3_tied")
    base_logits = logits_of(load_base("qwen3_tied").double(), tokens, cu)
    adapted = peft.PeftModel.from_pretrained(load_base("qwen3_tied"), folder).double().eval()
    cfg = adapted.peft_config["default"]
    logits = logits_of(adapted, tokens, cu)
    moved = ((logits - base_logits).abs().max() / logits.abs().max()).item()
    assert moved > 0.01, f"the trained adapter moves the logits by only {moved} of the largest"
    save_file({"tokens": tokens, "positions": positions, "cu_seqlens": cu, "logits": logits.float()},
              os.path.join(folder, "expected.safetensors"), metadata={"format": "pt"})
    print(f"trained_qwen3_tied: PEFT loads the adapter trained by llm_sqlrl (r {cfg.r}, lora_alpha {cfg.lora_alpha}, "
          f"target_modules {sorted(cfg.target_modules) if not isinstance(cfg.target_modules, str) else cfg.target_modules}); "
          f"it moves the logits by {moved:.3g} of the largest")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--resaved", help="folder of adapters written by model/lora's save_adapter to check")
    parser.add_argument("--merged", help="folder of checkpoints written by llm_sqlrl merge to check")
    parser.add_argument("--trained", help="folder of an adapter trained by the C++ test, made into a fixture")
    args = parser.parse_args()
    torch.set_num_threads(2)
    resaved = os.path.abspath(args.resaved) if args.resaved else None
    merged = os.path.abspath(args.merged) if args.merged else None
    trained = os.path.abspath(args.trained) if args.trained else None
    os.chdir(ROOT)
    if trained:
        make_trained_fixture(trained)
        return 0
    if resaved:
        verify_resaved(resaved)
    if merged:
        verify_merged(merged)
    if resaved or merged:
        return 0
    for name in FIXTURES:
        make_fixture(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
