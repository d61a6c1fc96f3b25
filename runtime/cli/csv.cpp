#include "runtime/cli/csv.hpp"

#include <cfloat>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace troupe::runtime {

namespace {

std::string trim(const std::string& s, size_t b, size_t e) {
  while (b < e && (s[b] == ' ' || s[b] == '\t'))
    ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t'))
    --e;
  return s.substr(b, e - b);
}

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\r") == std::string::npos;
}

} // namespace

bool csv_reader::parse_line(const std::string& line, std::vector<float>& out,
                            std::string& why) {
  size_t start = 0, field = 1;
  while (true) {
    size_t comma = line.find(',', start);
    size_t end = comma == std::string::npos ? line.size() : comma;
    std::string text = trim(line, start, end);
    const char* b = text.data();
    const char* e = b + text.size();
    if (b != e && *b == '+')
      ++b;
    double x = 0;
    auto [ptr, ec] = std::from_chars(b, e, x);
    if (text.empty() || ptr != e ||
        (ec != std::errc{} && ec != std::errc::result_out_of_range)) {
      why = fmt::format("field {}: '{}' is not a number", field, text);
      return false;
    }
    if (ec == std::errc::result_out_of_range ||
        (std::isfinite(x) && std::fabs(x) > FLT_MAX)) {
      why = fmt::format("field {}: {} is outside the float32 range", field, text);
      return false;
    }
    if (!std::isfinite(x)) {
      why =
        fmt::format("field {}: {} is not allowed (values must be finite)", field, text);
      return false;
    }
    out.push_back(static_cast<float>(x));
    if (comma == std::string::npos)
      return true;
    start = comma + 1;
    ++field;
  }
}

bool csv_reader::next_line(std::string& line) {
  while (std::getline(*in_, line)) {
    ++line_no_;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (!blank(line))
      return true;
  }
  return false;
}

result<csv_reader> csv_reader::open(const std::string& path) {
  csv_reader r;
  r.path_ = path;
  r.in_ = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*r.in_)
    return make_error(errc::io_error, "{}: cannot open file", path);
  std::string line, why;
  if (!r.next_line(line))
    return make_error(errc::bad_input, "{}: no data rows (the file is empty)", path);
  if (!parse_line(line, r.pending_, why)) {
    // A first line that is not numeric is a header; one whose only problem
    // is a non-finite or out-of-range number is data, and an error.
    if (why.find("is not a number") == std::string::npos)
      return make_error(errc::bad_input, "{}:{}: {}", path, r.line_no_, why);
    r.has_header_ = true;
    r.pending_.clear();
    size_t header_line = r.line_no_;
    if (!r.next_line(line))
      return make_error(errc::bad_input, "{}: no data rows (only a header on line {})",
                        path, header_line);
    if (!parse_line(line, r.pending_, why))
      return make_error(errc::bad_input, "{}:{}: {}", path, r.line_no_, why);
  }
  r.width_ = r.pending_.size();
  r.first_data_line_ = r.line_no_;
  return r;
}

result<size_t> csv_reader::read_rows(size_t max_rows, std::vector<float>& out) {
  size_t rows = 0;
  if (!pending_.empty() && max_rows > 0) {
    out.insert(out.end(), pending_.begin(), pending_.end());
    pending_.clear();
    ++rows;
  }
  std::string line, why;
  std::vector<float> row;
  while (rows < max_rows && next_line(line)) {
    row.clear();
    if (!parse_line(line, row, why))
      return make_error(errc::bad_input, "{}:{}: {}", path_, line_no_, why);
    if (row.size() != width_)
      return make_error(errc::bad_input,
                        "{}:{}: expected {} values (as on line {}), got {}", path_,
                        line_no_, width_, first_data_line_, row.size());
    out.insert(out.end(), row.begin(), row.end());
    ++rows;
  }
  if (in_->bad())
    return make_error(errc::io_error, "{}:{}: read error", path_, line_no_);
  return rows;
}

result<csv_table> read_csv(const std::string& path) {
  auto r = csv_reader::open(path);
  if (!r)
    return r.err();
  csv_table t;
  t.width = r->width();
  while (true) {
    auto n = r->read_rows(4096, t.values);
    if (!n)
      return n.err();
    if (*n == 0)
      break;
    t.rows += *n;
  }
  return t;
}

} // namespace troupe::runtime
