// A strict streaming reader of numeric CSV files parsed to float32, one
// sample per row (header and blank lines skipped), every error naming
// FILE:LINE, the rule and the value.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace troupe::runtime {

/// Reads rows of float32 values from a CSV file, batch by batch.
class csv_reader {
public:
  /// Opens `path` and reads up to its first data row to learn the width,
  /// failing for an unreadable file or one without data rows.
  static result<csv_reader> open(const std::string& path);

  /// Appends up to `max_rows` rows to `out` (row-major) and returns how many
  /// were read (0 at the end), or an error naming FILE:LINE for a ragged row,
  /// a non-number, NaN, infinity or a value outside float32's range.
  result<size_t> read_rows(size_t max_rows, std::vector<float>& out);

  /// Values per row (the width of the first data row).
  size_t width() const noexcept { return width_; }

  /// Path as given to open().
  const std::string& path() const noexcept { return path_; }

  /// Line number of the first data row (1-based).
  size_t first_data_line() const noexcept { return first_data_line_; }

  /// Whether the file had a header line.
  bool has_header() const noexcept { return has_header_; }

private:
  csv_reader() = default;
  // Parses `line` into `out`; returns false with `why` set when not numeric.
  static bool parse_line(const std::string& line, std::vector<float>& out,
                         std::string& why);
  // Next non-blank line; false at the end.
  bool next_line(std::string& line);

  std::string path_;
  std::unique_ptr<std::ifstream> in_;
  size_t line_no_ = 0;
  size_t width_ = 0;
  size_t first_data_line_ = 0;
  bool has_header_ = false;
  std::vector<float> pending_; // the first data row, read by open()
};

/// Reads a whole CSV file: rows x width float32 values.
struct csv_table {
  size_t rows = 0;
  size_t width = 0;
  std::vector<float> values;
};

/// Reads every row of `path` (see csv_reader for the rules).
result<csv_table> read_csv(const std::string& path);

} // namespace troupe::runtime
