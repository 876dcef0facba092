// safetensors files: the header parser (parse_safetensors: length prefix, JSON, dtypes, shapes,
// offsets, tiling of the data buffer), then every tensor it accepted as a zero-copy view and as a
// conversion (weights/safetensors.h). The input is the whole file image.
#include <cstring>
#include <memory>

#include "fuzz/fuzz_util.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "weights/safetensors.h"

namespace {

// A MappedFile over a heap copy of the input instead of a file mapping: no file per input, and a
// read past the image's end lands in ASan's redzone (inside a page mapping it would not).
std::shared_ptr<sqlrl::MappedFile> map_bytes(const uint8_t* data, size_t size) {
  uint8_t* copy = new uint8_t[size ? size : 1];
  if (size) std::memcpy(copy, data, size);
  auto release = [copy](sqlrl::MappedFile* map) {
    map->data = nullptr;  // so ~MappedFile does not munmap a heap block
    map->size = 0;
    delete map;
    delete[] copy;
  };
  std::shared_ptr<sqlrl::MappedFile> map(new sqlrl::MappedFile, release);
  map->path = "fuzz.safetensors";
  map->data = copy;
  map->size = size;
  return map;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sqlrl;
  fuzz::expect_ok_or_error([&] {
    SafetensorsFile file = parse_safetensors(map_bytes(data, size));
    for (const TensorEntry& entry : file.tensors) {
      (void)entry.shape_str();
      fuzz::expect_ok_or_error([&] { (void)tensor_view(file, entry); });
      // Floats convert to f32; integer types load only as themselves.
      std::optional<DType> own = st_to_runtime(entry.dtype);
      bool is_float = entry.dtype == StDType::F16 || entry.dtype == StDType::BF16 || entry.dtype == StDType::F32 ||
                      entry.dtype == StDType::F64;
      if (is_float || own)
        fuzz::expect_ok_or_error([&] { (void)load_tensor(file, entry, is_float ? DType::F32 : *own, cpu_device()); });
    }
  });
  return 0;
}
