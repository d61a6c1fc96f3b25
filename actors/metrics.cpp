#include "actors/metrics.hpp"
#include "actors/exceptions.hpp"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "learners/tensorboard.hpp"

namespace troupe::actors {

const char* const metrics_columns[] = {"wall_time_s",
                                       "env_steps",
                                       "updates",
                                       "episodes",
                                       "return_mean_100",
                                       "return_last",
                                       "episode_length_mean",
                                       "sps",
                                       "policy_lag_mean",
                                       "policy_lag_max",
                                       "stats_version",
                                       "stats_lag",
                                       "loss_policy",
                                       "loss_value",
                                       "entropy",
                                       "learning_rate",
                                       "weights_version",
                                       "dropped_gradients",
                                       "runner_restarts",
                                       "non_finite",
                                       "gradients_rejected",
                                       "hosts",
                                       "hosts_lost",
                                       "deltas_duplicate",
                                       "env_steps_lost",
                                       "reward_stats_version",
                                       "obs_shift_kl",
                                       "obs_drift_kl",
                                       "obs_drift_kl_max",
                                       "return_std_shift",
                                       "return_std_drift"};

const size_t metrics_column_count = sizeof(metrics_columns) / sizeof(metrics_columns[0]);

const char* const hosts_columns[] = {"wall_time_s",    "env_steps",       "host",
                                     "host_env_steps", "host_updates",    "host_episodes",
                                     "host_sps",       "policy_lag_mean", "return_mean"};

const size_t hosts_column_count = sizeof(hosts_columns) / sizeof(hosts_columns[0]);

std::string host_of_learner(const std::string& learner) {
  const auto at = learner.rfind(".learner");
  if (at == std::string::npos || at == 0)
    return "coordinator";
  return learner.substr(0, at);
}

std::vector<std::string>
metrics_column_names(const std::vector<std::string>& reward_terms,
                     const std::vector<std::string>& counters) {
  std::vector<std::string> names(metrics_columns, metrics_columns + metrics_column_count);
  for (const auto& term : reward_terms)
    names.push_back(fmt::format("episode.{}_mean", term));
  names.insert(names.end(), counters.begin(), counters.end());
  return names;
}

namespace {

using clock_type = std::chrono::steady_clock;

// One host's counters for hosts.csv.
struct host_tally {
  uint64_t env_steps = 0; // since the actor started
  uint64_t updates = 0;
  uint64_t episodes = 0;
  uint64_t row_steps = 0; // since the last row
  double lag_sum = 0;
  uint64_t lag_n = 0;
  double return_sum = 0;
  uint64_t return_n = 0;
};

struct metrics_state {
  metrics_options opts;
  caf::actor coordinator;
  metrics_counters c;
  std::vector<std::string> columns; // metrics_column_names of the options
  std::deque<double> returns;
  std::deque<uint64_t> lengths;
  double return_last = NAN;
  clock_type::time_point started;
  clock_type::time_point last_progress;
  // since the last row
  double lag_sum = 0;
  uint64_t lag_max = 0;
  uint64_t lag_n = 0;
  uint64_t row_steps = 0;
  double row_time = 0;
  std::vector<double> term_sum; // per reward term: the episodes' sums added up
  std::vector<uint64_t> term_n; // ... over this many episodes
  // run.norm_diagnostics: the batches' measured values (NaN: not measured)
  struct mean_of {
    double sum = 0;
    uint64_t n = 0;
    double max = NAN;
    void add(double x) {
      if (!std::isfinite(x))
        return;
      sum += x;
      n += 1;
      max = std::isnan(max) ? x : std::max(max, x);
    }
    double mean() const { return n ? sum / static_cast<double>(n) : NAN; }
  };
  mean_of obs_shift_kl, obs_drift_kl, return_std_shift, return_std_drift;
  // since the actor started
  std::vector<uint64_t> env_counters;
  // (time, env steps) of recent rows, for the sps window
  std::deque<std::pair<double, uint64_t>> rate_marks;
  // latest report
  learner_report last;
  uint64_t dropped = 0;
  uint64_t restarts = 0;
  uint64_t non_finite = 0;
  uint64_t rejected = 0;
  uint64_t hosts = 0;          // worker processes joined and not lost (cluster runs)
  uint64_t hosts_lost = 0;     // worker processes lost so far
  uint64_t env_steps_lost = 0; // steps lost hosts collected and never learned
  // The keeper's and the server's counters of refused messages, as last told.
  uint64_t deltas_duplicate = 0; // sequenced deltas the keeper dropped as merged
  uint64_t server_refused = 0;   // gradients the server rejected or fenced
  bool tally_in_flight = false;
  std::map<std::string, uint64_t> non_finite_by_learner;
  bool done_sent = false;
  uint64_t last_row_updates = UINT64_MAX;
  std::FILE* csv = nullptr;
  std::FILE* jsonl = nullptr;
  std::FILE* hosts_csv = nullptr;
  std::map<std::string, host_tally> by_host;       // hosts.csv's counters
  std::unique_ptr<learners::tb_event_file> events; // the TensorBoard events file
  std::string write_error; // the first failed open or write; the run is stopped then
  ~metrics_state() {
    if (hosts_csv)
      std::fclose(hosts_csv);
    if (csv)
      std::fclose(csv);
    if (jsonl)
      std::fclose(jsonl);
  }
};

using metrics_actor = caf::stateful_actor<metrics_state>;

double elapsed(const metrics_state& st) {
  return st.c.wall_time_s +
         std::chrono::duration<double>(clock_type::now() - st.started).count();
}

// Seconds since the Unix epoch, TensorBoard's wall time.
double unix_now() {
  return std::chrono::duration<double>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

double mean_return(const metrics_state& st) {
  if (st.returns.empty())
    return NAN;
  return std::accumulate(st.returns.begin(), st.returns.end(), 0.0) /
         static_cast<double>(st.returns.size());
}

std::string num(double x) {
  if (!std::isfinite(x))
    return "nan";
  return fmt::format("{:.9g}", x);
}

metrics_counters counters_now(const metrics_state& st) {
  metrics_counters out = st.c;
  out.wall_time_s = elapsed(st);
  out.recent_returns.assign(st.returns.begin(), st.returns.end());
  out.recent_lengths.assign(st.lengths.begin(), st.lengths.end());
  return out;
}

// Rows can come a few milliseconds apart while several learners' reports
// arrive in bursts, so sps is measured over at least sps_window_s: from the
// newest earlier row that old, or from the oldest one kept.
constexpr double sps_window_s = 0.5;

double window_sps(metrics_state& st, double t) {
  if (st.rate_marks.empty())
    st.rate_marks.emplace_back(st.row_time, st.c.env_steps - st.row_steps);
  while (st.rate_marks.size() > 1 && t - st.rate_marks[1].first >= sps_window_s)
    st.rate_marks.pop_front();
  const auto [t0, steps0] = st.rate_marks.front();
  st.rate_marks.emplace_back(t, st.c.env_steps);
  const double dt = t - t0;
  return dt > 0 ? static_cast<double>(st.c.env_steps - steps0) / dt : 0.0;
}

// Records the first failed open or write (path and the system's reason), logs
// it and asks the coordinator to stop the run: a run whose metrics
// cannot be written stops rather than train on silently.
void write_failed(metrics_state& st, const std::string& what) {
  if (!st.write_error.empty())
    return;
  st.write_error = what;
  write_log(st.opts.log, log_level::error,
            fmt::format("troupe: metrics: {}; stopping the run", what));
  if (st.csv)
    std::fclose(st.csv);
  if (st.jsonl)
    std::fclose(st.jsonl);
  if (st.hosts_csv)
    std::fclose(st.hosts_csv);
  st.csv = st.jsonl = st.hosts_csv = nullptr;
  st.events.reset();
  if (st.coordinator)
    caf::anon_send(st.coordinator, stop_atom::value);
}

// Appends `line` and a newline to `f` and flushes; false (errno set) on failure.
bool append_line(std::FILE* f, const std::string& line) {
  errno = 0;
  return std::fprintf(f, "%s\n", line.c_str()) >= 0 && std::fflush(f) == 0;
}

// A CSV field: as it is, or quoted (quotes doubled) when it holds a comma,
// a quote or a line break.
std::string csv_field(const std::string& x) {
  if (x.find_first_of(",\"\r\n") == std::string::npos)
    return x;
  std::string out = "\"";
  for (char c : x) {
    out += c;
    if (c == '"')
      out += '"';
  }
  return out + "\"";
}

// hosts.csv's rows for the row of metrics.csv at `t`, over the `dt` seconds
// since the last row; the per-row counters start again.
void write_host_rows(metrics_state& st, double t, double dt) {
  for (auto& [host, h] : st.by_host) {
    if (st.hosts_csv) {
      const double sps = dt > 0 ? static_cast<double>(h.row_steps) / dt : 0.0;
      const std::string lag =
        h.lag_n ? num(h.lag_sum / static_cast<double>(h.lag_n)) : std::string{};
      const std::string ret =
        h.return_n ? num(h.return_sum / static_cast<double>(h.return_n)) : std::string{};
      const auto line =
        fmt::format("{},{},{},{},{},{},{},{},{}", num(t), st.c.env_steps, csv_field(host),
                    h.env_steps, h.updates, h.episodes, num(sps), lag, ret);
      if (!append_line(st.hosts_csv, line)) {
        write_failed(st, fmt::format("cannot write {}: {}", st.opts.hosts_csv_path,
                                     std::strerror(errno)));
        return;
      }
    }
    h.row_steps = 0;
    h.lag_sum = 0;
    h.lag_n = 0;
    h.return_sum = 0;
    h.return_n = 0;
  }
}

void write_row(metrics_state& st) {
  const double t = elapsed(st);
  write_host_rows(st, t, t - st.row_time);
  const double sps = window_sps(st, t);
  double len_mean = NAN;
  if (!st.lengths.empty())
    len_mean = std::accumulate(st.lengths.begin(), st.lengths.end(), 0.0) /
               static_cast<double>(st.lengths.size());
  const double lag_mean = st.lag_n ? st.lag_sum / static_cast<double>(st.lag_n) : 0.0;
  // The same row in both files: metrics.csv writes a figure with 9
  // significant digits and "nan" when there is none; metrics.jsonl writes the
  // number that text reads back as, and null for "nan" (JSON has no NaN).
  // The events file holds that number as a float32 scalar tagged with the
  // column's name, and leaves out "nan" cells.
  std::string line;
  nlohmann::ordered_json row;
  std::vector<learners::tb_scalar> scalars;
  size_t column = 0;
  auto add = [&](auto x) {
    const char* name = st.columns[column++].c_str();
    std::string text;
    if constexpr (std::is_floating_point_v<decltype(x)>) {
      text = num(x);
      if (std::isfinite(x)) {
        const double read_back = std::strtod(text.c_str(), nullptr);
        row[name] = read_back;
        scalars.push_back({name, static_cast<float>(read_back)});
      } else {
        row[name] = nullptr;
      }
    } else {
      text = std::to_string(x);
      row[name] = x;
      scalars.push_back({name, static_cast<float>(x)});
    }
    line += (column > 1 ? "," : "") + text;
  };
  add(t);
  add(st.c.env_steps);
  add(st.c.updates);
  add(st.c.episodes);
  add(mean_return(st));
  add(st.return_last);
  add(len_mean);
  add(sps);
  add(lag_mean);
  add(st.lag_max);
  add(st.last.stats_version);
  add(st.last.stats_lag);
  add(st.last.loss_policy);
  add(st.last.loss_value);
  add(st.last.entropy);
  add(st.last.learning_rate);
  add(st.last.weights_version);
  add(st.dropped);
  add(st.restarts);
  add(st.non_finite);
  // The learners' count of their rejected gradients, unless the server's
  // (which also counts those of lost hosts and fenced incarnations) is larger.
  add(std::max(st.rejected, st.server_refused));
  add(st.hosts);
  add(st.hosts_lost);
  add(st.deltas_duplicate);
  add(st.env_steps_lost);
  add(st.last.reward_stats_version);
  add(st.obs_shift_kl.mean());
  add(st.obs_drift_kl.mean());
  add(st.obs_drift_kl.max);
  add(st.return_std_shift.mean());
  add(st.return_std_drift.mean());
  for (size_t j = 0; j < st.term_sum.size(); ++j)
    add(st.term_n[j] ? st.term_sum[j] / static_cast<double>(st.term_n[j]) : double(NAN));
  for (uint64_t count : st.env_counters)
    add(count);
  TROUPE_CHECK(column == st.columns.size(), "metrics row has {} values for {} columns",
               column, st.columns.size());
  if (st.csv && !append_line(st.csv, line))
    write_failed(
      st, fmt::format("cannot write {}: {}", st.opts.csv_path, std::strerror(errno)));
  if (st.jsonl && !append_line(st.jsonl, row.dump()))
    write_failed(
      st, fmt::format("cannot write {}: {}", st.opts.jsonl_path, std::strerror(errno)));
  if (st.events) {
    // At its env step; the event's wall time is the Unix time TensorBoard shows.
    if (auto written = st.events->write_scalars(
          unix_now(), static_cast<int64_t>(st.c.env_steps), scalars);
        !written)
      write_failed(st, written.err().message);
  }
  if (!st.opts.quiet && !st.opts.progress_line && st.opts.log)
    write_log(st.opts.log, log_level::info,
              fmt::format("steps {}  updates {}  return_mean_100 {}  sps {:.0f}  "
                          "policy_lag {:.2f}  stats_lag {}  elapsed {:.1f}s",
                          st.c.env_steps, st.c.updates, num(mean_return(st)), sps,
                          lag_mean, st.last.stats_lag, t));
  st.last_row_updates = st.c.updates;
  st.row_time = t;
  st.row_steps = 0;
  st.lag_sum = 0;
  st.lag_max = 0;
  st.lag_n = 0;
  std::fill(st.term_sum.begin(), st.term_sum.end(), 0.0);
  std::fill(st.term_n.begin(), st.term_n.end(), uint64_t{0});
  st.obs_shift_kl = {};
  st.obs_drift_kl = {};
  st.return_std_shift = {};
  st.return_std_drift = {};
}

void progress(metrics_state& st) {
  const auto now = clock_type::now();
  if (now - st.last_progress < std::chrono::seconds(1))
    return;
  st.last_progress = now;
  const double t = elapsed(st);
  const double sps = t > 0 ? static_cast<double>(st.c.env_steps) / t : 0;
  const double remaining =
    sps > 0 && st.opts.total_env_steps > st.c.env_steps
      ? static_cast<double>(st.opts.total_env_steps - st.c.env_steps) / sps
      : 0.0;
  write_log(st.opts.log, log_level::progress,
            fmt::format("steps {}/{}  {:.0f} steps/s  return_mean_100 {}  policy_lag {}  "
                        "stats_lag {}  elapsed {:.0f}s  remaining {:.0f}s",
                        st.c.env_steps, st.opts.total_env_steps, sps,
                        num(mean_return(st)), st.last.policy_lag, st.last.stats_lag, t,
                        remaining));
}

// How long the metrics actor waits for the keeper's or the server's counters.
constexpr auto tally_timeout = std::chrono::seconds(2);

// Asks the server, then the keeper, for their counters of refused messages,
// then calls `then` (also when one does not answer: the last counters stay).
void tally(metrics_actor* self, std::function<void()> then) {
  auto& st = self->state;
  auto ask_keeper = [self, then] {
    auto keeper = caf::actor_cast<caf::actor>(self->state.opts.keeper);
    if (!keeper) {
      then();
      return;
    }
    self->request(keeper, tally_timeout, status_atom::value)
      .then(
        [self, then](const stream_status& totals) {
          self->state.deltas_duplicate = totals.duplicates;
          then();
        },
        [then](caf::error&) { then(); });
  };
  auto server = caf::actor_cast<caf::actor>(st.opts.server);
  if (!server) {
    ask_keeper();
    return;
  }
  self->request(server, tally_timeout, status_atom::value)
    .then(
      [self, ask_keeper](const parameter_server_status& status) {
        self->state.server_refused = status.rejected + status.fenced;
        ask_keeper();
      },
      [ask_keeper](caf::error&) { ask_keeper(); });
}

// The periodic tally: one at a time, the next one interval after the last.
void schedule_tally(metrics_actor* self) {
  auto& st = self->state;
  if (st.opts.tally_interval_ms == 0 || (!st.opts.keeper && !st.opts.server))
    return;
  self->delayed_send(self, std::chrono::milliseconds(st.opts.tally_interval_ms),
                     tally_atom::value);
}

// One learner's report: counters, the recent returns, a row every
// log_every_updates, checkpoints and the end of the budget.
void take_report(metrics_actor* self, learner_report& r) {
  auto& s = self->state;
  s.c.env_steps += r.env_steps;
  s.row_steps += r.env_steps;
  host_tally* host = nullptr;
  if (!s.opts.hosts_csv_path.empty()) {
    host = &s.by_host[host_of_learner(r.learner)];
    host->env_steps += r.env_steps;
    host->row_steps += r.env_steps;
  }
  s.non_finite_by_learner[r.learner] = r.non_finite;
  s.non_finite = 0;
  for (auto& kv : s.non_finite_by_learner)
    s.non_finite += kv.second;
  // Counted for skipped batches too: trouble is what makes a batch skipped.
  // A report of another length (another environment's) is left out.
  if (r.env_counters.size() == s.env_counters.size())
    for (size_t j = 0; j < s.env_counters.size(); ++j)
      s.env_counters[j] += r.env_counters[j];
  s.obs_shift_kl.add(r.obs_shift_kl);
  s.obs_drift_kl.add(r.obs_drift_kl);
  s.return_std_shift.add(r.return_std_shift);
  s.return_std_drift.add(r.return_std_drift);
  if (r.skipped)
    return; // not learned: no update, no losses
  if (host) {
    host->updates += 1;
    host->episodes += r.episode_returns.size();
    host->lag_sum += static_cast<double>(r.policy_lag);
    host->lag_n += 1;
    for (double x : r.episode_returns) {
      host->return_sum += x;
      host->return_n += 1;
    }
  }
  s.c.updates += 1;
  s.c.episodes += r.episode_returns.size();
  for (size_t i = 0; i < r.episode_returns.size(); ++i) {
    s.returns.push_back(r.episode_returns[i]);
    s.lengths.push_back(i < r.episode_lengths.size() ? r.episode_lengths[i] : 0);
    s.return_last = r.episode_returns[i];
  }
  const size_t terms = s.term_sum.size();
  if (terms > 0 && r.episode_reward_terms.size() == r.episode_returns.size() * terms)
    for (size_t k = 0; k < r.episode_reward_terms.size(); ++k)
      if (!std::isnan(r.episode_reward_terms[k])) { // NaN: an episode not seen whole
        s.term_sum[k % terms] += r.episode_reward_terms[k];
        s.term_n[k % terms] += 1;
      }
  while (s.returns.size() > 100) {
    s.returns.pop_front();
    s.lengths.pop_front();
  }
  s.lag_sum += static_cast<double>(r.policy_lag);
  s.lag_max = std::max(s.lag_max, r.policy_lag);
  s.lag_n += 1;
  s.dropped += r.dropped;
  s.rejected += r.rejected;
  s.restarts = std::max(s.restarts, r.runner_restarts);
  s.last = std::move(r);
  if (s.c.updates % s.opts.log_every_updates == 0)
    write_row(s);
  if (s.opts.progress_line && !s.opts.quiet)
    progress(s);
  if (s.opts.checkpoint_every_updates > 0 &&
      s.c.updates % s.opts.checkpoint_every_updates == 0)
    self->send(s.coordinator, ckpt_atom::value, s.c.updates);
  if (!s.done_sent && s.opts.total_env_steps > 0 &&
      s.c.env_steps >= s.opts.total_env_steps) {
    s.done_sent = true;
    self->send(s.coordinator, done_atom::value);
  }
}

caf::behavior metrics(metrics_actor* self, metrics_options opts, caf::actor coordinator) {
  convert_exceptions(self, "metrics actor", {});
  auto& st = self->state;
  st.opts = std::move(opts);
  st.coordinator = std::move(coordinator);
  st.c = st.opts.start;
  st.columns = metrics_column_names(st.opts.reward_terms, st.opts.env_counters);
  st.term_sum.assign(st.opts.reward_terms.size(), 0.0);
  st.term_n.assign(st.opts.reward_terms.size(), 0);
  st.env_counters.assign(st.opts.env_counters.size(), 0);
  st.returns.assign(st.c.recent_returns.begin(), st.c.recent_returns.end());
  st.lengths.assign(st.c.recent_lengths.begin(), st.c.recent_lengths.end());
  if (!st.returns.empty())
    st.return_last = st.returns.back();
  st.started = clock_type::now();
  st.last_progress = st.started;
  st.row_time = st.c.wall_time_s;
  if (!st.opts.csv_path.empty()) {
    std::FILE* probe = std::fopen(st.opts.csv_path.c_str(), "r");
    const bool fresh = probe == nullptr;
    if (probe)
      std::fclose(probe);
    st.csv = std::fopen(st.opts.csv_path.c_str(), "a");
    if (!st.csv) {
      write_failed(st, fmt::format("cannot open {} for appending: {}", st.opts.csv_path,
                                   std::strerror(errno)));
    } else if (fresh) {
      const std::string header = fmt::format("{}", fmt::join(st.columns, ","));
      if (!append_line(st.csv, header))
        write_failed(
          st, fmt::format("cannot write {}: {}", st.opts.csv_path, std::strerror(errno)));
    }
  }
  if (!st.opts.hosts_csv_path.empty() && st.write_error.empty()) {
    std::FILE* probe = std::fopen(st.opts.hosts_csv_path.c_str(), "r");
    const bool fresh = probe == nullptr;
    if (probe)
      std::fclose(probe);
    st.hosts_csv = std::fopen(st.opts.hosts_csv_path.c_str(), "a");
    if (!st.hosts_csv)
      write_failed(st, fmt::format("cannot open {} for appending: {}",
                                   st.opts.hosts_csv_path, std::strerror(errno)));
    else if (fresh &&
             !append_line(
               st.hosts_csv,
               fmt::format("{}", fmt::join(hosts_columns,
                                           hosts_columns + hosts_column_count, ","))))
      write_failed(st, fmt::format("cannot write {}: {}", st.opts.hosts_csv_path,
                                   std::strerror(errno)));
  }
  if (!st.opts.jsonl_path.empty() && st.write_error.empty()) {
    st.jsonl = std::fopen(st.opts.jsonl_path.c_str(), "a");
    if (!st.jsonl)
      write_failed(st, fmt::format("cannot open {} for appending: {}", st.opts.jsonl_path,
                                   std::strerror(errno)));
  }
  if (!st.opts.tensorboard_dir.empty() && st.write_error.empty()) {
    // A new file each start: a resumed run never writes into an old one.
    auto events = learners::tb_event_file::create(st.opts.tensorboard_dir, unix_now());
    if (events)
      st.events = std::make_unique<learners::tb_event_file>(std::move(*events));
    else
      write_failed(st, events.err().message);
    // A resume: the rows an earlier file holds past the checkpoint (dropped
    // from metrics.csv) are dropped by TensorBoard too, from the step after it.
    if (st.events && st.c.env_steps > 0)
      if (auto ok = st.events->write_record(learners::tb_session_start_event(
            unix_now(), static_cast<int64_t>(st.c.env_steps + 1)));
          !ok)
        write_failed(st, ok.err().message);
  }
  schedule_tally(self);
  return {
    [self](learner_report& r) { take_report(self, r); },
    // A host's reports of one interval (its report relay), in their order.
    [self](std::vector<learner_report>& reports) {
      for (auto& r : reports)
        take_report(self, r);
    },
    [self](hosts_atom, uint64_t hosts, uint64_t lost, uint64_t env_steps_lost) {
      self->state.hosts = hosts;
      self->state.hosts_lost = lost;
      self->state.env_steps_lost = env_steps_lost;
    },
    [self](tally_atom) {
      if (self->state.tally_in_flight)
        return;
      self->state.tally_in_flight = true;
      tally(self, [self] {
        self->state.tally_in_flight = false;
        schedule_tally(self);
      });
    },
    [self](row_atom) -> caf::result<metrics_counters> {
      // The final row, with the keeper's and the server's counters of now.
      auto rp = self->make_response_promise<metrics_counters>();
      const uint64_t duplicate = self->state.deltas_duplicate;
      const uint64_t refused = self->state.server_refused;
      tally(self, [self, rp, duplicate, refused]() mutable {
        auto& s = self->state;
        if (s.last_row_updates != s.c.updates || s.deltas_duplicate != duplicate ||
            s.server_refused != refused)
          write_row(s); // unless the last row already is it
        rp.deliver(counters_now(s));
      });
      return rp;
    },
    [self](state_atom) { return counters_now(self->state); },
    [self](status_atom) { return self->state.write_error; },
  };
}

struct report_relay_state {
  caf::actor metrics;
  std::chrono::milliseconds interval{0};
  std::vector<learner_report> held;
  bool tick_pending = false;
  static inline const char* name = "report_relay";
};

using report_relay_actor = caf::stateful_actor<report_relay_state>;

void send_held_reports(report_relay_actor* self) {
  auto& st = self->state;
  if (st.held.empty())
    return;
  self->send(st.metrics, std::move(st.held));
  st.held = {};
}

caf::behavior report_relay(report_relay_actor* self, caf::actor metrics,
                           std::chrono::milliseconds interval) {
  self->state.metrics = std::move(metrics);
  self->state.interval = interval;
  self->monitor(self->state.metrics);
  self->set_down_handler([self](const caf::down_msg& down) {
    if (down.source == self->state.metrics.address())
      self->quit(down.reason);
  });
  return {
    [self](learner_report& r) {
      auto& st = self->state;
      if (st.interval.count() == 0) {
        self->send(st.metrics, std::move(r));
        return;
      }
      st.held.push_back(std::move(r));
      if (!st.tick_pending) {
        st.tick_pending = true;
        self->delayed_send(self, st.interval, publish_atom::value);
      }
    },
    [self](publish_atom) {
      self->state.tick_pending = false;
      send_held_reports(self);
    },
    [self](flush_atom) {
      send_held_reports(self);
      return flush_atom::value;
    },
  };
}

} // namespace

caf::actor spawn_report_relay(caf::actor_system& sys, caf::actor metrics,
                              std::chrono::milliseconds interval) {
  return sys.spawn(report_relay, std::move(metrics), interval);
}

caf::actor spawn_metrics(caf::actor_system& sys, metrics_options opts,
                         caf::actor coordinator) {
  return sys.spawn(metrics, std::move(opts), std::move(coordinator));
}

} // namespace troupe::actors
