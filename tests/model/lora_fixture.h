// The PEFT adapter fixtures of tools/make_lora_fixtures.py (tests/fixtures/lora/<name>): the base
// model they were made on, the adapter, and the batch of their expected.safetensors.
#pragma once
#include <string>

#include "fixture.h"
#include "model/lora.h"

namespace sqlrl::testing {

inline const char* lora_base_of(const std::string& name) {
  return name == "qwen2_untied" ? "qwen2_untied" : "qwen3_tied";
}

struct AdapterFixture {
  ModelFixture f;  // the base model, and the adapter fixture's expected.safetensors
  LoraAdapter adapter;
  std::string dir;
};

inline AdapterFixture load_adapter_fixture(const std::string& name) {
  AdapterFixture a;
  a.dir = fixture_path("lora/" + name);
  a.f.folder = a.dir;
  a.f.model = load_model(fixture_path(std::string("model/") + lora_base_of(name)));
  a.f.expected = open_safetensors(a.dir + "/expected.safetensors");
  a.f.batch.tokens = a.f.ints("tokens");
  a.f.batch.positions = a.f.ints("positions");
  a.f.batch.cu_seqlens = a.f.ints("cu_seqlens");
  a.adapter = load_adapter(a.dir, a.f.model);
  return a;
}

}  // namespace sqlrl::testing
