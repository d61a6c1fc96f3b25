#include "runtime/cluster/worker.hpp"

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
#include "kernels/mutex.hpp"
#include "learners/backend.hpp"
#include "runtime/cast.hpp"
#include "runtime/cluster/messages.hpp"
#include "runtime/config.hpp"
#include "runtime/resume.hpp"

namespace troupe::cluster {

namespace {

// How long one join request may take, how long the worker waits between two
// attempts to reach the coordinator, and how long its learners may take to
// end their batches once the run has ended.
constexpr auto join_timeout = std::chrono::seconds(30);
constexpr auto connect_retry = std::chrono::milliseconds(250);
constexpr auto stop_timeout = std::chrono::seconds(10);
// One flush of the delta outbox at the end (it asks the keeper, 5 s at most).
constexpr auto flush_timeout = std::chrono::seconds(10);
// How long a worker whose learners spent the step budget waits for the
// coordinator to end the run.
constexpr auto end_wait = std::chrono::seconds(60);

// The host's policy store, set once the welcome has told the model's shape;
// versions pushed before that are kept (the newest) and published then.
struct host_cache {
  kernels::mutex mtx;
  std::shared_ptr<actors::policy_store> store TROUPE_GUARDED_BY(mtx);
  std::optional<policy_push> pending TROUPE_GUARDED_BY(mtx);
  std::string problem TROUPE_GUARDED_BY(mtx); // the first push that did not fit the model

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
    kernels::mutex_lock lock(mtx);
    if (store)
      publish(p);
    else if (!pending || pending->version < p.version)
      pending = std::move(p);
  }
  void set_store(std::shared_ptr<actors::policy_store> s) {
    kernels::mutex_lock lock(mtx);
    store = std::move(s);
    if (pending)
      publish(*pending);
    pending.reset();
  }
};

// The worker's host actor: takes the policy versions the gate pushes, and
// passes the run's end on to the driver.
caf::behavior host_actor(caf::event_based_actor* self, std::shared_ptr<host_cache> cache,
                         std::shared_ptr<actors::host_counters> counters,
                         caf::actor driver) {
  return {
    [cache, counters](policy_push& p) {
      cache->take(std::move(p));
      // finished first: a batch counted there was collected before.
      host_progress progress;
      progress.finished = counters->finished.load(std::memory_order_relaxed);
      progress.collected = counters->collected.load(std::memory_order_relaxed);
      return progress;
    },
    [self, driver](actors::stop_atom) { self->send(driver, actors::stop_atom::value); },
  };
}

// The runners an environment-only host runs for the coordinator's learners.
uint64_t req_guest_runners(const worker_options& opts) {
  return opts.learners == 0 ? opts.runners : 0;
}

int fail_with(const worker_options& opts, const std::string& message) {
  actors::write_log(opts.log, actors::log_level::error, "troupe: worker: " + message);
  return 1;
}

} // namespace

int run_worker(const worker_options& opts) {
  std::string token = opts.token;
  if (token.empty())
    if (const char* env = std::getenv(token_variable))
      token = env;
  if (token.empty())
    return fail_with(opts, fmt::format("no token: set the environment variable {} to the "
                                       "run's cluster.token",
                                       token_variable));
  // How long it tries to reach the coordinator.
  auto deadline =
    std::chrono::steady_clock::now() + std::chrono::seconds(opts.reconnect_s);
  if (opts.rejoin_until_ms > 0) {
    // A restart after the coordinator was lost: the same deadline as the
    // process that lost it.
    const auto until = std::chrono::system_clock::time_point(
      std::chrono::milliseconds(opts.rejoin_until_ms));
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                 until - std::chrono::system_clock::now());
  }

  // The coordinator's address and the run: given, or from its cluster.json,
  // which may not be written yet (workers started with the coordinator).
  endpoint at = opts.connect;
  std::string run = opts.run;
  if (!opts.connect_file.empty()) {
    bool said_wait = false;
    for (;;) {
      auto f = read_cluster_file(opts.connect_file);
      if (f) {
        if (!opts.run.empty() && f->run != opts.run)
          return fail_with(opts,
                           fmt::format("--run {}: {} is the coordinator's file of run {}",
                                       opts.run, opts.connect_file, f->run));
        at = f->connect;
        run = f->run;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline)
        return fail_with(opts, fmt::format("cannot read the coordinator's address within "
                                           "{} s (--reconnect-s): {}",
                                           opts.reconnect_s, f.err().message));
      if (!said_wait) {
        actors::write_log(opts.log, actors::log_level::notice,
                          fmt::format("troupe: worker: {}; reading it again until "
                                      "--reconnect-s {} s",
                                      f.err().message, opts.reconnect_s));
        said_wait = true;
      }
      std::this_thread::sleep_for(connect_retry); // back-off between attempts
    }
  }
  auto where_of = [&] {
    return opts.connect_file.empty()
             ? fmt::format("{}:{} (run {})", at.host, at.port,
                           run.empty() ? std::string{"not named: any"} : run)
             : fmt::format("{}:{} (run {}, from {})", at.host, at.port, run,
                           opts.connect_file);
  };
  std::string where = where_of();

  node_settings ns;
  ns.heartbeat_ms = opts.heartbeat_ms;
  ns.timeout_ms = opts.timeout_ms;
  ns.app_identifiers = {run.empty() ? any_run_identifier() : app_identifier(run)};
  ns.tls = opts.tls;

  // Left running on return (see worker.hpp): released, never destroyed here.
  auto sys_cfg = std::make_unique<caf::actor_system_config>();
  actors::register_messages(*sys_cfg);
  register_cluster_messages(*sys_cfg);
  configure_node(*sys_cfg, ns);
  sys_cfg->set("logger.verbosity", caf::atom("quiet"));
  auto* sys = new caf::actor_system(*sys_cfg);
  sys_cfg.release();

  // -- reach the coordinator (bounded) ---------------------------------------
  caf::actor gate;
  for (;;) {
    auto g = connect_gate(*sys, at, ns);
    if (g) {
      gate = *g;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return fail_with(opts, fmt::format("{} the coordinator at {} within {} s "
                                         "(--reconnect-s; a coordinator of another run "
                                         "refuses the connection): {}",
                                         opts.rejoin_until_ms > 0
                                           ? "lost the coordinator and could not reach"
                                           : "cannot reach",
                                         where, opts.reconnect_s,
                                         actors::error_message(*sys, g.error())));
    std::this_thread::sleep_for(connect_retry); // back-off between attempts
    if (!opts.connect_file.empty()) {
      // A coordinator resumed elsewhere rewrote it; a file being replaced
      // or gone for a moment keeps the last address.
      if (auto f = read_cluster_file(opts.connect_file); f && f->run == run) {
        at = f->connect;
        where = where_of();
      }
    }
  }

  // -- join ------------------------------------------------------------------
  caf::scoped_actor self(*sys);
  auto cache = std::make_shared<host_cache>();
  auto counters = std::make_shared<actors::host_counters>();
  auto host = sys->spawn(host_actor, cache, counters, caf::actor_cast<caf::actor>(self));
  join_request req;
  req.protocol = protocol_version;
  req.name = opts.name;
  req.incarnation = actors::random_incarnation();
  const uint64_t incarnation = req.incarnation;
  req.learners = opts.learners;
  req.runners_per_learner = opts.runners_per_learner;
  req.guest_runners = opts.learners == 0 ? opts.runners : 0;
  req.device = opts.device.empty() ? "(the run's)" : opts.device;
  req.token = token;
  req.host = host;
  std::optional<welcome> w;
  std::string refused;
  bool said_retry = false;
  for (;;) {
    bool for_now = false; // refused until a lost host of the name is declared lost
    self->request(gate, join_timeout, req)
      .receive([&](welcome& x) { w = std::move(x); },
               [&](caf::error& e) {
                 refused = actors::error_message(*sys, e);
                 for_now = e.category() == actors::error_category &&
                           e.code() == static_cast<uint8_t>(errc::unavailable);
               });
    if (w || !for_now || std::chrono::steady_clock::now() >= deadline)
      break;
    if (!said_retry) {
      actors::write_log(
        opts.log, actors::log_level::notice,
        fmt::format("troupe: worker: {}; asking again until --reconnect-s "
                    "{} s",
                    refused, opts.reconnect_s));
      said_retry = true;
    }
    std::this_thread::sleep_for(connect_retry); // back-off between attempts
  }
  if (!w)
    return fail_with(opts, fmt::format("'{}' could not join the run at {}: {}", opts.name,
                                       where, refused));
  if (run.empty()) { // no --run: the coordinator's welcome names it
    run = w->run;
    where = where_of();
  } else if (w->run != run) {
    return fail_with(
      opts, fmt::format("--run {}: the coordinator at {} runs {}", run, where, w->run));
  }

  // -- the cast of this host ---------------------------------------------------
  auto cfg = runtime::parse_config(w->config_toml, "the config of the run at " + where);
  if (!cfg)
    return fail_with(opts, cfg.err().message);
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
    return fail_with(opts, env.err().message);
  auto spec = runtime::model_spec_for(*cfg, **env);
  if (!spec)
    return fail_with(opts, spec.err().message);
  auto device = learners::choose_device(cfg->get_string("run.device"));
  if (!device)
    return fail_with(opts, "--device: " + device.err().message);
  const runtime::resume_point fresh_start; // a worker never resumes
  runtime::cast_options worker_cast;
  worker_cast.log = opts.log;
  auto built = runtime::build_cast(*sys, *cfg, *spec, **env, device->kind, std::string{},
                                   fresh_start, worker_cast);
  auto& plan = built.plan;
  if (w->learner_names.size() != plan.learners.size())
    return fail_with(opts,
                     fmt::format("the coordinator named {} learners for the {} asked",
                                 w->learner_names.size(), plan.learners.size()));
  // Exactly once across the network (docs/cluster.md): the host's moment
  // deltas go through one outbox that stamps them with (name, incarnation,
  // sequence) and keeps them until the keeper acknowledges them; each
  // learner's gradients carry the same identity and their own sequence. When
  // the coordinator declares this host lost it fences the incarnation at the
  // keeper and the parameter server, and whatever this process still sends
  // is refused.
  actors::delta_outbox_options oo;
  oo.worker = opts.name;
  oo.incarnation = incarnation;
  oo.log = opts.log;
  auto outbox = actors::spawn_delta_outbox(*sys, oo, w->keeper);
  plan.deltas = outbox;
  // One subscription per statistics stream for the whole host: the relay
  // hands each snapshot from the keeper to the host's views.
  auto relay = actors::spawn_stats_relay(*sys, w->keeper);
  plan.views = relay;
  for (size_t i = 0; i < plan.learners.size(); ++i) {
    auto& lo = plan.learners[i].options;
    lo.name = w->learner_names[i];
    lo.worker = opts.name;
    lo.incarnation = incarnation;
    lo.gradient_sequence = std::make_shared<std::atomic<uint64_t>>(0);
    // Async: the next gradient is computed while the answer to the last one
    // crosses the wire (actors/learner.hpp, gradients_in_flight).
    lo.gradients_in_flight = lo.pipelined ? 1 : 0;
    lo.local_optimizer = false; // the coordinator's server has other learners
  }
  if (req_guest_runners(opts) > 0) {
    if (w->feed.empty())
      return fail_with(opts, "the coordinator named no learner for this host's runners");
    plan.guest_runners = req_guest_runners(opts);
    plan.feed_learners = w->feed;
    plan.guest_prefix = opts.name;
  }
  plan.existing = actors::shared_actors{w->keeper, w->server, w->metrics};
  plan.host = counters;
  cache->take(std::move(w->weights));
  cache->set_store(plan.store);
  {
    kernels::mutex_lock lock(cache->mtx);
    if (!cache->problem.empty())
      return fail_with(opts, cache->problem);
  }

  // -- run until the coordinator ends the run ----------------------------------
  auto stop_flag = std::make_shared<std::atomic<int>>(0);
  actors::supervisor_options so;
  so.cast = std::move(plan);
  so.owner = caf::actor_cast<caf::actor>(self);
  so.stop_flag = stop_flag;
  so.log = opts.log;
  auto sup = actors::spawn_supervisor(*sys, std::move(so));
  self->monitor(gate);
  self->monitor(sup);
  bool done = false, stop_asked = false, gate_lost = false;
  std::string failure, gate_reason;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (!done) {
    self->receive(
      [&](actors::ready_atom, caf::actor&, caf::actor&, caf::actor&) {
        if (req_guest_runners(opts) > 0) {
          actors::write_log(
            opts.log, actors::log_level::info,
            fmt::format("troupe: worker {} joined the run at {}: {} "
                        "runners feeding {} learner(s) of the coordinator",
                        opts.name, where, req_guest_runners(opts), w->feed.size()));
          return;
        }
        actors::write_log(opts.log, actors::log_level::info,
                          fmt::format("troupe: worker {} joined the run at {}: learners "
                                      "{}, {} runners each, on {}",
                                      opts.name, where, fmt::join(w->learner_names, ", "),
                                      rpl, learners::to_string(device->kind)));
      },
      [&](actors::ckpt_atom, uint64_t) {}, [&](actors::cast_snapshot&) {},
      [&](actors::done_atom, bool, std::string& why) {
        done = true;
        failure = why;
      },
      [&](actors::stop_atom) {
        if (!stop_asked) {
          stop_asked = true;
          stop_flag->store(1);
          stop_deadline = std::chrono::steady_clock::now() + stop_timeout;
        }
      },
      [&](caf::down_msg& down) {
        if (down.source == gate.address()) {
          gate_lost = true;
          gate_reason = actors::error_message(*sys, down.reason);
          done = true;
        } else if (down.source == sup.address() && !done) {
          done = true;
          failure = "the supervisor ended: " + actors::error_message(*sys, down.reason);
        }
      },
      caf::after(std::chrono::milliseconds(200)) >>
        [&] {
          if (std::chrono::steady_clock::now() >= stop_deadline) {
            actors::write_log(opts.log, actors::log_level::warning,
                              fmt::format("troupe: worker {}: the learners did not end "
                                          "within {} s of the run's end; leaving",
                                          opts.name,
                                          static_cast<long long>(stop_timeout.count())));
            done = true;
          }
        });
  }
  if (!gate_lost && !stop_asked && failure.empty()) {
    // This host's learners used up the step budget on their own count before
    // the coordinator said the run ends (its count comes from the learners'
    // reports, which may still be on the way): the budget is spent for the
    // whole run, so the coordinator is told, and this process stays connected
    // until it says stop, so that nothing it sent is cut off. Bounded.
    self->send(gate, actors::done_atom::value, opts.name);
    const auto until = std::chrono::steady_clock::now() + end_wait;
    bool waiting = true;
    while (waiting) {
      self->receive(
        [&](actors::stop_atom) { stop_asked = true; waiting = false; },
        [&](caf::down_msg& down) {
          if (down.source == gate.address())
            waiting = false;
        },
        [&](actors::done_atom, bool, std::string&) {},
        caf::after(std::chrono::milliseconds(200)) >> [&] {
          if (std::chrono::steady_clock::now() >= until) {
            actors::write_log(
              opts.log, actors::log_level::warning,
              fmt::format("troupe: worker {}: the step budget is spent here, and the "
                          "coordinator did not end the run within {} s; leaving",
                          opts.name, static_cast<long long>(end_wait.count())));
            waiting = false;
          }
        });
    }
  }
  if (!gate_lost && done) {
    // Every runner has ended (the supervisor waits for them): what the
    // keeper acknowledged of this host's deltas, once nothing is unacknowledged.
    std::optional<actors::delta_outbox_status> acked;
    for (int attempt = 0; attempt < 5; ++attempt) {
      bool settled = false;
      self->request(outbox, flush_timeout, actors::flush_atom::value)
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
      actors::write_log(
        opts.log, actors::log_level::info,
        fmt::format("troupe: worker {}: the statistics keeper acknowledged {} delta(s) "
                    "({} samples) from this host{}",
                    opts.name, acked->acked_deltas, acked->acked_samples,
                    acked->unacked + acked->held > 0 ? ", some still unacknowledged"
                                                     : ""));
  }
  self->send_exit(outbox, caf::exit_reason::user_shutdown);
  self->send_exit(relay, caf::exit_reason::user_shutdown);
  if (gate_lost && !stop_asked) {
    // The coordinator is gone (or has declared this host lost while it was
    // stopped or cut off, and refuses what it still sends): this process's
    // learners may wait forever on the gone server, so the caller starts a
    // new process, which joins again as a new incarnation.
    actors::write_log(opts.log, actors::log_level::warning,
                      fmt::format("troupe: worker: {}: lost the coordinator at {} ({}); "
                                  "trying to rejoin as a new incarnation for up to {} s "
                                  "(--reconnect-s)",
                                  opts.name, where, gate_reason, opts.reconnect_s));
    return worker_rejoin;
  }
  self->send_exit(host, caf::exit_reason::user_shutdown);
  if (!failure.empty() && !stop_asked)
    return fail_with(opts, fmt::format("{}: {}", opts.name, failure));
  actors::write_log(opts.log, actors::log_level::info,
                    fmt::format("troupe: worker {}: the run ended", opts.name));
  return 0;
}

} // namespace troupe::cluster
