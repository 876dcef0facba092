// `llm_sqlrl merge`: a PEFT LoRA adapter folded into its base checkpoint (W += scale B A, as
// PEFT's merge_and_unload), written as a plain Hugging Face checkpoint that transformers, vLLM
// and every command here load without the adapter.
//   llm_sqlrl merge --weights BASE --adapter DIR --out DIR [--dtype auto|bf16|f32] [--tokenizer PATH]
// --dtype auto (the default) writes the base's own storage dtype: bf16 for a published Qwen
// checkpoint (the size and dtype a server expects of it), f32 for the f32 checkpoints train and
// sft write (so the merge loses nothing the base had). Everything is read and merged before OUT
// is created, and OUT must not exist or be empty, as for `init`.
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "model/lora.h"
#include "model/model.h"
#include "rl/options.h"
#include "rl/run_folder.h"
#include "runtime/error.h"
#include "weights/checkpoint.h"

namespace sqlrl {
namespace {

namespace fs = std::filesystem;

struct MergeArgs {
  std::string weights, adapter, out, tokenizer, dtype = "auto";
};

// The dtype every parameter of the base is stored in (bf16 or f16 when all are), else f32.
DType stored_dtype(const std::string& weights, const QwenModel& model) {
  const Checkpoint checkpoint = open_checkpoint(weights);
  bool all_bf16 = true, all_f16 = true;
  for (const ParamView& view : model.table) {
    const TensorEntry* e = checkpoint.find(view.spec.hf_name);
    check(e != nullptr, weights, ": no tensor '", view.spec.hf_name, "'");
    all_bf16 = all_bf16 && e->dtype == StDType::BF16;
    all_f16 = all_f16 && e->dtype == StDType::F16;
  }
  return all_bf16 ? DType::BF16 : all_f16 ? DType::F16 : DType::F32;
}

void run_merge(const MergeArgs& args) {
  check(args.dtype == "auto" || args.dtype == "bf16" || args.dtype == "f32", "merge: --dtype must be auto, bf16 or f32, got '",
        args.dtype, "'");
  check(!fs::exists(args.out) || (fs::is_directory(args.out) && fs::is_empty(args.out)), "merge: ", args.out,
        " exists and is not an empty folder (remove it or name another --out)");
  check(fs::exists(args.weights), "merge: weights: no such file or folder: ", args.weights);
  const rl::ModelOptions source{args.weights, args.tokenizer};
  const std::string tokenizer = rl::model_tokenizer_path(source);  // checks --tokenizer when given

  QwenModel model = load_model(args.weights);
  const std::unique_ptr<LoraAdapter> adapter = rl::load_adapter_option(args.adapter, model, "merge");
  check(adapter != nullptr, "merge: --adapter is required (a PEFT adapter folder)");
  const DType dtype = args.dtype == "auto" ? stored_dtype(args.weights, model) : parse_dtype(args.dtype);
  merge_adapter(model, *adapter);
  // Base and adapter were checked finite on load; only an overflow of W + scale B A shows up here.
  for (const ParamView& view : model.table)
    check_finite_tensor(args.adapter, view.spec.hf_name + " (merged)", model.params.data() + view.offset,
                        view.spec.numel());

  fs::create_directories(args.out);
  save_model(model, args.out, dtype);
  // The tokenizer's files (chat template included) as a checkpoint of train or sft carries them;
  // generation_config.json is the model's, so the base's wins over a --tokenizer folder's.
  rl::copy_tokenizer_files(tokenizer, args.out);
  const fs::path base_folder = fs::is_directory(args.weights) ? fs::path(args.weights) : fs::path(args.weights).parent_path();
  if (fs::is_regular_file(base_folder / "generation_config.json"))
    fs::copy_file(base_folder / "generation_config.json", fs::path(args.out) / "generation_config.json",
                  fs::copy_options::overwrite_existing);

  std::printf("%s: %s + LoRA %s (r %lld, scale %g, %lld adapter parameters) merged, %s weights%s\n", args.out.c_str(),
              args.weights.c_str(), args.adapter.c_str(), static_cast<long long>(adapter->config.rank),
              static_cast<double>(lora_scale(adapter->config)), static_cast<long long>(adapter->num_params),
              dtype_name(dtype), tokenizer.empty() ? ", no tokenizer (none beside the weights; --tokenizer names one)" : "");
}

}  // namespace

void add_merge_command(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "merge", "Merge a PEFT LoRA adapter into its base checkpoint (W += scale B A) and write a Hugging Face checkpoint");
  cmd->add_option("--weights", args->weights, "the base checkpoint (Hugging Face file or folder) the adapter was trained on")
      ->required();
  cmd->add_option("--adapter", args->adapter, "PEFT adapter folder (adapter_config.json + adapter_model.safetensors)")
      ->required();
  cmd->add_option("--out", args->out,
                  "the checkpoint folder to write: config.json, model.safetensors, and the base's tokenizer files and "
                  "generation_config.json where it has them (must not exist, or be empty)")
      ->required();
  cmd->add_option("--dtype", args->dtype,
                  "auto (the base's stored dtype: bf16 for a published checkpoint, f32 for one train or sft wrote) | "
                  "bf16 | f32")
      ->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json or its folder to copy (default: the weights folder's)");
  cmd->callback([args] { run_merge(*args); });
}

}  // namespace sqlrl
