// The metrics actor's rows: the columns that come from the statistics
// keeper's and the parameter server's own counters (deltas_duplicate,
// gradients_rejected), so that what a lost or fenced host sent is counted
// even when no learner reports it.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/parameter_server.hpp"
#include "actors/stats_keeper.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::ask;

namespace {

// The cells of metrics.csv's last row, by column name.
std::map<std::string, std::string> last_row(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  REQUIRE_MESSAGE(lines.size() >= 2, "metrics.csv has no row: " << path);
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    for (std::string c; std::getline(ss, c, ',');)
      v.push_back(c);
    return v;
  };
  auto header = split(lines.front());
  auto cells = split(lines.back());
  REQUIRE(header.size() == cells.size());
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < header.size(); ++i)
    out[header[i]] = cells[i];
  return out;
}

moments_delta sequenced(const std::string& worker, uint64_t incarnation, uint64_t seq,
                        std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.5, 2.0);
  moments_delta d;
  d.stream = "obs";
  d.worker = worker;
  d.count = 3;
  d.mean = {normal(rng), normal(rng)};
  d.m2 = {1.0 + std::abs(normal(rng)), 1.0 + std::abs(normal(rng))};
  d.incarnation = incarnation;
  d.seq_first = d.seq_last = seq;
  return d;
}

gradient_update gradient(const std::string& worker, uint64_t incarnation, uint64_t seq,
                         std::vector<float> grad) {
  gradient_update g;
  g.learner = worker + ".learner0";
  g.samples = 8;
  g.learning_rate = 1e-3;
  g.grad = std::move(grad);
  g.worker = worker;
  g.incarnation = incarnation;
  g.sequence = seq;
  return g;
}

} // namespace

TEST_CASE("the final metrics row counts the keeper's duplicate deltas and the server's "
          "rejected and fenced gradients, which no learner reported") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("troupe-metrics");
  std::mt19937_64 rng(troupe::test::fresh_seed());
  auto sink = [](const std::string&) {};

  stats_keeper_options ko;
  ko.log = sink;
  auto keeper = spawn_stats_keeper(sys, ko);
  ask<uint64_t>(self, keeper, declare_atom::value, std::string("obs"), uint64_t{2});
  // Three deltas of one sender, two of them sent twice: 2 duplicates.
  const uint64_t inc = 0x5eed;
  std::vector<moments_delta> sent;
  for (uint64_t seq = 1; seq <= 3; ++seq)
    sent.push_back(sequenced("hostA", inc, seq, rng));
  for (auto& d : sent)
    self->send(keeper, d);
  self->send(keeper, sent[0]);
  self->send(keeper, sent[2]);

  parameter_server_options so;
  so.log = sink;
  const size_t n = 16;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> params(n), grad(n);
  for (auto& x : params)
    x = uni(rng);
  for (auto& x : grad)
    x = uni(rng);
  auto server = spawn_parameter_server(sys, so, params, {}, nullptr);
  CHECK(ask<weights_reply>(self, server, gradient("hostB", 7, 1, grad)).applied);
  // One non-finite gradient, then hostB fenced and two of its later gradients
  // refused: 3 rejected in all.
  auto bad = grad;
  bad[uni(rng) > 0 ? 3 : 11] = std::nanf("");
  CHECK(ask<weights_reply>(self, server, gradient("hostB", 7, 2, bad)).rejected);
  CHECK(ask<uint64_t>(self, server, fence_atom::value, std::string("hostB"),
                      uint64_t{7}) == 0);
  CHECK(ask<weights_reply>(self, server, gradient("hostB", 7, 3, grad)).fenced);
  CHECK(ask<weights_reply>(self, server, gradient("hostB", 7, 4, grad)).fenced);
  // The keeper has handled every delta before it answers this.
  ask<sync_atom>(self, keeper, sync_atom::value);
  auto totals = ask<stream_status>(self, keeper, status_atom::value);
  CHECK(totals.duplicates == 2);
  CHECK(totals.count == 9);
  CHECK(totals.duplicates_by_worker["hostA"] == 2);

  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  mo.keeper = keeper.address();
  mo.server = server.address();
  mo.tally_interval_ms = 0; // only the final row asks
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  // One learner's report, which knows of none of them.
  learner_report r;
  r.learner = "learner0";
  r.env_steps = 64;
  self->send(metrics, r);
  ask<metrics_counters>(self, metrics, row_atom::value);
  auto row = last_row(mo.csv_path);
  CHECK(row.at("deltas_duplicate") == "2");
  CHECK(row.at("gradients_rejected") == "3");
  CHECK(row.at("env_steps") == "64");
  for (auto& a : {metrics, server, keeper})
    self->send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("without a keeper and a server the metrics row keeps the learners' count of "
          "rejected gradients and no duplicate deltas") {
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  troupe::test::temp_folder dir("troupe-metrics");
  metrics_options mo;
  mo.csv_path = (dir.path / "metrics.csv").string();
  mo.quiet = true;
  auto metrics = spawn_metrics(sys, mo, caf::actor_cast<caf::actor>(self));
  learner_report r;
  r.learner = "learner0";
  r.env_steps = 32;
  r.rejected = 2;
  self->send(metrics, r);
  ask<metrics_counters>(self, metrics, row_atom::value);
  auto row = last_row(mo.csv_path);
  CHECK(row.at("gradients_rejected") == "2");
  CHECK(row.at("deltas_duplicate") == "0");
  self->send_exit(metrics, caf::exit_reason::user_shutdown);
}
