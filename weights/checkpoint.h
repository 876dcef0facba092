// Checkpoints as Hugging Face lays them out: one .safetensors file, or a folder with
// config.json and either model.safetensors or model-0000K-of-0000N.safetensors shards listed by
// model.safetensors.index.json. Saving writes the same layout (save_pretrained's shard names,
// index with metadata.total_size and weight_map), all files via tmp + rename.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "weights/config.h"
#include "weights/safetensors.h"

namespace sqlrl {

struct TensorLocation {
  size_t file = 0;   // index into Checkpoint::files
  size_t entry = 0;  // index into files[file].tensors
};

struct Checkpoint {
  std::string path;  // what the user named: a file or a folder
  std::string folder;  // where config.json is looked for
  std::vector<SafetensorsFile> files;
  std::map<std::string, TensorLocation> tensors;  // every tensor of every file, by name

  const TensorEntry* find(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;  // throws if absent
};

// Opens a file or a folder; with an index, every tensor it lists must be in the shard it names
// and every shard tensor must be listed. A name in two files is an error.
Checkpoint open_checkpoint(const std::string& path);

// config.json next to the weights if present; otherwise inferred from tensor shapes (see
// infer_config), with `inferred` saying so.
QwenConfig checkpoint_config(const Checkpoint& checkpoint);

struct SaveOptions {
  // Shard when the tensors exceed this many bytes (transformers' default max_shard_size is 5 GB).
  uint64_t max_shard_bytes = 5'000'000'000;
  WriteOptions write;
};

// Writes config.json (when `config` is given) and the tensors into `folder` (created if
// missing): model.safetensors, or shards plus model.safetensors.index.json. Shards are filled
// in write order, a new one started when the next tensor would pass max_shard_bytes. Nothing is
// renamed into place until every shard is written; on failure no new file is left behind.
// Returns the files written.
std::vector<std::string> save_checkpoint(const std::string& folder, const std::vector<TensorRecord>& records,
                                         const std::optional<QwenConfig>& config, const SaveOptions& options = {});

}  // namespace sqlrl
