// `troupe stats compute FILE... [--batch-rows N] [--mode cumulative|ema]
// [--momentum M] [--json]`: offline normalization statistics of CSV datasets,
// and the black-box face of the statistics keeper. Each file is read by its
// own worker actor, which sends the moments of each batch of rows to one
// keeper as a delta; the output is the keeper's merged result.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/messages.hpp"
#include "actors/stats_keeper.hpp"
#include "kernels/moments.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/csv.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

using actors::done_atom;

const char* stream_name = "data";

// Reads one file batch by batch and sends each batch's moments to the keeper;
// once the keeper has merged them all (sync is FIFO behind them), reports
// (done_atom, rows) or the error to `coordinator`.
void file_worker(caf::blocking_actor* self, std::shared_ptr<csv_reader> reader,
                 size_t batch_rows, caf::actor keeper, caf::actor coordinator) {
  std::vector<float> batch;
  kernels::moments m;
  uint64_t total = 0;
  while (true) {
    batch.clear();
    auto rows = reader->read_rows(batch_rows, batch);
    if (!rows) {
      self->send(coordinator, actors::to_caf_error(rows.err()));
      return;
    }
    if (*rows == 0)
      break;
    kernels::compute_moments_into(batch.data(), *rows, reader->width(), m);
    self->send(keeper,
               actors::moments_delta{stream_name, reader->path(), m.count, m.mean, m.m2});
    total += *rows;
  }
  self->request(keeper, caf::infinite, actors::sync_atom::value)
    .receive([](actors::sync_atom) {}, [](caf::error&) {});
  self->send(coordinator, done_atom::value, total);
}

} // namespace

int cmd_stats_compute(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"batch-rows", true, false,
     "rows per batch (delta) sent to the keeper (default 1024)"},
    {"mode", true, false, "cumulative (default) or ema"},
    {"momentum", true, false, "ema momentum in [0, 1) (default 0.99)"},
    {"json", false, false, "print one JSON object"},
  };
  const char* usage = "usage: troupe stats compute FILE... [--batch-rows N] "
                      "[--mode cumulative|ema] [--momentum M] [--json]";
  auto parsed = parse_args("troupe stats compute", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  if (parsed->positional.empty())
    return fail(exit_bad_input, fmt::format("{}\n{}", usage, describe_args(specs)));
  auto batch_rows = parsed->get_int("batch-rows", 1024, 1, 1 << 30);
  if (!batch_rows)
    return fail(exit_bad_input, batch_rows.err().message);
  auto mode = parsed->get("mode").value_or("cumulative");
  if (mode != "cumulative" && mode != "ema")
    return fail(exit_bad_input,
                fmt::format("--mode: expected cumulative or ema, got '{}'", mode));
  auto momentum = parsed->get_float("momentum", 0.99, 0.0, 0.999999999);
  if (!momentum)
    return fail(exit_bad_input, momentum.err().message);

  // Open every file first: unreadable, empty and mismatched files are
  // reported before anything runs.
  std::vector<std::shared_ptr<csv_reader>> readers;
  std::vector<std::string> problems;
  for (auto& path : parsed->positional) {
    auto r = csv_reader::open(path);
    if (!r) {
      problems.push_back(r.err().message);
      continue;
    }
    readers.push_back(std::make_shared<csv_reader>(std::move(*r)));
  }
  for (auto& r : readers)
    if (r->width() != readers.front()->width())
      problems.push_back(fmt::format("{}: {} values per row, but {} has {}; all files "
                                     "must have the same width",
                                     r->path(), r->width(), readers.front()->path(),
                                     readers.front()->width()));
  if (!problems.empty()) {
    for (auto& p : problems)
      std::fprintf(stderr, "troupe: %s\n", p.c_str());
    return exit_bad_input;
  }
  const size_t dim = readers.front()->width();

  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  // One scheduler thread per core (CAF's default is at least 4).
  cfg.set("scheduler.max-threads",
          static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency())));
  caf::actor_system sys{cfg};
  actors::stats_keeper_options opts;
  opts.mode = mode;
  opts.momentum = *momentum;
  opts.publish_interval_ms = 0;
  auto keeper = actors::spawn_stats_keeper(sys, opts);
  caf::scoped_actor self{sys};
  std::string failure;
  self
    ->request(keeper, caf::infinite, actors::declare_atom::value,
              actors::stream_decl{stream_name, dim, mode, *momentum})
    .receive([](uint64_t) {},
             [&](caf::error& e) { failure = actors::error_message(sys, e); });
  if (!failure.empty())
    return fail(exit_failure, failure);

  // All workers run at once, each on its own thread; each reports once.
  for (auto& r : readers)
    sys.spawn(file_worker, r, static_cast<size_t>(*batch_rows), keeper, caf::actor{self});
  std::vector<std::string> errors;
  uint64_t rows = 0;
  for (size_t i = 0; i < readers.size(); ++i)
    self->receive(
      [&](done_atom, uint64_t n) { rows += n; },
      [&](caf::error& e) { errors.push_back(actors::error_message(sys, e)); });
  if (!errors.empty()) {
    for (auto& e : errors)
      std::fprintf(stderr, "troupe: %s\n", e.c_str());
    self->send_exit(keeper, caf::exit_reason::user_shutdown);
    return exit_bad_input;
  }
  learners::stats_snapshot snap;
  self
    ->request(keeper, caf::infinite, actors::snapshot_atom::value,
              std::string{stream_name})
    .receive([&](learners::stats_snapshot& s) { snap = std::move(s); },
             [&](caf::error& e) { failure = actors::error_message(sys, e); });
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
  if (!failure.empty())
    return fail(exit_failure, failure);
  TROUPE_CHECK(snap.count == rows, "keeper merged {} rows, workers read {}", snap.count,
               rows);

  if (parsed->flag("json")) {
    json out;
    out["count"] = snap.count;
    out["dim"] = dim;
    out["mean"] = snap.mean;
    out["var"] = snap.var;
    out["version"] = snap.version;
    std::fputs(json_line(out).c_str(), stdout);
    return 0;
  }
  std::printf("count %llu, dim %zu, %s mode, %llu merges from %zu file(s)\n",
              static_cast<unsigned long long>(snap.count), dim, mode.c_str(),
              static_cast<unsigned long long>(snap.version), readers.size());
  std::printf("%6s %24s %24s\n", "column", "mean", "variance");
  for (size_t j = 0; j < dim; ++j)
    std::printf("%6zu %24.17g %24.17g\n", j, snap.mean[j], snap.var[j]);
  return 0;
}

} // namespace troupe::runtime
