// Fuzzes the TOML config loader and its schema (runtime/config): any bytes
// as a config file, optionally followed by a NUL and `--set` overrides (one
// per line). Invariants: no crash; an accepted config's resolved TOML (what a
// run folder's config.toml holds, and what --resume reads back) parses again
// to the same config.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

// toml++ 3.3.0 (Debian 12) reaches TOML_UNREACHABLE (undefined behaviour) in
// impl::is_non_ascii_horizontal_whitespace for code points in these ranges
// where it looks for whitespace (outside strings and comments): its lookup
// table has no case for them. An upstream defect, open in troupe too (see
// docs/reliability.md, "What fuzzing found"); skipped here so that the
// target keeps finding other things.
bool hits_toml_unreachable(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 4;
    if (len == 1 || i + len > text.size()) {
      ++i;
      continue;
    }
    uint32_t cp = len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < len; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
    if ((cp >= 0xa1 && cp <= 0x499) || (cp >= 0x2c5e && cp <= 0x3057) ||
        (cp >= 0xfba6 && cp <= 0xfefe))
      return true;
    i += len;
  }
  return false;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  std::string text = input;
  std::vector<std::string> overrides;
  if (auto nul = input.find('\0'); nul != std::string::npos) {
    text = input.substr(0, nul);
    std::string rest = input.substr(nul + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      auto end = rest.find('\n', start);
      if (end == std::string::npos)
        end = rest.size();
      overrides.push_back(rest.substr(start, end - start));
      start = end + 1;
    }
  }
  if (hits_toml_unreachable(input))
    return 0;
  auto cfg = runtime::parse_config(text, "fuzz.toml", overrides);
  if (!cfg) {
    TROUPE_FUZZ_EXPECT(!cfg.err().message.empty(), "a rejection without a message");
    return 0;
  }
  const std::string resolved = cfg->to_toml();
  auto again = runtime::parse_config(resolved, "config.toml");
  TROUPE_FUZZ_EXPECT(again.ok(), "the resolved config does not parse again: {}\n{}",
                     again ? std::string{} : again.err().message, resolved);
  TROUPE_FUZZ_EXPECT(
    again->to_toml() == resolved,
    "the resolved config changes when read back:\n{}\n--- became ---\n{}", resolved,
    again->to_toml());
  return 0;
}
