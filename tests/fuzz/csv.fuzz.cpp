// Fuzzes the CSV reader (runtime/cli/csv), which reads from a path. Invariants:
// no crash; an accepted file gives rows x width finite float32 values, and
// reading it in small batches gives the same values as reading it whole.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cli/csv.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;
using namespace troupe::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::scratch_file file("csv");
  const auto& path = file.write(data, size);
  auto table = read_csv(path);
  if (!table) {
    TROUPE_FUZZ_EXPECT(!table.err().message.empty(), "a rejection without a message");
    return 0;
  }
  TROUPE_FUZZ_EXPECT(table->width >= 1 && table->rows >= 1, "an accepted file of {} x {}",
                     table->rows, table->width);
  TROUPE_FUZZ_EXPECT(table->values.size() == table->rows * table->width,
                     "{} values for {} rows of {}", table->values.size(), table->rows,
                     table->width);
  for (float x : table->values)
    TROUPE_FUZZ_EXPECT(std::isfinite(x), "a value {} is not finite", x);

  auto reader = csv_reader::open(path);
  TROUPE_FUZZ_EXPECT(reader.ok(), "an accepted file does not open again");
  std::vector<float> values;
  for (;;) {
    auto n = reader->read_rows(3, values);
    TROUPE_FUZZ_EXPECT(n.ok(), "reading in batches fails: {}",
                       n ? std::string{} : n.err().message);
    if (*n == 0)
      break;
  }
  TROUPE_FUZZ_EXPECT(values == table->values, "reading in batches gives other values");
  return 0;
}
