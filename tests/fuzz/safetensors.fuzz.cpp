// Fuzzes the safetensors reader (learners/safetensors) from memory.
// Invariants: no crash; an accepted file serializes again, and that image
// parses to the same tensors and metadata.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "learners/safetensors.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;
using namespace troupe::learners;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = parse_safetensors(reinterpret_cast<const std::byte*>(data), size, "fuzz");
  if (!file) {
    TROUPE_FUZZ_EXPECT(!file.err().message.empty(), "a rejection without a message");
    return 0;
  }
  for (auto& t : file->tensors)
    TROUPE_FUZZ_EXPECT(t.bytes.size() == t.numel() * element_size(t.dtype),
                       "tensor '{}' holds {} bytes for {} elements", t.name,
                       t.bytes.size(), t.numel());
  auto image = serialize_safetensors(*file);
  TROUPE_FUZZ_EXPECT(image.ok(), "an accepted file does not serialize: {}",
                     image ? std::string{} : image.err().message);
  auto again = parse_safetensors(image->data(), image->size(), "fuzz (rewritten)");
  TROUPE_FUZZ_EXPECT(again.ok(), "a rewritten file does not parse: {}",
                     again ? std::string{} : again.err().message);
  TROUPE_FUZZ_EXPECT(again->metadata == file->metadata, "metadata changed");
  TROUPE_FUZZ_EXPECT(again->tensors.size() == file->tensors.size(),
                     "tensor count changed");
  for (auto& t : file->tensors) {
    auto u = again->find(t.name);
    TROUPE_FUZZ_EXPECT(u != nullptr, "tensor '{}' lost", t.name);
    TROUPE_FUZZ_EXPECT(u->dtype == t.dtype && u->shape == t.shape && u->bytes == t.bytes,
                       "tensor '{}' changed", t.name);
  }
  return 0;
}
