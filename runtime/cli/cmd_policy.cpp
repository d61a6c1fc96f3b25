// `troupe policy act`: a checkpoint's deterministic outputs for a CSV file of
// observations (normalized with the checkpoint's statistics first).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "learners/checkpoint.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/csv.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

// Rows evaluated at once; bounds memory for files of any length.
constexpr size_t rows_per_batch = 4096;

// -- observations ------------------------------------------------------------

// Reads every observation row of `path` (rules of runtime/cli/csv.hpp); the width
// must be the policy's obs_dim. Errors name FILE:LINE.
result<size_t> read_observations(const std::string& path, size_t obs_dim,
                                 std::vector<float>& out) {
  auto reader = csv_reader::open(path);
  if (!reader)
    return reader.err();
  if (reader->width() != obs_dim)
    return make_error(errc::bad_input,
                      "{}:{}: expected {} values (the policy's obs_dim), got {}", path,
                      reader->first_data_line(), obs_dim, reader->width());
  size_t rows = 0;
  while (true) {
    auto n = reader->read_rows(rows_per_batch, out);
    if (!n)
      return n.err();
    if (*n == 0)
      return rows;
    rows += *n;
  }
}

// -- output ------------------------------------------------------------------

// One JSON object per observation row.
void print_json(const learners::model_spec& spec, const learners::policy_output& out) {
  const auto act = static_cast<size_t>(spec.head_dim());
  std::string text;
  for (size_t r = 0; r < out.rows; ++r) {
    json_f32 row;
    if (spec.action == learners::action_kind::discrete) {
      row["logits"] = std::vector<float>(out.logits.begin() + r * act,
                                         out.logits.begin() + (r + 1) * act);
    } else {
      row["mean"] =
        std::vector<float>(out.mean.begin() + r * act, out.mean.begin() + (r + 1) * act);
      row["log_std"] = std::vector<float>(out.log_std.begin(), out.log_std.begin() + act);
    }
    row["value"] = out.value[r];
    text += json_line(row);
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
