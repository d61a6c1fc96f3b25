// `troupe policy act`: a checkpoint's deterministic outputs for a CSV file of
// observations (normalized with the checkpoint's statistics first).
#include <algorithm>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "learners/checkpoint.hpp"
#include "runtime/args.hpp"
#include "runtime/commands.hpp"

namespace troupe::runtime {

namespace {

// Rows evaluated at once; bounds memory for files of any length.
constexpr size_t rows_per_batch = 4096;

// -- observations ------------------------------------------------------------

// Parses one CSV line of numbers; on failure `why` says which field and why.
bool parse_row(const std::string& line, std::vector<float>& row, std::string& why) {
  row.clear();
  size_t start = 0;
  for (size_t field = 1;; ++field) {
    size_t comma = line.find(',', start);
    size_t end = comma == std::string::npos ? line.size() : comma;
    size_t b = line.find_first_not_of(" \t", start);
    if (b == std::string::npos || b > end)
      b = end;
    size_t e = end;
    while (e > b && (line[e - 1] == ' ' || line[e - 1] == '\t'))
      --e;
    std::string text = line.substr(b, e - b);
    const char* first = text.data();
    const char* last = first + text.size();
    if (first != last && *first == '+')
      ++first;
    double x = 0;
    auto [ptr, ec] = std::from_chars(first, last, x);
    if (text.empty() || ptr != last || ec == std::errc::invalid_argument) {
      why = fmt::format("field {}: '{}' is not a number", field, text);
      return false;
    }
    if (!std::isfinite(x)) {
      why = fmt::format("field {}: {} is not allowed (observations must be finite)", field,
                        text);
      return false;
    }
    if (ec == std::errc::result_out_of_range || std::fabs(x) > FLT_MAX) {
      why = fmt::format("field {}: {} is outside the float32 range", field, text);
      return false;
    }
    row.push_back(static_cast<float>(x));
    if (comma == std::string::npos)
      return true;
    start = comma + 1;
  }
}

// Reads every observation row of `path` (row-major); blank lines are skipped
// and a first line that is not numeric is a header. Errors name FILE:LINE.
result<size_t> read_observations(const std::string& path, size_t obs_dim,
                                 std::vector<float>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(errc::io_error, "{}: cannot open file", path);
  std::string line, why;
  std::vector<float> row;
  size_t line_no = 0;
  size_t rows = 0;
  bool first_line = true;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos)
      continue;
    bool numeric = parse_row(line, row, why);
    if (first_line && !numeric) {
      first_line = false; // a header
      continue;
    }
    first_line = false;
    if (!numeric)
      return make_error(errc::bad_input, "{}:{}: {}", path, line_no, why);
    if (row.size() != obs_dim)
      return make_error(errc::bad_input,
                        "{}:{}: expected {} values (the policy's obs_dim), got {}", path,
                        line_no, obs_dim, row.size());
    out.insert(out.end(), row.begin(), row.end());
    ++rows;
  }
  if (in.bad())
    return make_error(errc::io_error, "{}:{}: read error", path, line_no);
  if (rows == 0)
    return make_error(errc::bad_input, "{}: no observation rows", path);
  return rows;
}

// -- output ------------------------------------------------------------------

// A number as JSON: 9 significant digits (enough to read a float32 back
// exactly), null where the value is not finite (JSON has no NaN).
void append_json_number(std::string& out, float x) {
  if (std::isfinite(x))
    out += fmt::format("{:.9g}", static_cast<double>(x));
  else
    out += "null";
}

void append_json_list(std::string& out, const float* values, size_t n) {
  out += '[';
  for (size_t i = 0; i < n; ++i) {
    if (i > 0)
      out += ", ";
    append_json_number(out, values[i]);
  }
  out += ']';
}

// One JSON object per observation row.
void print_json(const learners::model_spec& spec, const learners::policy_output& out) {
  const auto act = static_cast<size_t>(spec.head_dim());
  std::string text;
  for (size_t r = 0; r < out.rows; ++r) {
    if (spec.action == learners::action_kind::discrete) {
      text += "{\"logits\": ";
      append_json_list(text, out.logits.data() + r * act, act);
    } else {
      text += "{\"mean\": ";
      append_json_list(text, out.mean.data() + r * act, act);
      text += ", \"log_std\": ";
      append_json_list(text, out.log_std.data(), act);
    }
    text += ", \"value\": ";
    append_json_number(text, out.value[r]);
    text += "}\n";
  }
  std::fputs(text.c_str(), stdout);
}

constexpr int table_column = 14;

std::string table_header(const learners::model_spec& spec) {
  std::string line = fmt::format("{:>6}", "row");
  const auto act = spec.head_dim();
  if (spec.action == learners::action_kind::discrete) {
    for (int64_t j = 0; j < act; ++j)
      line += fmt::format(" {:>{}}", fmt::format("logits[{}]", j), table_column);
  } else {
    for (int64_t j = 0; j < act; ++j)
      line += fmt::format(" {:>{}}", fmt::format("mean[{}]", j), table_column);
    for (int64_t j = 0; j < act; ++j)
      line += fmt::format(" {:>{}}", fmt::format("log_std[{}]", j), table_column);
  }
  line += fmt::format(" {:>{}}\n", "value", table_column);
  return line;
}

// One line per observation row, columns aligned under table_header().
void print_table(const learners::model_spec& spec, const learners::policy_output& out,
                 size_t first_row) {
  const auto act = static_cast<size_t>(spec.head_dim());
  std::string text;
  auto cell = [&](float x) {
    text += fmt::format(" {:>{}.7g}", static_cast<double>(x), table_column);
  };
  for (size_t r = 0; r < out.rows; ++r) {
    text += fmt::format("{:>6}", first_row + r);
    if (spec.action == learners::action_kind::discrete) {
      for (size_t j = 0; j < act; ++j)
        cell(out.logits[r * act + j]);
    } else {
      for (size_t j = 0; j < act; ++j)
        cell(out.mean[r * act + j]);
      for (size_t j = 0; j < act; ++j)
        cell(out.log_std[j]);
    }
    cell(out.value[r]);
    text += '\n';
  }
  std::fputs(text.c_str(), stdout);
}

} // namespace

int cmd_policy_act(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"checkpoint", true, false,
     "policy checkpoint (.safetensors, see docs/checkpoints.md)"},
    {"obs", true, false, "CSV file: one observation per row, optional header line"},
    {"json", false, false, "one JSON object per row instead of a table"},
  };
  auto parsed = parse_args("troupe policy act", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto usage = [&] {
    return fmt::format("usage: troupe policy act --checkpoint FILE --obs FILE.csv "
                       "[--json]\n{}",
                       describe_args(specs));
  };
  if (!parsed->positional.empty())
    return fail(exit_bad_input, fmt::format("policy act: unexpected argument '{}'\n{}",
                                            parsed->positional[0], usage()));
  auto checkpoint_path = parsed->get("checkpoint");
  auto obs_path = parsed->get("obs");
  if (!checkpoint_path || !obs_path)
    return fail(exit_bad_input,
                fmt::format("policy act: --{} is required\n{}",
                            !checkpoint_path ? "checkpoint" : "obs", usage()));
  const bool json = parsed->flag("json");

  auto checkpoint = learners::load_checkpoint(*checkpoint_path);
  if (!checkpoint)
    return fail(exit_bad_input, checkpoint.err().message);
  const auto& spec = checkpoint->model.spec();
  const auto* obs_stats = spec.obs_norm ? &checkpoint->obs_stats : nullptr;

  // Read every row before printing any, so that a bad row leaves no output.
  const auto dim = static_cast<size_t>(spec.obs_dim);
  std::vector<float> obs;
  auto rows_read = read_observations(*obs_path, dim, obs);
  if (!rows_read)
    return fail(exit_bad_input, rows_read.err().message);
  const size_t total_rows = *rows_read;

  if (!json)
    std::fputs(table_header(spec).c_str(), stdout);
  learners::policy_output out;
  for (size_t first = 0; first < total_rows; first += rows_per_batch) {
    size_t rows = std::min(rows_per_batch, total_rows - first);
    auto evaluated =
      checkpoint->model.evaluate(obs.data() + first * dim, rows, obs_stats, out);
    if (!evaluated)
      return fail(exit_failure, evaluated.err().message);
    if (json)
      print_json(spec, out);
    else
      print_table(spec, out, first);
  }
  return 0;
}

} // namespace troupe::runtime
