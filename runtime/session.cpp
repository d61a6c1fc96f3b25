#include "runtime/session.hpp"

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/supervisor.hpp"
#include "envs/registry.hpp"
#include "base/mutex.hpp"
#include "learners/backend.hpp"
#include "learners/stats_view.hpp"
#include "runtime/ask.hpp"
#include "runtime/cast.hpp"
#include "runtime/checkpoint_files.hpp"
#include "runtime/driver.hpp"
#include "runtime/cluster/gate.hpp"
#include "runtime/cluster/messages.hpp"
#include "runtime/cluster/data_plane.hpp"
#include "runtime/cluster/feed.hpp"
#include "runtime/cluster/node.hpp"
#include "runtime/json.hpp"
#include "runtime/resume.hpp"
#include "runtime/run_folder.hpp"
#include "runtime/system_shutdown.hpp"

namespace troupe::runtime {

namespace {

// How long one question to the actors at the run's end may take (a busy
// actor's answer is then left out).
constexpr auto progress_ask_timeout = std::chrono::seconds(2);
// How long save_checkpoint waits for a starting cast, and for the snapshot of
// the runners' and learners' states (each answers between two batches).
constexpr auto ready_timeout = std::chrono::seconds(120);
constexpr auto snapshot_timeout = std::chrono::seconds(300);
// How long the coordinator of a run across processes waits, once training
// has ended, for its workers to leave before the final checkpoint.
constexpr auto workers_leave_timeout = std::chrono::seconds(20);
// How long close() waits for a coordinator's actor system to shut down.
constexpr auto cluster_shutdown_limit = std::chrono::seconds(20);

// "FILE:LINE: key: message" for an error caused by the value of `key`.
error at_key(const config& cfg, const std::string& key, const error& e) {
  return error{e.code, fmt::format("{}: {}: {}", cfg.origin(key), key, e.message)};
}

double mean_of(const std::vector<double>& xs) {
  if (xs.empty())
    return NAN;
  double sum = 0;
  for (double x : xs)
    sum += x;
  return sum / static_cast<double>(xs.size());
}

} // namespace

struct session::state {
  config cfg;
  session_options options;
  std::string resume_dir;
  std::shared_ptr<const envs::env_spec> env;
  learners::model_spec spec;
  learners::device_choice device;
  resume_point resume;
  // The coordinator of a run across processes (cluster.listen set).
  std::optional<cluster::node_settings> node;
  // The data plane's settings, and the coordinator's place in the group when
  // it has learners (rank 0; its replica all-reduces through it).
  cluster::data_plane_settings plane;
  std::shared_ptr<cluster::deferred_group> own_group;
  cluster::endpoint listen;
  std::string token;
  caf::actor gate;

  // Created by start(); its system is ended by close() after the driver
  // thread and every caller's scoped actor are gone.
  std::unique_ptr<runtime::driver> drv;
  std::thread driver_thread; // runs the driver's loop (drive())
  // The supervisor polls it; nonzero stops the run.
  std::shared_ptr<std::atomic<int>> stop_flag = std::make_shared<std::atomic<int>>(0);

  mutable base::mutex mtx; // guards everything below
  std::condition_variable changed;
  // Set by start() under mtx before the driver thread begins, and fixed
  // after: read without the lock.
  std::string run_dir;
  run_folder_lock folder_lock; // held from start() to close()
  bool started TROUPE_GUARDED_BY(mtx) = false;
  bool finished TROUPE_GUARDED_BY(mtx) = false;
  bool closed TROUPE_GUARDED_BY(mtx) = false;
  bool ready TROUPE_GUARDED_BY(mtx) = false;
  progress_info progress TROUPE_GUARDED_BY(mtx);
  std::shared_ptr<actors::policy_store> store; // as run_dir
  // Written under mtx (by start(), the driver thread and, after the join,
  // close()); the driver thread reads what it wrote without the lock.
  cast_handles handles;
  caf::actor supervisor TROUPE_GUARDED_BY(mtx);
  // Written by the driver thread under mtx; close() reads it after the join.
  std::optional<result<training_result>> outcome;

  // One checkpoint written at a time.
  base::mutex checkpoint_mtx TROUPE_ACQUIRED_BEFORE(mtx);
  // Held by save_checkpoint while it uses the system.
  base::mutex call_mtx TROUPE_ACQUIRED_BEFORE(checkpoint_mtx, mtx);

  /// Hands a line to the caller's sink (session_options::log), if any.
  void log(actors::log_level level, const std::string& line) const {
    actors::write_log(options.log, level, line);
  }

  void drive(actors::cast_plan plan);
  std::string open_gate(const cast_handles& h, const caf::actor& supervisor);
  result<training_result> finish(caf::scoped_actor& self, run_end& end);
  result<std::string> checkpoint_with(caf::scoped_actor& self,
                                      const actors::cast_snapshot& snap);
};

result<session> session::open(const config& cfg, std::string resume_dir,
                              session_options options) {
  auto st = std::make_unique<state>();
  st->cfg = cfg;
  st->options = std::move(options);
  st->options.cast.log = st->options.log;
  st->options.cast.progress_line = st->options.progress_line;
  // "runs/NAME/" names the run NAME too (its folder's name is the run's name
  // across processes).
  std::filesystem::path resume_path(resume_dir);
  while (!resume_path.has_filename() && resume_path.has_relative_path())
    resume_path = resume_path.parent_path();
  st->resume_dir = resume_dir.empty() ? std::string{} : resume_path.string();
  auto env = envs::find_spec(cfg.get_string("env.id"));
  if (!env)
    return at_key(cfg, "env.id", env.err());
  st->env = *env;
  auto spec = model_spec_for(cfg, **env);
  if (!spec)
    return make_error(spec.err().code, "{}: model: {}",
                      cfg.source_path().empty() ? std::string{"config"}
                                                : cfg.source_path(),
                      spec.err().message);
  st->spec = *spec;
  if (auto ok = check_algorithm(cfg, *spec); !ok)
    return ok.err();
  auto device = learners::choose_device(cfg.get_string("run.device"));
  if (!device)
    return at_key(cfg, "run.device", device.err());
  st->device = *device;
  if (const auto& listen = cfg.get_string("cluster.listen"); !listen.empty()) {
    auto ep =
      cluster::parse_endpoint(listen, cfg.origin("cluster.listen") + ": cluster.listen");
    if (!ep)
      return ep.err();
    st->listen = *ep;
    auto token = cluster::run_token(cfg);
    if (!token)
      return token.err();
    st->token = *token;
    // The app identifier follows from the run folder's name (start()).
    auto node = cluster::node_settings_from(cfg, std::string{});
    if (!node)
      return node.err();
    st->node = *node;
    auto plane = cluster::data_plane_from(cfg);
    if (!plane)
      return plane.err();
    st->plane = *plane;
  } else if (cfg.get_int("algo.num_learners") == 0) {
    return make_error(errc::bad_config,
                      "{}: algo.num_learners: 0 learners only on the coordinator of a "
                      "run across processes (cluster.listen or troupe train --listen)",
                      cfg.origin("algo.num_learners"));
  }
  if (const auto slots =
        cfg.get_int("algo.num_learners") * cfg.get_int("algo.runners_per_learner");
      slots > 0 && cfg.get_int("env.slow_runners") > slots)
    return make_error(errc::bad_config,
                      "{}: env.slow_runners = {}: at most the run's runner slots, {} "
                      "(algo.num_learners = {} x algo.runners_per_learner = {})",
                      cfg.origin("env.slow_runners"), cfg.get_int("env.slow_runners"),
                      slots, cfg.get_int("algo.num_learners"),
                      cfg.get_int("algo.runners_per_learner"));
  if (!st->resume_dir.empty()) {
    auto point = read_resume_point(st->resume_dir, st->spec, cfg.get_string("env.id"),
                                   st->options.log);
    if (!point)
      return point.err();
    st->resume = std::move(*point);
    st->run_dir = st->resume_dir;
  }
  return session(std::move(st));
}

session::session(std::unique_ptr<state> st) : st_(std::move(st)) {}
session::session(session&&) noexcept = default;
session& session::operator=(session&& other) noexcept {
  if (this != &other) {
    if (st_)
      (void)close();
    st_ = std::move(other.st_);
  }
  return *this;
}

session::~session() {
  if (st_) {
    bool closed;
    {
      base::mutex_lock lock(st_->mtx);
      closed = st_->closed;
    }
    if (!closed)
      (void)close();
  }
}

namespace {
error moved_from(const char* call) {
  return make_error(errc::invalid_argument, "session::{}: the session was moved from",
                    call);
}
} // namespace

status session::start() {
  if (!st_)
    return moved_from("start");
  auto& s = *st_;
  base::mutex_lock lock(s.mtx);
  if (s.closed)
    return make_error(errc::invalid_argument, "session::start: the session is closed");
  if (s.started)
    return make_error(errc::invalid_argument,
                      "session::start: the session was started already");
  try {
    if (s.resume_dir.empty()) {
      auto dir = create_run_folder(s.cfg);
      if (!dir)
        return dir.err();
      s.run_dir = *dir;
      auto locked = run_folder_lock::take(s.run_dir);
      if (!locked)
        return locked.err();
      s.folder_lock = std::move(*locked);
    } else {
      // Before anything in the folder changes: another process may be
      // resuming or running it.
      auto locked = run_folder_lock::take(s.run_dir);
      if (!locked)
        return locked.err();
      s.folder_lock = std::move(*locked);
      if (auto ok = prepare_resumed_folder(
            s.run_dir, s.resume,
            actors::metrics_column_names(s.env->reward_terms, s.env->counters));
          !ok)
        return ok;
    }
    if (s.node) {
      // Workers that name the run, and workers that learn it from the welcome.
      s.node->app_identifiers = {
        cluster::app_identifier(std::filesystem::path(s.run_dir).filename().string()),
        cluster::any_run_identifier()};
    }
    driver_settings ds;
    ds.configure = [&s](caf::actor_system_config& c) {
      if (s.node) {
        cluster::register_cluster_messages(c);
        cluster::configure_node(c, *s.node);
      }
      c.set("scheduler.max-threads", static_cast<size_t>(s.cfg.get_int("run.threads")));
      if (s.node && s.cfg.get_int("algo.num_learners") == 0)
        // A coordinator with no learners of its own only answers messages:
        // its scheduler's threads wait on their condition variable as soon
        // as their queues are empty (an enqueue from another thread wakes
        // them), instead of CAF's default of polling every 50 us for 500
        // attempts, which took more of its CPU than its work did.
        c.set("work-stealing.moderate-poll-attempts", size_t{0});
      if (learner_threads_for(s.cfg, s.spec, s.device.kind,
                              s.options.cast.runner_factories.empty()) >= 2)
        // The learner computes on both cores while its runners wait, and
        // CAF's idle workers, polling every 50 us, would take turns with it
        // (the same runs took 1.3x as long to 475): they wait on their
        // condition variable instead.
        c.set("work-stealing.moderate-poll-attempts", size_t{0});
    };
    if (s.node) {
      // A coordinator's system may not end after a worker left (see close()).
      ds.end = system_end::bounded;
      ds.end_limit = cluster_shutdown_limit;
    }
    auto drv = driver::create(std::move(ds));
    if (!drv)
      return make_error(errc::unavailable, "session::start: {}", drv.err().message);
    s.drv = std::move(*drv);
    auto built = build_cast(s.drv->system(), s.cfg, s.spec, *s.env, s.device.kind,
                            s.run_dir, s.resume, s.options.cast);
    if (s.node) // workers' learners count too
      built.plan.cluster.emplace().end_on_done = true;
    if (s.node && !built.plan.learners.empty()) {
      // A coordinator with learners is a member of the group (rank 0).
      s.own_group =
        std::make_shared<cluster::deferred_group>("coordinator", s.plane.form_timeout);
      built.plan.replica_group = s.own_group;
      built.plan.replica = cluster::replica_options_for(
        built.plan.server, built.plan.learners.size(), "coordinator");
    } else if (s.node) {
      // One with none stays out of it: a standby replica holds the newest
      // state a member gave it (asked for through the gate at each
      // checkpoint, and given by each member as it leaves), so nothing that
      // happens per round crosses the coordinator.
      actors::standby_options so;
      so.host = "coordinator";
      so.log = s.options.log;
      built.plan.standby = so;
    }
    s.handles.spec = built.spec;
    s.handles.env_id = built.env_id;
    s.handles.algo = built.algo;
    s.handles.obs_norm = built.obs_norm;
    s.store = built.plan.store;
    s.started = true;
    s.progress.running = true;
    s.progress.env_steps = s.resume.start.env_steps;
    s.progress.updates = s.resume.start.updates;
    s.progress.episodes = s.resume.start.episodes;
    s.progress.return_mean_100 = mean_of(s.resume.start.recent_returns);
    s.driver_thread = std::thread(
      [&s, plan = std::move(built.plan)]() mutable { s.drive(std::move(plan)); });
  } catch (const std::exception& e) {
    return make_error(errc::unavailable, "session::start: {}", e.what());
  }
  return {};
}

namespace {

// The session's side of the driver's events: the handles and the progress it
// shares with the callers' threads, the coordinator's gate, the checkpoints
// and the run's end.
class session_events : public run_events {
public:
  explicit session_events(session::state& s) : s_(s) {}

  std::string on_ready(caf::scoped_actor& self, const caf::actor& supervisor,
                       const cast_handles& handles) override;
  result<std::string> on_checkpoint(caf::scoped_actor& self,
                                    const actors::cast_snapshot& snap) override;
  void on_log(actors::log_level level, const std::string& line) override;
  void on_progress(const run_progress& progress) override;
  status on_end(caf::scoped_actor& self, run_end& end) override;
  void on_done(const run_end& end, const status& outcome) override;

private:
  session::state& s_;
  std::optional<result<training_result>> result_;
};

} // namespace

void session::state::drive(actors::cast_plan plan) {
  session_events events(*this);
  try {
    caf::scoped_actor self(drv->system());
    run_settings rs;
    rs.plan = std::move(plan);
    {
      base::mutex_lock lock(mtx);
      rs.handles = handles;
    }
    rs.stop_flag = stop_flag;
    rs.log = options.log;
    rs.first_checkpoint = resume.checkpoint.empty();
    (void)drv->run(self, std::move(rs), events);
  } catch (const std::exception& e) {
    events.on_done(run_end{},
                   make_error(errc::unavailable, "the run failed: {}", e.what()));
  }
}

result<std::string> session::state::checkpoint_with(caf::scoped_actor& self,
                                                    const actors::cast_snapshot& snap) {
  base::mutex_lock lock(checkpoint_mtx);
  cast_handles h;
  {
    base::mutex_lock l(mtx);
    h = handles;
  }
  auto dir = write_checkpoint(self, h, run_dir,
                              static_cast<uint64_t>(cfg.get_int("run.seed")), snap);
  if (dir)
    prune_checkpoints(run_dir, static_cast<size_t>(cfg.get_int("run.keep_checkpoints")));
  return dir;
}

// Spawns and publishes the gate, writes cluster.json and logs the address;
// the problem, or empty.
std::string session::state::open_gate(const cast_handles& h,
                                      const caf::actor& supervisor) {
  cluster::gate_options go;
  go.token = token;
  go.config_toml = cfg.to_toml();
  go.run = std::filesystem::path(run_dir).filename().string();
  go.cast.keeper = h.keeper;
  go.cast.server = h.server;
  go.cast.metrics = h.metrics;
  go.store = store;
  go.supervisor = supervisor;
  go.runners_per_learner = static_cast<uint64_t>(cfg.get_int("algo.runners_per_learner"));
  go.log = options.log;
  go.plane = plane;
  go.own_group = own_group;
  if (own_group && supervisor) {
    // Environment-only hosts feed the group's learners through doors; the
    // coordinator's door is reached through their connection to the gate.
    cluster::door_options d;
    d.token = token;
    d.host = "coordinator";
    d.supervisor = supervisor;
    d.store = store;
    d.log = options.log;
    go.own_door = cluster::spawn_door(drv->system(), std::move(d));
  }
  gate = cluster::spawn_gate(drv->system(), std::move(go));
  if (!own_group && h.server)
    // The standby replica asks the members for their state through the gate.
    caf::anon_send(h.server, actors::source_atom::value, gate);
  // SO_REUSEADDR: a coordinator resumed on the port of one that was killed
  // binds while the killed one's connections are still in TIME_WAIT (two
  // listeners on one port are still refused).
  auto port = cluster::publish_gate(gate, listen, *node);
  if (!port)
    return fmt::format("cluster.listen {}:{}: cannot listen there: {}", listen.host,
                       listen.port, actors::error_message(drv->system(), port.error()));
  const std::string run = std::filesystem::path(run_dir).filename().string();
  const auto path = std::filesystem::path(run_dir) / "cluster.json";
  if (auto problem = cluster::write_cluster_file(path.string(), listen, *port, run);
      !problem.empty())
    return problem;
  log(actors::log_level::info,
      fmt::format("troupe: coordinator of run {} listening on {}:{}; join with: troupe "
                  "worker --connect {}:{} --run {} (or --connect-file {}, which "
                  "follows the coordinator to a new address when it is resumed)",
                  run, listen.host, static_cast<unsigned>(*port), listen.host,
                  static_cast<unsigned>(*port), run, path.string()));
  return {};
}

std::string session_events::on_ready(caf::scoped_actor&, const caf::actor& supervisor,
                                     const cast_handles& handles) {
  {
    base::mutex_lock lock(s_.mtx);
    s_.handles = handles;
    s_.supervisor = supervisor;
    s_.ready = true;
    s_.changed.notify_all();
  }
  const unsigned threads = learner_threads_for(s_.cfg, s_.spec, s_.device.kind,
                                               s_.options.cast.runner_factories.empty());
  s_.log(
    actors::log_level::info,
    fmt::format("troupe: run folder {}; learners on {} ({}){}", s_.run_dir,
                learners::to_string(s_.device.kind), s_.device.reason,
                s_.device.kind == learners::device_kind::cpu
                  ? fmt::format(", {} thread{} each", threads, threads == 1 ? "" : "s")
                  : std::string{}));
  if (!s_.node)
    return {};
  return s_.open_gate(handles, supervisor);
}

result<std::string> session_events::on_checkpoint(caf::scoped_actor& self,
                                                  const actors::cast_snapshot& snap) {
  return s_.checkpoint_with(self, snap);
}

void session_events::on_log(actors::log_level level, const std::string& line) {
  s_.log(level, line);
}

void session_events::on_progress(const run_progress& p) {
  base::mutex_lock lock(s_.mtx);
  if (p.counters) {
    s_.progress.env_steps = p.counters->env_steps;
    s_.progress.updates = p.counters->updates;
    s_.progress.episodes = p.counters->episodes;
    s_.progress.return_mean_100 = mean_of(p.counters->recent_returns);
  }
  if (p.stats_version)
    s_.progress.stats_version = *p.stats_version;
}

status session_events::on_end(caf::scoped_actor& self, run_end& end) {
  result_ = s_.finish(self, end);
  if (!*result_)
    return result_->err();
  return {};
}

void session_events::on_done(const run_end&, const status& outcome) {
  result<training_result> out = make_error(errc::unavailable, "the run did not end");
  if (result_)
    out = std::move(*result_);
  else if (!outcome)
    out = outcome.err();
  base::mutex_lock lock(s_.mtx);
  s_.outcome = std::move(out);
  s_.finished = true;
  s_.progress.running = false;
  s_.progress.finished = true;
  s_.changed.notify_all();
}

// What follows the driver's loop: the workers of a coordinator leave, the
// final checkpoint is written from the supervisor's last snapshot, and the
// cast's shared actors end.
result<training_result> session::state::finish(caf::scoped_actor& self, run_end& end) {
  auto& system = drv->system();
  std::string& failure = end.failure;
  std::string& write_failure = end.write_failure;
  const bool is_ready = end.ready;
  // Workers are told the run ends and leave before the final checkpoint, so
  // that their last gradients reach the server (bounded).
  if (gate && own_group && handles.server)
    // The coordinator's replica first: it answers its learners and starts no
    // round, so the round the leaving workers cut short ends it quietly.
    self->send(handles.server, actors::stop_atom::value);
  if (gate) {
    self->request(gate, workers_leave_timeout, actors::stop_atom::value)
      .receive([](caf::ok_atom) {},
               [&](caf::error& e) {
                 log(actors::log_level::warning, "troupe: not every worker left: " +
                                                   actors::error_message(system, e));
               });
  }
  if (gate && is_ready) {
    // What the replicas applied, the same on every host.
    if (auto status = ask_for<actors::parameter_server_status>(
          self, handles.server, progress_ask_timeout, actors::status_atom::value))
      log(actors::log_level::notice,
          fmt::format("cluster: gradients applied on every host: {} (version {})",
                      status->applied, status->version));
    if (auto r = ask_for<actors::replica_status>(
          self, handles.server, progress_ask_timeout, actors::rounds_atom::value))
      log(actors::log_level::notice,
          fmt::format("cluster: the data plane: {} rounds over {} members ({} without a "
                      "gradient), a round {:.0f} us on average and {:.0f} us at most; "
                      "{}; the weights' hash {:#018x}, checked on every member each "
                      "round",
                      r->rounds, r->group_size, r->empty_rounds,
                      r->rounds ? 1e-3 * static_cast<double>(r->round_ns_sum) /
                                    static_cast<double>(r->rounds)
                                : 0.0,
                      1e-3 * static_cast<double>(r->round_ns_max),
                      own_group
                        ? fmt::format("the coordinator's gradients {}", r->contributed)
                        : std::string{"the coordinator out of the group (a "
                                      "member's count)"},
                      r->weights_hash));
    // What the keeper merged, in all and from each worker incarnation.
    if (auto totals = ask_for<actors::stream_status>(
          self, handles.keeper, progress_ask_timeout, actors::status_atom::value)) {
      std::vector<std::string> parts;
      for (auto& [sender, n] : totals->samples_by_sender)
        parts.push_back(fmt::format("{} {}", sender, n));
      const std::string list =
        parts.empty() ? std::string{"none"} : fmt::format("{}", fmt::join(parts, ", "));
      log(actors::log_level::notice,
          fmt::format("cluster: the statistics keeper merged {} samples ({} duplicate "
                      "deltas dropped); by worker incarnation: {}",
                      totals->count, totals->duplicates, list));
    }
  }
  if (!is_ready) {
    // Nothing started (a resume whose statistics file does not load, ...).
    return end_status(end).err();
  }
  // The metrics actor stops the run itself when it cannot write its files.
  if (write_failure.empty())
    if (auto why = ask<std::string>(self, handles.metrics, actors::status_atom::value);
        why && !why->empty())
      write_failure = *why;
  if (!write_failure.empty())
    log(actors::log_level::error,
        fmt::format("troupe: stopped: {}; writing the final checkpoint", write_failure));
  else if (!failure.empty())
    log(actors::log_level::error,
        fmt::format("troupe: {}; writing a final checkpoint from what is left", failure));

  training_result out;
  out.run_dir = run_dir;
  out.interrupted = end.interrupted;
  auto final_counters =
    ask<actors::metrics_counters>(self, handles.metrics, actors::row_atom::value);
  if (final_counters) {
    out.env_steps = final_counters->env_steps;
    out.updates = final_counters->updates;
    out.return_mean_100 = mean_of(final_counters->recent_returns);
    base::mutex_lock lock(mtx);
    progress.env_steps = final_counters->env_steps;
    progress.updates = final_counters->updates;
    progress.episodes = final_counters->episodes;
    progress.return_mean_100 = out.return_mean_100;
  }
  if (!end.last_snapshot) {
    // The supervisor ended without its final snapshot: ask once more, else
    // save none (a resumed run then starts its runners and learners fresh).
    if (auto asked =
          ask<actors::cast_snapshot>(self, end.supervisor, actors::state_atom::value)) {
      end.last_snapshot = std::move(*asked);
    } else {
      log(actors::log_level::warning,
          fmt::format("troupe: the final checkpoint holds no runner or learner states "
                      "({}); a resumed run starts them fresh",
                      asked.err().message));
      end.last_snapshot.emplace();
    }
  }
  auto final_ckpt = checkpoint_with(self, *end.last_snapshot);
  if (!final_ckpt)
    log(actors::log_level::error,
        "troupe: final checkpoint failed: " + final_ckpt.err().message);
  if (gate) {
    (void)system.middleman().unpublish(gate);
    self->send_exit(gate, caf::exit_reason::user_shutdown);
  }
  // The driver ends the metrics actor, the server and the keeper next.
  if (!failure.empty())
    return make_error(errc::unavailable, "the run failed: {}", failure);
  if (!write_failure.empty())
    return make_error(errc::io_error, "the run stopped: {}", write_failure);
  if (!final_ckpt)
    return final_ckpt.err();
  return out;
}

progress_info session::progress() const {
  if (!st_)
    return {};
  std::shared_ptr<actors::policy_store> store;
  progress_info out;
  {
    base::mutex_lock lock(st_->mtx);
    out = st_->progress;
    store = st_->store;
  }
  if (const auto& dropped = st_->options.transitions_dropped)
    out.transitions_dropped = dropped->load(std::memory_order_relaxed);
  if (store)
    if (auto latest = store->latest())
      out.policy_version = latest->version;
  return out;
}

result<std::string> session::save_checkpoint() {
  if (!st_)
    return moved_from("save_checkpoint");
  auto& s = *st_;
  base::mutex_lock call(s.call_mtx);
  caf::actor sup;
  {
    base::mutex_lock lock(s.mtx);
    if (s.closed || !s.started)
      return make_error(errc::invalid_argument,
                        "session::save_checkpoint: the session {}",
                        s.closed ? "is closed" : "was not started");
    // A cast still starting up has nothing to save yet: wait for it (bounded).
    if (!lock.wait_for(s.changed, ready_timeout,
                       [&]() TROUPE_REQUIRES(s.mtx) { return s.ready || s.finished; }))
      return make_error(errc::unavailable,
                        "session::save_checkpoint: the run did not start within {} s",
                        ready_timeout.count());
    if (s.finished)
      return make_error(errc::invalid_argument,
                        "session::save_checkpoint: training has ended; close() writes "
                        "the final checkpoint");
    sup = s.supervisor;
  }
  try {
    caf::scoped_actor self(s.drv->system());
    // Held at a consistent cut while the checkpoint is written (see
    // runtime::driver::run).
    auto snap = ask_for<actors::cast_snapshot>(self, sup, snapshot_timeout,
                                               actors::hold_atom::value);
    if (!snap) {
      // The run may have reached its end between the check above and the
      // ask (its supervisor is then gone): wait for the session to see it
      // (bounded) and say so as above, not as a failure of the cast.
      base::mutex_lock lock(s.mtx);
      if (lock.wait_for(s.changed, ready_timeout,
                        [&]() TROUPE_REQUIRES(s.mtx) { return s.finished; }))
        return make_error(errc::invalid_argument,
                          "session::save_checkpoint: training has ended; close() writes "
                          "the final checkpoint");
      return make_error(snap.err().code,
                        "session::save_checkpoint: no snapshot of the cast: {}",
                        snap.err().message);
    }
    auto written = s.checkpoint_with(self, *snap);
    self->send(sup, actors::release_atom::value);
    return written;
  } catch (const std::exception& e) {
    return make_error(errc::unavailable, "session::save_checkpoint: {}", e.what());
  }
}

void session::request_stop() {
  if (st_)
    st_->stop_flag->store(1);
}

result<bool> session::wait(std::chrono::milliseconds timeout) {
  if (!st_)
    return moved_from("wait");
  base::mutex_lock lock(st_->mtx);
  if (st_->closed)
    return make_error(errc::invalid_argument, "session::wait: the session is closed");
  if (!st_->started)
    return make_error(errc::invalid_argument,
                      "session::wait: the session was not started");
  return lock.wait_for(st_->changed, timeout,
                       [&]() TROUPE_REQUIRES(st_->mtx) { return st_->finished; });
}

result<training_result> session::close() {
  if (!st_)
    return moved_from("close");
  auto& s = *st_;
  {
    base::mutex_lock lock(s.mtx);
    if (s.closed)
      return make_error(errc::invalid_argument, "session::close: closed already");
    s.closed = true;
    if (!s.started) {
      training_result empty;
      empty.run_dir = s.run_dir;
      empty.return_mean_100 = NAN;
      return empty;
    }
    if (!s.finished)
      s.stop_flag->store(1);
  }
  if (s.driver_thread.joinable())
    s.driver_thread.join();
  {
    // A save_checkpoint under way on another thread ends before the system goes.
    base::mutex_lock call(s.call_mtx);
    {
      // Actor handles go before the system they belong to.
      base::mutex_lock lock(s.mtx);
      s.handles.keeper = s.handles.server = s.handles.metrics = caf::actor{};
      s.supervisor = caf::actor{};
      s.gate = caf::actor{};
    }
    // A coordinator's system ends within cluster_shutdown_limit (start()).
    if (!s.drv->end_system() && s.node) {
      // Seen about once in 20 runs of the cluster tests under load, after a
      // worker left or was lost: the detached parameter server had ended but
      // was still referenced once (gdb showed the count), so ~actor_system
      // waited forever. The holder was not identified; the likeliest is CAF
      // 0.17.6's middleman, whose BASP broker AddressSanitizer finds left in
      // a reference cycle at shutdown with one mailbox element.
      s.log(actors::log_level::warning,
            fmt::format("troupe: the actor system did not shut down within {} s of the "
                        "run's end (an ended actor of the run is still referenced, most "
                        "likely by CAF's network layer after a host left); it is left to "
                        "its thread, and the run's files are complete",
                        static_cast<long long>(cluster_shutdown_limit.count())));
      if (s.outcome && *s.outcome)
        (*s.outcome)->actor_system_left = true;
    }
  }
  base::mutex_lock lock(s.mtx);
  s.progress.running = false;
  s.folder_lock = run_folder_lock{}; // the run's files are complete
  return std::move(*s.outcome);
}

std::string session::run_dir() const {
  if (!st_)
    return {};
  base::mutex_lock lock(st_->mtx);
  return st_->run_dir;
}

} // namespace troupe::runtime
