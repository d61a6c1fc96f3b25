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
  auto cfg = runtime::parse_config(text, "fuzz.toml", overrides);
  if (!cfg) {
    TROUPE_FUZZ_EXPECT(!cfg.err().message.empty(), "a rejection without a message");
    return 0;
  }
  const std::string resolved = cfg->to_toml();
  auto again = runtime::parse_config(resolved, "config.toml");
  TROUPE_FUZZ_EXPECT(again.ok(), "the resolved config does not parse again: {}\n{}",
                     again ? std::string{} : again.err().message, resolved);
  TROUPE_FUZZ_EXPECT(again->to_toml() == resolved,
                     "the resolved config changes when read back:\n{}\n--- became ---\n{}",
                     resolved, again->to_toml());
  return 0;
}
