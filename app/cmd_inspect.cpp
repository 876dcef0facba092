// `llm_sqlrl inspect PATH`: the config (read or inferred) and every tensor of a safetensors file
// or checkpoint folder, checked against the Qwen parameter list. `--resave DIR` loads the
// weights and writes them back with our writer; a file that is not a Qwen checkpoint is copied
// tensor by tensor in its stored dtypes (tools/make_weight_fixtures.py checks both outputs
// against safetensors and transformers).
#include <cstdio>
#include <filesystem>
#include <map>

#include "app/commands.h"
#include "weights/checkpoint.h"
#include "weights/qwen_params.h"

namespace sqlrl {

static void print_tensor_table(const Checkpoint& checkpoint) {
  size_t width = 4;
  for (const auto& [name, location] : checkpoint.tensors) width = std::max(width, name.size());
  std::printf("%-*s  %-5s  %-16s  %12s\n", static_cast<int>(width), "name", "dtype", "shape", "bytes");
  uint64_t elements = 0, bytes = 0;
  for (const auto& [name, location] : checkpoint.tensors) {
    const TensorEntry& e = checkpoint.files[location.file].tensors[location.entry];
    std::printf("%-*s  %-5s  %-16s  %12llu\n", static_cast<int>(width), name.c_str(), st_dtype_name(e.dtype),
                e.shape_str().c_str(), static_cast<unsigned long long>(e.nbytes()));
    elements += static_cast<uint64_t>(e.numel());
    bytes += e.nbytes();
  }
  std::printf("tensors: %zu in %zu file(s), %llu elements, %llu bytes\n", checkpoint.tensors.size(), checkpoint.files.size(),
              static_cast<unsigned long long>(elements), static_cast<unsigned long long>(bytes));
}

// Not a Qwen checkpoint: copy every tensor as stored (any dtype) into DIR/model.safetensors.
static void resave_raw(const Checkpoint& checkpoint, const std::string& folder) {
  std::vector<TensorRecord> records;
  for (const auto& [name, location] : checkpoint.tensors) {
    const SafetensorsFile& f = checkpoint.files[location.file];
    const TensorEntry& e = f.tensors[location.entry];
    records.push_back({name, e.dtype, e.shape, f.bytes(e)});
  }
  WriteOptions options;
  if (checkpoint.files.size() == 1) options.metadata = checkpoint.files[0].metadata;
  std::filesystem::create_directories(folder);
  std::string path = (std::filesystem::path(folder) / "model.safetensors").string();
  write_safetensors(path, records, options);
  std::printf("wrote %s\n", path.c_str());
}

void add_inspect_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("inspect", "Print the config and tensors of a safetensors file or checkpoint folder");
  auto path = std::make_shared<std::string>();
  auto resave = std::make_shared<std::string>();
  auto shard_mb = std::make_shared<double>(5000.0);
  auto dtype_name_arg = std::make_shared<std::string>("f32");
  cmd->add_option("path", *path, "model.safetensors, a merged .safetensors file, or a checkpoint folder")->required();
  cmd->add_option("--resave", *resave, "load the Qwen weights and save them (config.json + safetensors) into this folder");
  cmd->add_option("--max-shard-mb", *shard_mb, "with --resave: shard size limit in MB (10^6 bytes)");
  cmd->add_option("--dtype", *dtype_name_arg, "with --resave: f32, bf16 or f16");
  cmd->callback([=] {
    Checkpoint checkpoint = open_checkpoint(*path);
    std::printf("path: %s\n", path->c_str());
    for (const SafetensorsFile& f : checkpoint.files) {
      std::printf("file: %s (%zu tensors, header %llu bytes)", f.path.c_str(), f.tensors.size(),
                  static_cast<unsigned long long>(f.header_bytes));
      for (const auto& [key, value] : f.metadata) std::printf(" %s=%s", key.c_str(), value.c_str());
      std::printf("\n");
    }
    std::optional<QwenConfig> config;
    std::string config_error;
    try {
      config = checkpoint_config(checkpoint);
    } catch (const Error& e) {
      config_error = e.what();
    }
    if (config) std::printf("\n%s", describe_config(*config).c_str());
    else std::printf("\nconfig: none (%s)\n", config_error.c_str());
    std::printf("\n");
    print_tensor_table(checkpoint);
    if (!config) {
      if (!resave->empty()) resave_raw(checkpoint, *resave);
      return;
    }
    std::vector<ParamSpec> specs = qwen_parameters(*config);
    CheckReport report = check_checkpoint(checkpoint, specs, *config);
    std::printf("parameters: %lld (%s)\n", static_cast<long long>(count_parameters(specs)),
                config->tie_word_embeddings ? "embeddings tied to lm_head" : "separate lm_head");
    if (!report.ok()) fail(checkpoint.path, ": does not match its config:\n", report.str());
    std::printf("check: all %zu parameters present with the expected shapes%s\n", specs.size(),
                report.ignored.empty() ? "" : " (ignored tensors listed below)");
    std::printf("%s", report.str().c_str());

    if (!resave->empty()) {
      DType dtype = parse_dtype(*dtype_name_arg);
      std::vector<LoadedParam> params = load_qwen_weights(checkpoint, *config, dtype, cpu_device());
      std::vector<Tensor> holder;
      QwenConfig saved = *config;
      saved.torch_dtype = dtype == DType::F32 ? "float32" : dtype == DType::BF16 ? "bfloat16" : "float16";
      saved.inferred.clear();
      SaveOptions options;
      check(*shard_mb > 0, "--max-shard-mb must be positive");
      options.max_shard_bytes = static_cast<uint64_t>(*shard_mb * 1e6);
      for (const std::string& f : save_checkpoint(*resave, records_of(params, holder), saved, options))
        std::printf("wrote %s\n", f.c_str());
    }
  });
}

}  // namespace sqlrl
