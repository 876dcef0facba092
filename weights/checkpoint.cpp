// Opening and saving Hugging Face checkpoint layouts (single file, folder, sharded folder).
#include "weights/checkpoint.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "runtime/json_depth.h"
#include "weights/qwen_params.h"

namespace sqlrl {

namespace fs = std::filesystem;
using json = nlohmann::json;

static constexpr const char* kIndexName = "model.safetensors.index.json";
static constexpr const char* kSingleName = "model.safetensors";

const TensorEntry* Checkpoint::find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &files[it->second.file].tensors[it->second.entry];
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  auto it = tensors.find(name);
  check(it != tensors.end(), path, ": no tensor '", name, "'");
  return files[it->second.file];
}

static std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path, ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

static void add_file(Checkpoint& c, SafetensorsFile file) {
  size_t index = c.files.size();
  for (size_t e = 0; e < file.tensors.size(); ++e) {
    const std::string& name = file.tensors[e].name;
    auto [it, inserted] = c.tensors.emplace(name, TensorLocation{index, e});
    check(inserted, c.path, ": tensor '", name, "' is in both ", c.files.empty() ? file.path : c.files[it->second.file].path,
          " and ", file.path);
  }
  c.files.push_back(std::move(file));
}

// The sharded layout: the index names a shard for every tensor; both directions must agree.
static void open_sharded(Checkpoint& c, const std::string& index_path) {
  const std::string text = read_text(index_path);
  check_json_depth(text, index_path);
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    fail(index_path, ": invalid JSON: ", e.what());
  }
  check(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), index_path,
        ": needs a \"weight_map\" object of tensor name -> shard file");
  std::map<std::string, std::string> weight_map;
  std::set<std::string> shard_names;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it->is_string()) fail(index_path, ": weight_map entry '", it.key(), "' must name a file, got ", it->dump());
    std::string shard = it->get<std::string>();
    check(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(), index_path, ": weight_map entry '",
          it.key(), "' names '", shard, "', which is not a file name in the checkpoint folder");
    weight_map[it.key()] = shard;
    shard_names.insert(shard);
  }
  for (const std::string& shard : shard_names) add_file(c, open_safetensors((fs::path(c.folder) / shard).string()));
  for (const auto& [name, shard] : weight_map) {
    const TensorEntry* entry = c.find(name);
    check(entry != nullptr, index_path, ": tensor '", name, "' is listed in shard ", shard, " but that file lacks it");
    std::string actual = fs::path(c.file_of(name).path).filename().string();
    check(actual == shard, index_path, ": tensor '", name, "' is listed in ", shard, " but found in ", actual);
  }
  for (const auto& [name, location] : c.tensors)
    check(weight_map.count(name) == 1, index_path, ": tensor '", name, "' of ", c.files[location.file].path,
          " is not in weight_map");
  if (index.contains("metadata") && index["metadata"].is_object() && index["metadata"].contains("total_size")) {
    const json& total = index["metadata"]["total_size"];
    uint64_t sum = 0;
    for (const auto& [name, location] : c.tensors) sum += c.files[location.file].tensors[location.entry].nbytes();
    // Informative only: transformers has written total_size with and without shared tensors.
    if (total.is_number_unsigned() && total.get<uint64_t>() != sum)
      std::fprintf(stderr, "warning: %s: metadata.total_size %llu differs from the tensors' %llu bytes\n",
                   index_path.c_str(), static_cast<unsigned long long>(total.get<uint64_t>()),
                   static_cast<unsigned long long>(sum));
  }
}

Checkpoint open_checkpoint(const std::string& path) {
  Checkpoint c;
  c.path = path;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  check(!ec && fs::exists(status), path, ": no such file or folder");
  if (!fs::is_directory(status)) {
    c.folder = fs::path(path).parent_path().string();
    if (c.folder.empty()) c.folder = ".";
    add_file(c, open_safetensors(path));
    return c;
  }
  c.folder = path;
  fs::path folder(path);
  if (fs::exists(folder / kIndexName)) {
    open_sharded(c, (folder / kIndexName).string());
  } else if (fs::exists(folder / kSingleName)) {
    add_file(c, open_safetensors((folder / kSingleName).string()));
  } else {
    // A PEFT adapter folder (a LoRA run's checkpoint) holds no model: say what to do with it.
    if (fs::exists(folder / "adapter_config.json")) {
      std::string base;
      const std::string text = read_text((folder / "adapter_config.json").string());
      const nlohmann::json j = json_too_deep_at(text) == std::string_view::npos
                                   ? nlohmann::json::parse(text, nullptr, false)
                                   : nlohmann::json(nlohmann::json::value_t::discarded);
      if (j.is_object() && j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
        base = j["base_model_name_or_path"].get<std::string>();
      fail(path, ": holds a LoRA adapter (adapter_config.json), not a model: pass its base model as --weights and this "
           "folder as --adapter", base.empty() ? "" : " (its adapter_config.json names the base: " + base + ")");
    }
    std::vector<std::string> found;
    for (const auto& item : fs::directory_iterator(folder))
      if (item.path().extension() == ".safetensors") found.push_back(item.path().string());
    check(found.size() == 1, path, ": expected ", kIndexName, ", ", kSingleName, " or exactly one .safetensors file; found ",
          found.size(), " .safetensors files");
    add_file(c, open_safetensors(found[0]));
  }
  return c;
}

QwenConfig checkpoint_config(const Checkpoint& checkpoint) {
  fs::path config_path = fs::path(checkpoint.folder) / "config.json";
  if (fs::exists(config_path)) return read_config_file(config_path.string());
  return infer_config(checkpoint);
}

// --- saving -------------------------------------------------------------------------------------

static std::string shard_name(size_t k, size_t n) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "model-%05zu-of-%05zu.safetensors", k, n);
  return buffer;
}

static void write_text_tmp(const std::string& tmp, const std::string& text) {
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  check(out.good(), tmp, ": cannot create");
  out << text;
  out.flush();
  check(out.good(), tmp, ": write failed");
}

std::vector<std::string> save_checkpoint(const std::string& folder, const std::vector<TensorRecord>& records,
                                         const std::optional<QwenConfig>& config, const SaveOptions& options) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  check(!ec, folder, ": cannot create folder: ", ec.message());
  check(options.max_shard_bytes > 0, "save_checkpoint: max_shard_bytes must be positive");

  // Greedy sharding in write order, as save_pretrained does over its state dict.
  std::vector<std::vector<size_t>> shards;
  uint64_t shard_bytes = 0, total = 0;
  for (size_t i : write_order(records)) {
    uint64_t bytes = records[i].nbytes();
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += bytes;
    total += bytes;
  }
  if (shards.empty()) shards.emplace_back();

  std::vector<std::pair<std::string, std::string>> pending;  // tmp -> final
  auto remove_pending = [&] {
    for (const auto& p : pending) ::unlink(p.first.c_str());
  };
  try {
    json weight_map = json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      std::string name = shards.size() == 1 ? kSingleName : shard_name(k + 1, shards.size());
      std::vector<TensorRecord> part;
      for (size_t i : shards[k]) {
        part.push_back(records[i]);
        weight_map[records[i].name] = name;
      }
      std::string final_path = (fs::path(folder) / name).string();
      pending.emplace_back(write_safetensors_tmp(final_path, part, options.write), final_path);
    }
    if (shards.size() > 1) {
      json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      std::string final_path = (fs::path(folder) / kIndexName).string();
      write_text_tmp(final_path + ".tmp", index.dump(2) + "\n");
      pending.emplace_back(final_path + ".tmp", final_path);
    }
    if (config) {
      std::string final_path = (fs::path(folder) / "config.json").string();
      write_text_tmp(final_path + ".tmp", config_to_json(*config));
      pending.emplace_back(final_path + ".tmp", final_path);
    }
  } catch (...) {
    remove_pending();
    throw;
  }

  std::vector<std::string> written;
  for (const auto& [tmp, final_path] : pending) {
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
      int err = errno;
      remove_pending();
      fail(final_path, ": cannot rename ", tmp, " into place: ", std::strerror(err));
    }
    written.push_back(final_path);
  }
  // Files of an earlier save in another layout would contradict the new one: remove them.
  std::set<std::string> keep(written.begin(), written.end());
  for (const auto& item : fs::directory_iterator(folder)) {
    std::string name = item.path().filename().string();
    bool weights_file = name == kSingleName || name == kIndexName ||
                        (name.rfind("model-", 0) == 0 && item.path().extension() == ".safetensors");
    if (weights_file && !keep.count(item.path().string())) fs::remove(item.path(), ec);
  }
  return written;
}

}  // namespace sqlrl
