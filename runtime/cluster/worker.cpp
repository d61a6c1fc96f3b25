#include "runtime/cluster/worker.hpp"
#include "runtime/cluster/data_plane.hpp"
#include "runtime/cluster/feed.hpp"
#include "actors/replica.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "actors/delta_outbox.hpp"
#include "actors/stats_relay.hpp"
#include "actors/messages.hpp"
#include "actors/supervisor.hpp"
#include "envs/registry.hpp"
#include "base/mutex.hpp"
#include "learners/backend.hpp"
#include "runtime/cast.hpp"
#include "runtime/cluster/messages.hpp"
#include "runtime/config.hpp"
#include "runtime/driver.hpp"
#include "runtime/resume.hpp"

namespace troupe::cluster {

namespace {

// How long one join request may take, how long the worker waits between two
// attempts to reach the coordinator, and how long its learners may take to
// end their batches once the run has ended.
constexpr auto join_timeout = std::chrono::seconds(30);
constexpr auto connect_retry = std::chrono::milliseconds(250);
constexpr auto stop_timeout = std::chrono::seconds(10);
// How long a joining replica host waits for the coordinator's replica state.
constexpr auto state_ask_timeout = std::chrono::seconds(10);
// One flush of the delta outbox at the end (it asks the keeper, 5 s at most).
constexpr auto flush_timeout = std::chrono::seconds(10);
// How long a worker whose learners spent the step budget waits for the
// coordinator to end the run.
constexpr auto end_wait = std::chrono::seconds(60);
// How long ending the actor system of a worker that never reached the
// coordinator may take.
constexpr auto unreached_end_limit = std::chrono::seconds(10);

// The host's policy store, set once the welcome has told the model's shape;
// versions pushed before that are kept (the newest) and published then.
struct host_cache {
  base::mutex mtx;
  std::shared_ptr<actors::policy_store> store TROUPE_GUARDED_BY(mtx);
  std::optional<policy_push> pending TROUPE_GUARDED_BY(mtx);
  std::string problem TROUPE_GUARDED_BY(mtx); // the first push that did not fit the model
  // An environment-only host fed through the doors: its feed, which takes the
  // gate's lists of open doors.
  caf::actor feed TROUPE_GUARDED_BY(mtx);

  void publish(const policy_push& p) TROUPE_REQUIRES(mtx) {
    auto latest = store->latest();
    if (p.params.size() != latest->model.param_count() ||
        p.buffers.size() != latest->model.buffer_count()) {
      if (problem.empty())
        problem = fmt::format("policy version {} has {} params and {} buffers, this "
                              "worker's model {} and {}",
                              p.version, p.params.size(), p.buffers.size(),
                              latest->model.param_count(), latest->model.buffer_count());
      return;
    }
    if (p.version > latest->version)
      store->publish(p.version, p.params.data(), p.buffers.data());
  }
  void take(policy_push p) {
    base::mutex_lock lock(mtx);
    if (store)
      publish(p);
    else if (!pending || pending->version < p.version)
      pending = std::move(p);
  }
  void set_store(std::shared_ptr<actors::policy_store> s) {
    base::mutex_lock lock(mtx);
    store = std::move(s);
    if (pending)
      publish(*pending);
    pending.reset();
  }
};

// Asks this host's replica for `atom` and hands its answer to `rp`.
template <class Answer, class Atom>
void forward_to_replica(caf::event_based_actor* self, caf::actor replica,
                        caf::typed_response_promise<Answer> rp, Atom atom) {
  if (!replica) {
    rp.deliver(actors::to_caf_error(
      make_error(errc::unavailable, "this host has no replica (yet)")));
    return;
  }
  self->request(replica, state_ask_timeout, atom)
    .then([rp](Answer& a) mutable { rp.deliver(std::move(a)); },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
}

// The worker's host actor: forms the host's place in the group, takes the
// policy versions an environment-only host's feed hands it, and passes the
// run's end on to the driver.
caf::behavior host_actor(caf::event_based_actor* self, std::shared_ptr<host_cache> cache,
                         std::shared_ptr<host_plane> plane, caf::actor driver) {
  return {
    [plane](form_atom, uint64_t epoch, uint64_t rank, uint64_t size) {
      // The data plane's group forms: this host's replica takes rank `rank`.
      plane->form(epoch, rank, size);
    },
    [cache](policy_push& p) {
      const uint64_t version = p.version;
      cache->take(std::move(p));
      return version; // the feed pushes the next one once this is in
    },
    // A coordinator out of the group asks for this host's replica (its state
    // for a checkpoint or a joining host, its rounds).
    [self, plane](actors::state_atom a) -> caf::result<actors::parameter_server_state> {
      auto rp = self->make_response_promise<actors::parameter_server_state>();
      forward_to_replica(self, plane->replica(), rp, a);
      return rp;
    },
    [self, plane](actors::rounds_atom a) -> caf::result<actors::replica_status> {
      auto rp = self->make_response_promise<actors::replica_status>();
      forward_to_replica(self, plane->replica(), rp, a);
      return rp;
    },
    [cache](doors_atom a, std::vector<door_info>& doors) {
      caf::actor feed;
      {
        base::mutex_lock lock(cache->mtx);
        feed = cache->feed;
      }
      if (feed)
        caf::anon_send(feed, a, std::move(doors));
    },
    [self, driver, plane, cache](actors::stop_atom) {
      plane->stop(); // the replica answers its learners and leaves the rounds
      caf::actor feed;
      {
        base::mutex_lock lock(cache->mtx);
        feed = cache->feed;
      }
      if (feed) // the learner hosts leave now: not a loss
        self->send(feed, actors::stop_atom::value);
      self->send(driver, actors::stop_atom::value);
    },
  };
}

// The runners an environment-only host runs for the learner hosts' learners.
uint64_t req_guest_runners(const worker_options& opts) {
  return opts.learners == 0 ? opts.runners : 0;
}

// The CPUs this process may run on (its affinity mask); 1 at least.
uint64_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return static_cast<uint64_t>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

error worker_error(const std::string& message) {
  return make_error(errc::unavailable, "{}", message);
}

} // namespace

struct worker::state {
  worker_options opts;
  std::string token;
  // How long it tries to reach the coordinator.
  std::chrono::steady_clock::time_point deadline;
  endpoint at;     // the coordinator's address
  std::string run; // the run's name (empty: any, until the welcome)
  std::string where;
  node_settings ns;
  // Owns the actor system, left running at the end (system_end::leave).
  std::unique_ptr<runtime::driver> drv;
  caf::actor gate;

  // Set by join(); the scoped actor runs the driver's loop on the caller's
  // thread (the host actor passes the run's end on to it).
  std::unique_ptr<caf::scoped_actor> self;
  std::optional<welcome> w;
  std::shared_ptr<host_cache> cache;
  std::shared_ptr<host_plane> plane; // where the group forms
  caf::actor host, outbox, relay, reports, replica;
  // A learner host's feed door, or an environment-only host's feed
  // (runtime/cluster/feed.hpp).
  caf::actor door, feed;
  std::optional<data_plane_settings> plane_settings;
  std::shared_ptr<actors::policy_store> store; // this host's
  uint64_t threads = 0;                        // the actor system's scheduler threads
  std::optional<actors::cast_plan> plan;
  runtime::cast_handles handles;
  uint64_t runners_per_learner = 0;
  learners::device_kind device = learners::device_kind::cpu;
  bool join_tried = false;
  bool ran = false;

  std::string where_of() const {
    return opts.connect_file.empty()
             ? fmt::format("{}:{} (run {})", at.host, at.port,
                           run.empty() ? std::string{"not named: any"} : run)
             : fmt::format("{}:{} (run {}, from {})", at.host, at.port, run,
                           opts.connect_file);
  }
  void log(actors::log_level level, const std::string& line) const {
    actors::write_log(opts.log, level, line);
  }
};

namespace {

// The worker's side of the driver's events: the joined line at ready, and,
// once the loop has ended, the wait for the coordinator's end, the flush of
// the host's deltas and the way it ended.
class worker_events : public runtime::run_events {
public:
  explicit worker_events(worker::state& s) : s_(s) {}

  std::string on_ready(caf::scoped_actor&, const caf::actor& supervisor,
                       const runtime::cast_handles&) override {
    const auto& opts = s_.opts;
    if (req_guest_runners(opts) > 0) {
      s_.log(actors::log_level::info,
             fmt::format("troupe: worker {} joined the run at {}: {} runners feeding "
                         "the learners of {} learner host(s)",
                         opts.name, s_.where, req_guest_runners(opts),
                         s_.w->doors.size()));
      return {};
    }
    if (s_.plane_settings && opts.learners > 0)
      open_door(supervisor);
    s_.log(actors::log_level::info,
           fmt::format("troupe: worker {} joined the run at {}: learners "
                       "{}, {} runners each, on {}; {} scheduler thread(s)",
                       opts.name, s_.where, fmt::join(s_.w->learner_names, ", "),
                       s_.runners_per_learner, learners::to_string(s_.device),
                       s_.threads));
    return {};
  }

  void on_log(actors::log_level level, const std::string& line) override {
    s_.log(level, line);
  }

  status on_end(caf::scoped_actor& self, runtime::run_end& end) override;

  /// How the run ended, once on_end has run.
  worker_end how = worker_end::ended;

private:
  // A learner host's feed door for environment-only hosts: published on the
  // run's data interface, and told to the gate (which names it to them).
  void open_door(const caf::actor& supervisor) {
    door_options o;
    o.token = s_.token;
    o.host = s_.opts.name;
    o.supervisor = supervisor;
    o.store = s_.store;
    o.log = s_.opts.log;
    s_.door = spawn_door(supervisor.home_system(), std::move(o));
    const endpoint at{s_.plane_settings->interface, 0};
    auto port = publish_actor(s_.door, at, s_.ns, false);
    if (!port) {
      s_.log(actors::log_level::warning,
             fmt::format("troupe: worker {}: cannot open its feed door on {} ({}); no "
                         "environment-only host can feed its learners",
                         s_.opts.name, at.host,
                         actors::error_message(supervisor.home_system(), port.error())));
      return;
    }
    caf::anon_send(s_.gate, door_atom::value, s_.token,
                   door_info{s_.opts.name, at.host, *port, caf::actor{}});
    s_.log(actors::log_level::info,
           fmt::format("troupe: worker {}: its feed door for environment-only hosts "
                       "listens on {}:{}",
                       s_.opts.name, at.host, *port));
  }

  worker::state& s_;
};

status worker_events::on_end(caf::scoped_actor& self, runtime::run_end& end) {
  const auto& opts = s_.opts;
  const bool gate_lost = !end.lost.empty();
  if (end.grace_spent)
    s_.log(actors::log_level::warning,
           fmt::format("troupe: worker {}: the learners did not end "
                       "within {} s of the run's end; leaving",
                       opts.name, static_cast<long long>(stop_timeout.count())));
  if (!gate_lost)
    // The learners have ended: their last reports go out now, not at the
    // relay's next tick (the coordinator counts the run's steps from them).
    self->request(s_.reports, flush_timeout, actors::flush_atom::value)
      .receive([](actors::flush_atom) {},
               [&](caf::error& e) {
                 s_.log(actors::log_level::warning,
                        fmt::format("troupe: worker {}: the last learner reports were "
                                    "not sent: {}",
                                    opts.name, actors::error_message(self->system(), e)));
               });
  if (!gate_lost && s_.replica) {
    // This host's replica as it ends its rounds, for a coordinator out of the
    // group (its final checkpoint and closing lines); one that is in the
    // group ignores it.
    std::optional<actors::parameter_server_state> last;
    std::optional<actors::replica_status> rounds;
    self->request(s_.replica, state_ask_timeout, actors::state_atom::value)
      .receive([&](actors::parameter_server_state& st) { last = std::move(st); },
               [](caf::error&) {});
    self->request(s_.replica, state_ask_timeout, actors::rounds_atom::value)
      .receive([&](actors::replica_status& r) { rounds = r; }, [](caf::error&) {});
    if (last && rounds)
      self->send(s_.gate, final_state_atom::value, s_.token, opts.name, std::move(*last),
                 *rounds);
  }
  if (!gate_lost && !end.stop_asked && end.failure.empty()) {
    // This host's learners used up the step budget on their own count before
    // the coordinator said the run ends (its count comes from the learners'
    // reports, which may still be on the way): the budget is spent for the
    // whole run, so the coordinator is told, and this process stays connected
    // until it says stop, so that nothing it sent is cut off. Bounded.
    self->send(s_.gate, actors::done_atom::value, opts.name);
    const auto until = std::chrono::steady_clock::now() + end_wait;
    bool waiting = true;
    while (waiting) {
      self->receive(
        [&](actors::stop_atom) {
          end.stop_asked = true;
          waiting = false;
        },
        [&](caf::down_msg& down) {
          if (down.source == s_.gate.address())
            waiting = false;
        },
        [&](actors::done_atom, bool, std::string&) {},
        caf::after(runtime::progress_every) >>
          [&] {
            if (std::chrono::steady_clock::now() >= until) {
              s_.log(
                actors::log_level::warning,
                fmt::format("troupe: worker {}: the step budget is spent here, and the "
                            "coordinator did not end the run within {} s; leaving",
                            opts.name, static_cast<long long>(end_wait.count())));
              waiting = false;
            }
          });
    }
  }
  if (!gate_lost) {
    // Every runner has ended (the supervisor waits for them): what the
    // keeper acknowledged of this host's deltas, once nothing is unacknowledged.
    std::optional<actors::delta_outbox_status> acked;
    for (int attempt = 0; attempt < 5; ++attempt) {
      bool settled = false;
      self->request(s_.outbox, flush_timeout, actors::flush_atom::value)
        .receive(
          [&](actors::delta_outbox_status& st) {
            settled = st.unacked == 0 && st.held == 0;
            acked = st;
          },
          [&](caf::error&) {});
      if (settled)
        break;
    }
    if (acked)
      s_.log(actors::log_level::info,
             fmt::format("troupe: worker {}: the statistics keeper acknowledged {} "
                         "delta(s) ({} samples) from this host{}",
                         opts.name, acked->acked_deltas, acked->acked_samples,
                         acked->unacked + acked->held > 0 ? ", some still unacknowledged"
                                                          : ""));
  }
  if (s_.feed && s_.store)
    s_.log(actors::log_level::info,
           fmt::format("troupe: worker {}: its runners acted with policy versions up "
                       "to {} (from the learner hosts)",
                       opts.name, s_.store->latest()->version));
  self->send_exit(s_.outbox, caf::exit_reason::user_shutdown);
  self->send_exit(s_.relay, caf::exit_reason::user_shutdown);
  self->send_exit(s_.reports, caf::exit_reason::user_shutdown);
  for (auto* a : {&s_.door, &s_.feed})
    if (*a)
      self->send_exit(*a, caf::exit_reason::user_shutdown);
  if (gate_lost && !end.stop_asked) {
    // The coordinator is gone (or has declared this host lost while it was
    // stopped or cut off, and refuses what it still sends): this process's
    // learners may wait forever on a group that moved on, so the caller starts a
    // new process, which joins again as a new incarnation.
    s_.log(actors::log_level::warning,
           fmt::format("troupe: worker: {}: lost the coordinator at {} ({}); "
                       "trying to rejoin as a new incarnation for up to {} s "
                       "(--reconnect-s)",
                       opts.name, s_.where, end.lost, opts.reconnect_s));
    how = worker_end::rejoin;
    return {};
  }
  self->send_exit(s_.host, caf::exit_reason::user_shutdown);
  if (!end.failure.empty() && !end.stop_asked)
    return worker_error(fmt::format("{}: {}", opts.name, end.failure));
  s_.log(actors::log_level::info,
         fmt::format("troupe: worker {}: the run ended", opts.name));
  return {};
}

} // namespace

worker::worker(std::unique_ptr<state> st) : st_(std::move(st)) {}
worker::worker(worker&&) noexcept = default;
worker& worker::operator=(worker&&) noexcept = default;
worker::~worker() {
  if (st_) {
    // Actor handles go before the driver, which leaves the system running.
    st_->self.reset();
    st_->gate = st_->host = st_->outbox = st_->relay = caf::actor{};
    st_->door = st_->feed = caf::actor{};
    st_->store.reset();
    st_->w.reset();
    st_->plan.reset();
    st_->handles = runtime::cast_handles{};
  }
}

// -- connect ------------------------------------------------------------------

result<worker> worker::connect(const worker_options& opts) {
  auto st = std::make_unique<state>();
  auto& s = *st;
  s.opts = opts;
  s.token = opts.token;
  if (s.token.empty())
    if (const char* env = std::getenv(token_variable))
      s.token = env;
  if (s.token.empty())
    return worker_error(fmt::format("no token: set the environment variable {} to the "
                                    "run's cluster.token",
                                    token_variable));
  s.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.reconnect_s);
  if (opts.rejoin_until_ms > 0) {
    // A restart after the coordinator was lost: the same deadline as the
    // process that lost it.
    const auto until = std::chrono::system_clock::time_point(
      std::chrono::milliseconds(opts.rejoin_until_ms));
    s.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   until - std::chrono::system_clock::now());
  }

  // The coordinator's address and the run: given, or from its cluster.json,
  // which may not be written yet (workers started with the coordinator).
  s.at = opts.connect;
  s.run = opts.run;
  if (!opts.connect_file.empty()) {
    bool said_wait = false;
    for (;;) {
      auto f = read_cluster_file(opts.connect_file);
      if (f) {
        if (!opts.run.empty() && f->run != opts.run)
          return worker_error(
            fmt::format("--run {}: {} is the coordinator's file of run {}", opts.run,
                        opts.connect_file, f->run));
        s.at = f->connect;
        s.run = f->run;
        break;
      }
      if (std::chrono::steady_clock::now() >= s.deadline)
        return worker_error(fmt::format("cannot read the coordinator's address within "
                                        "{} s (--reconnect-s): {}",
                                        opts.reconnect_s, f.err().message));
      if (!said_wait) {
        s.log(actors::log_level::notice,
              fmt::format("troupe: worker: {}; reading it again until "
                          "--reconnect-s {} s",
                          f.err().message, opts.reconnect_s));
        said_wait = true;
      }
      std::this_thread::sleep_for(connect_retry); // back-off between attempts
    }
  }
  s.where = s.where_of();

  s.ns.heartbeat_ms = opts.heartbeat_ms;
  s.ns.timeout_ms = opts.timeout_ms;
  s.ns.app_identifiers = {s.run.empty() ? any_run_identifier() : app_identifier(s.run)};
  s.ns.tls = opts.tls;

  runtime::driver_settings ds;
  s.threads = opts.threads > 0 ? opts.threads : usable_cpus();
  ds.configure = [&s](caf::actor_system_config& c) {
    register_cluster_messages(c);
    configure_node(c, s.ns);
    c.set("scheduler.max-threads", static_cast<size_t>(s.threads));
  };
  // Until run() nothing of this system waits on another process: a worker
  // that gives up before ends it (bounded).
  ds.end = runtime::system_end::bounded;
  ds.end_limit = unreached_end_limit;
  auto drv = runtime::driver::create(std::move(ds));
  if (!drv)
    return worker_error(drv.err().message);
  s.drv = std::move(*drv);
  auto& sys = s.drv->system();

  // -- reach the coordinator (bounded) ---------------------------------------
  for (;;) {
    auto g = connect_gate(sys, s.at, s.ns);
    if (g) {
      s.gate = *g;
      break;
    }
    if (std::chrono::steady_clock::now() >= s.deadline)
      return worker_error(
        fmt::format("{} the coordinator at {} within {} s "
                    "(--reconnect-s; a coordinator of another run "
                    "refuses the connection): {}",
                    opts.rejoin_until_ms > 0 ? "lost the coordinator and could not reach"
                                             : "cannot reach",
                    s.where, opts.reconnect_s, actors::error_message(sys, g.error())));
    std::this_thread::sleep_for(connect_retry); // back-off between attempts
    if (!opts.connect_file.empty()) {
      // A coordinator resumed elsewhere rewrote it; a file being replaced
      // or gone for a moment keeps the last address.
      if (auto f = read_cluster_file(opts.connect_file); f && f->run == s.run) {
        s.at = f->connect;
        s.where = s.where_of();
      }
    }
  }
  return worker(std::move(st));
}

// -- join ---------------------------------------------------------------------

namespace {

// worker::join's steps: the join request and this host's cast.
status join_run(worker::state& s) {
  const auto& opts = s.opts;
  auto& sys = s.drv->system();
  s.self = std::make_unique<caf::scoped_actor>(sys);
  auto& self = *s.self;
  s.cache = std::make_shared<host_cache>();
  s.plane = std::make_shared<host_plane>();
  s.host = sys.spawn(host_actor, s.cache, s.plane, caf::actor_cast<caf::actor>(self));
  join_request req;
  req.protocol = protocol_version;
  req.name = opts.name;
  req.incarnation = actors::random_incarnation();
  const uint64_t incarnation = req.incarnation;
  req.learners = opts.learners;
  req.runners_per_learner = opts.runners_per_learner;
  req.guest_runners = opts.learners == 0 ? opts.runners : 0;
  req.device = opts.device.empty() ? "(the run's)" : opts.device;
  req.token = s.token;
  req.host = s.host;
  std::optional<welcome> w;
  std::string refused;
  bool said_retry = false;
  for (;;) {
    bool for_now = false; // refused until a lost host of the name is declared lost
    self->request(s.gate, join_timeout, req)
      .receive([&](welcome& x) { w = std::move(x); },
               [&](caf::error& e) {
                 refused = actors::error_message(sys, e);
                 for_now = e.category() == actors::error_category &&
                           e.code() == static_cast<uint8_t>(errc::unavailable);
               });
    if (w || !for_now || std::chrono::steady_clock::now() >= s.deadline)
      break;
    if (!said_retry) {
      s.log(actors::log_level::notice,
            fmt::format("troupe: worker: {}; asking again until --reconnect-s "
                        "{} s",
                        refused, opts.reconnect_s));
      said_retry = true;
    }
    std::this_thread::sleep_for(connect_retry); // back-off between attempts
  }
  if (!w)
    return worker_error(
      fmt::format("'{}' could not join the run at {}: {}", opts.name, s.where, refused));
  if (s.run.empty()) { // no --run: the coordinator's welcome names it
    s.run = w->run;
    s.where = s.where_of();
    // From now on this host connects to, or is reached by, other hosts of
    // the run only (the learner hosts' feed doors).
    use_run_identifier(sys, s.run);
  } else if (w->run != s.run) {
    return worker_error(
      fmt::format("--run {}: the coordinator at {} runs {}", s.run, s.where, w->run));
  }
  // -- the cast of this host ---------------------------------------------------
  auto cfg = runtime::parse_config(w->config_toml, "the config of the run at " + s.where);
  if (!cfg)
    return worker_error(cfg.err().message);
  const uint64_t rpl =
    opts.runners_per_learner > 0
      ? opts.runners_per_learner
      : static_cast<uint64_t>(cfg->get_int("algo.runners_per_learner"));
  cfg->set("algo.num_learners", static_cast<int64_t>(opts.learners), "troupe worker");
  cfg->set("algo.runners_per_learner", static_cast<int64_t>(rpl), "troupe worker");
  if (!opts.device.empty())
    cfg->set("run.device", opts.device, "troupe worker --device");
  // Each host's runners and learners draw their own random numbers.
  const auto seed = static_cast<uint64_t>(cfg->get_int("run.seed"));
  cfg->set("run.seed",
           static_cast<int64_t>((seed + 104729 * (w->host_index + 1)) % 4294967296ull),
           "troupe worker (per host)");
  auto env = envs::find_spec(cfg->get_string("env.id"));
  if (!env)
    return worker_error(env.err().message);
  auto spec = runtime::model_spec_for(*cfg, **env);
  if (!spec)
    return worker_error(spec.err().message);
  auto device = learners::choose_device(cfg->get_string("run.device"));
  if (!device)
    return worker_error("--device: " + device.err().message);
  const runtime::resume_point fresh_start; // a worker never resumes
  runtime::cast_options worker_cast;
  worker_cast.log = opts.log;
  auto built = runtime::build_cast(sys, *cfg, *spec, **env, device->kind, std::string{},
                                   fresh_start, worker_cast);
  auto& plan = built.plan;
  if (w->learner_names.size() != plan.learners.size())
    return worker_error(fmt::format("the coordinator named {} learners for the {} asked",
                                    w->learner_names.size(), plan.learners.size()));
  // Exactly once across the network (docs/cluster.md): the host's moment
  // deltas go through one outbox that stamps them with (name, incarnation,
  // sequence) and keeps them until the keeper acknowledges them; each
  // learner's gradients to the host's replica carry the same identity and
  // their own sequence. When the coordinator declares this host lost it
  // fences the incarnation at the keeper, and whatever this process still
  // sends there is refused.
  actors::delta_outbox_options oo;
  oo.worker = opts.name;
  oo.incarnation = incarnation;
  oo.log = opts.log;
  oo.interval = std::chrono::milliseconds(cfg->get_int("cluster.stats_interval_ms"));
  s.outbox = actors::spawn_delta_outbox(sys, oo, w->keeper);
  auto& cluster = plan.cluster.emplace();
  cluster.deltas = s.outbox;
  // One subscription per statistics stream for the whole host: the relay
  // hands each snapshot from the keeper to the host's views.
  s.relay = actors::spawn_stats_relay(sys, w->keeper);
  cluster.views = s.relay;
  for (size_t i = 0; i < plan.learners.size(); ++i) {
    auto& lo = plan.learners[i].options;
    lo.name = w->learner_names[i];
    auto& lc = lo.cluster.emplace();
    lc.worker = opts.name;
    lc.incarnation = incarnation;
    lc.gradient_sequence = std::make_shared<std::atomic<uint64_t>>(0);
    // Async: the next gradient is computed while the answer to the last one
    // crosses the wire (actors/learner.hpp, gradients_in_flight).
    lc.gradients_in_flight = lo.pipelined ? 1 : 0;
    lo.local_optimizer = false; // the host's replica applies the group's sum
  }
  // The config's data_interface is the coordinator's: a member of the
  // all-reduce group binds its own (no other host binds a data port).
  if (opts.learners == 0) {
    // Nothing to bind.
  } else if (!opts.data_interface.empty()) {
    cfg->set("cluster.data_interface", opts.data_interface,
             "troupe worker --data-interface");
  } else {
    auto own = source_address_toward(s.at);
    if (!own)
      return worker_error(fmt::format("the address of this host's data port: {} (give "
                                      "--data-interface)",
                                      own.err().message));
    cfg->set("cluster.data_interface", *own,
             "troupe worker (the address its connection to the coordinator at " +
               s.where + " leaves from)");
  }
  auto plane = data_plane_from(*cfg);
  if (!plane)
    return worker_error(plane.err().message);
  s.plane_settings = *plane;
  if (req_guest_runners(opts) > 0) {
    cluster.guest_runners = req_guest_runners(opts);
    cluster.guest_prefix = opts.name;
    // The runners feed the learner hosts' learners through their doors, and
    // the host takes its policy versions from one of them.
    if (w->doors.empty())
      return worker_error("the coordinator named no learner host for this host's "
                          "runners");
    guest_feed_options fo;
    fo.token = s.token;
    fo.host = opts.name;
    fo.doors = w->doors;
    fo.node = s.ns;
    fo.policy_taker = s.host;
    fo.log = opts.log;
    s.feed = spawn_guest_feed(sys, std::move(fo));
    {
      base::mutex_lock lock(s.cache->mtx);
      s.cache->feed = s.feed;
    }
    cluster.feed_learners = {s.feed};
  }
  caf::actor server = w->server;
  if (opts.learners > 0) {
    // This host's replica of the parameter server takes its learners'
    // gradients; the group it all-reduces through forms once the coordinator
    // says so (every member host has joined).
    auto group = std::make_shared<deferred_group>(opts.name, plane->form_timeout);
    // It starts from the coordinator's state: a member's weights, Adam state
    // and counters, or a resumed checkpoint's when no member is up yet (a
    // coordinator out of the group holds that in its standby replica). So
    // its learners' first gradients are not taken for stale ones, and a
    // group that forms first from this host (rank 0) goes on with Adam's
    // moments as they were. The group's first exchange then hands every
    // member the state of the member with the most rounds. When the
    // coordinator does not answer, the welcome's weights and version, with
    // Adam at zero.
    actors::parameter_server_state start;
    bool asked = false;
    (*s.self)
      ->request(w->server, state_ask_timeout, actors::state_atom::value)
      .receive(
        [&](actors::parameter_server_state& st) {
          if (st.params.size() == w->weights.params.size() &&
              st.buffers.size() == w->weights.buffers.size() &&
              st.adam_m.size() == st.params.size() &&
              st.adam_v.size() == st.params.size()) {
            start = std::move(st);
            asked = true;
          }
        },
        [&](caf::error& e) {
          s.log(actors::log_level::warning,
                fmt::format("troupe: worker {}: the coordinator did not give its "
                            "replica's state ({}); starting from the welcome's weights "
                            "with Adam at zero",
                            opts.name, actors::error_message(sys, e)));
        });
    if (asked)
      s.log(actors::log_level::info,
            fmt::format("troupe: worker {}: its replica starts from the coordinator's "
                        "state at version {} (Adam step {})",
                        opts.name, start.version, start.adam_steps));
    if (!asked) {
      start = actors::parameter_server_state{};
      start.version = w->weights.version;
      start.params = w->weights.params;
      start.buffers = w->weights.buffers;
      start.adam_m.assign(start.params.size(), 0.0f);
      start.adam_v.assign(start.params.size(), 0.0f);
    }
    s.replica = actors::spawn_replica(
      sys, replica_options_for(plan.server, plan.learners.size(), opts.name), group,
      w->weights.params, w->weights.buffers, plan.store, std::move(start));
    server = s.replica;
    s.plane->attach(group, &sys, s.gate, s.token, *plane, s.replica);
  }
  // The learners' reports reach the coordinator's metrics actor as one
  // message per host per interval.
  s.reports = actors::spawn_report_relay(
    sys, w->metrics,
    std::chrono::milliseconds(cfg->get_int("cluster.metrics_interval_ms")));
  cluster.existing = actors::shared_actors{w->keeper, server, s.reports};
  s.cache->take(std::move(w->weights));
  s.cache->set_store(plan.store);
  s.store = plan.store;
  {
    base::mutex_lock lock(s.cache->mtx);
    if (!s.cache->problem.empty())
      return worker_error(s.cache->problem);
  }

  s.runners_per_learner = rpl;
  s.device = device->kind;
  s.handles.spec = built.spec;
  s.handles.env_id = built.env_id;
  s.handles.algo = built.algo;
  s.handles.obs_norm = built.obs_norm;
  s.plan = std::move(plan);
  s.w = std::move(w);
  return {};
}

} // namespace

status worker::join() {
  if (!st_ || !st_->gate || st_->join_tried)
    return make_error(errc::invalid_argument,
                      "worker::join: once, after a successful connect()");
  auto& s = *st_;
  s.join_tried = true;
  auto joined = join_run(s);
  if (!joined && s.self) {
    // Nothing of this host waits on the coordinator yet: its actors end, so
    // that its system can end with the worker (bounded).
    for (auto* a : {&s.host, &s.outbox, &s.relay, &s.reports, &s.replica, &s.feed})
      if (*a) {
        (*s.self)->send_exit(*a, caf::exit_reason::user_shutdown);
        *a = caf::actor{};
      }
    s.self.reset();
  }
  return joined;
}

// -- run ----------------------------------------------------------------------

result<worker_end> worker::run() {
  if (!st_ || !st_->plan || st_->ran)
    return make_error(errc::invalid_argument,
                      "worker::run: once, after a successful join()");
  auto& s = *st_;
  s.ran = true;
  // From now on a learner may come to wait on the coordinator's actors
  // forever: the system is left to the process's end (worker.hpp).
  s.drv->set_end(runtime::system_end::leave);
  // Until the coordinator ends the run: its stop_atom (through the host
  // actor) stops the cast, which then has stop_timeout to end; losing the
  // gate ends the loop at once.
  runtime::run_settings rs;
  rs.plan = std::move(*s.plan);
  s.plan.reset();
  rs.handles = s.handles;
  rs.log = s.opts.log;
  rs.periodic_checkpoints = false; // the coordinator writes the checkpoints
  rs.refresh_progress = false;     // and shows the progress
  rs.watched = {s.gate};
  rs.stop_grace = stop_timeout;
  worker_events events(s);
  auto outcome = s.drv->run(*s.self, std::move(rs), events);
  if (!outcome)
    return outcome.err();
  return events.how;
}

} // namespace troupe::cluster
