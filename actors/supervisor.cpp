#include "actors/supervisor.hpp"
#include "actors/exceptions.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace troupe::actors {

namespace {

struct runner_entry {
  caf::actor actor;
  size_t learner = 0;
  size_t index = 0;
  uint64_t restarts = 0; // incarnations after the first (fresh seeds for each)
  uint64_t failures = 0; // its own failures, bounded by max_runner_restarts
  std::string name;
  caf::actor guest_of; // set: a guest runner feeding this learner of another host
};

struct learner_entry {
  caf::actor actor;
  std::string name;
  bool alive = true;
  uint64_t restarts = 0;
};

// What the supervisor holds while the run goes on.
struct cast_state {
  supervisor_options opts;
  caf::actor keeper, server, metrics;
  std::vector<learner_entry> learners;
  std::vector<runner_entry> runners;
  std::vector<learner_state> learner_states; // the last each learner sent (when it ended)
  uint64_t restarts = 0;
  size_t alive = 0;
  bool stopping = false;
  bool budget_spent = false; // end_on_done: the metrics actor said so
  bool ready = false;        // the owner has the keeper, the server and the metrics actor
  std::string failure;
  uint64_t hold = 0; // the checkpoint hold under way (0: none); see take_snapshot
};

// A worker's cast: the keeper, the server and the metrics actor are another
// process's, never spawned, stopped or ended here.
bool uses_existing(const cast_plan& plan) {
  return plan.cluster && plan.cluster->existing.has_value();
}

// Where moment deltas go: a host's outbox, or the keeper.
caf::actor deltas_of(const cast_state& cs) {
  const auto& c = cs.opts.cast.cluster;
  return c && c->deltas ? c->deltas : cs.keeper;
}

// Where statistics views subscribe: a host's relay, or the keeper.
caf::actor views_of(const cast_state& cs) {
  const auto& c = cs.opts.cast.cluster;
  return c && c->views ? c->views : cs.keeper;
}

// Waits for the answer to a request; the error's text, or empty.
template <class Answer, class... Ts>
std::string ask(caf::blocking_actor* self, const caf::actor& dest, Ts&&... xs) {
  std::string problem;
  self->request(dest, caf::infinite, std::forward<Ts>(xs)...)
    .receive([](Answer&) {},
             [&](caf::error& e) { problem = error_message(self->system(), e); });
  return problem;
}

void stop_run(caf::blocking_actor* self, cast_state& cs) {
  if (cs.stopping)
    return;
  cs.stopping = true;
  for (auto& l : cs.learners)
    if (l.alive)
      self->send(l.actor, stop_atom::value);
  // Another process's server drains when its own run stops.
  if (cs.server && !uses_existing(cs.opts.cast))
    self->send(cs.server, stop_atom::value);
}

// The first failure is the one reported; later ones are consequences.
void fail_run(caf::blocking_actor* self, cast_state& cs, std::string why) {
  write_log(cs.opts.log, fmt::format("supervisor: {}; stopping the run", why));
  if (cs.failure.empty())
    cs.failure = std::move(why);
  stop_run(self, cs);
}

caf::actor spawn_runner(caf::blocking_actor* self, cast_state& cs, runner_entry& r) {
  runner_request req;
  req.learner = r.learner;
  req.index = r.index;
  req.restarts = r.restarts;
  req.name = r.name;
  req.consumer = r.guest_of ? r.guest_of : cs.learners[r.learner].actor;
  req.keeper = views_of(cs);
  req.deltas = deltas_of(cs);
  req.guest = static_cast<bool>(r.guest_of);
  r.actor = cs.opts.cast.make_runner(req);
  if (!r.actor)
    return r.actor; // the factory has said why
  self->monitor(r.actor);
  if (r.guest_of)
    self->send(r.guest_of, runner_atom::value, r.name, r.actor);
  else
    self->send(cs.learners[r.learner].actor, runner_atom::value,
               static_cast<uint64_t>(r.index), r.actor);
  return r.actor;
}

// Spawns learner `li` (again, after a failure: it continues its generator
// from its last state and takes the server's current weights). Each of its
// views holds the keeper's current snapshot before the learner starts. The
// problem that stopped it, or empty.
std::string spawn_learner_at(caf::blocking_actor* self, cast_state& cs, size_t li) {
  auto& sys = self->system();
  auto& plan = cs.opts.cast;
  auto& lp = plan.learners[li];
  auto& l = cs.learners[li];
  auto lo = lp.options;
  lo.keeper = deltas_of(cs);
  lo.report_to = caf::actor_cast<caf::actor>(self);
  if (l.restarts > 0 && !cs.learner_states[li].learner.empty())
    lo.start_gen = cs.learner_states[li].gen;
  lo.batch_norm_views.clear();
  for (auto& [stream, width] : plan.batch_norm_streams) {
    auto v = subscribe_view(sys, views_of(cs), stream, width);
    if (!v)
      return fmt::format("learner '{}': {}", l.name, v.err().message);
    lo.batch_norm_views.push_back(std::move(*v));
  }
  std::shared_ptr<learners::stats_view> view;
  if (!plan.obs_stream.empty()) {
    auto v = subscribe_view(sys, views_of(cs), plan.obs_stream, plan.obs_dim);
    if (!v)
      return fmt::format("learner '{}': {}", l.name, v.err().message);
    view = std::move(*v);
  }
  l.actor = spawn_learner(sys, lo, cs.server, cs.metrics, plan.store, lp.budget, view);
  l.alive = true;
  self->monitor(l.actor);
  return {};
}

std::string start_learners_and_runners(caf::blocking_actor* self, cast_state& cs);

// Spawns the cast in dependency order; the problem that stopped it, or empty.
std::string start_cast(caf::blocking_actor* self, cast_state& cs) {
  auto& sys = self->system();
  auto& plan = cs.opts.cast;
  if (uses_existing(plan)) {
    // A worker process: the coordinator's actors, watched so that losing
    // them ends this cast.
    const auto& existing = *plan.cluster->existing;
    cs.keeper = existing.keeper;
    cs.server = existing.server;
    cs.metrics = existing.metrics;
    for (auto& a : {cs.keeper, cs.server, cs.metrics})
      self->monitor(a);
    return start_learners_and_runners(self, cs);
  }
  cs.keeper = spawn_stats_keeper(sys, plan.keeper);
  self->monitor(cs.keeper);
  if (!plan.keeper_state.empty())
    if (auto why =
          ask<caf::ok_atom>(self, cs.keeper, load_atom::value, plan.keeper_state);
        !why.empty())
      return why;
  for (auto& decl : plan.streams)
    if (auto why = ask<uint64_t>(self, cs.keeper, declare_atom::value, decl);
        !why.empty())
      return why;
  // A replica takes a resumed state at its start: its group's first exchange
  // hands it to the other members.
  if (plan.replica_group)
    cs.server = spawn_replica(sys, plan.replica, plan.replica_group, plan.params,
                              plan.buffers, plan.store, plan.server_state);
  else if (plan.standby)
    cs.server = spawn_standby_replica(sys, *plan.standby, plan.params, plan.buffers,
                                      plan.store, plan.server_state);
  else
    cs.server =
      spawn_parameter_server(sys, plan.server, plan.params, plan.buffers, plan.store);
  self->monitor(cs.server);
  if (plan.server_state && !plan.replica_group && !plan.standby)
    if (auto why = ask<uint64_t>(self, cs.server, state_atom::value, *plan.server_state);
        !why.empty())
      return why;
  auto metrics_opts = plan.metrics;
  metrics_opts.keeper = cs.keeper.address();
  metrics_opts.server = cs.server.address();
  cs.metrics =
    spawn_metrics(sys, std::move(metrics_opts), caf::actor_cast<caf::actor>(self));
  self->monitor(cs.metrics);
  return start_learners_and_runners(self, cs);
}

// Spawns the learners, then their runners; the problem that stopped it, or empty.
std::string start_learners_and_runners(caf::blocking_actor* self, cast_state& cs) {
  auto& plan = cs.opts.cast;
  for (size_t li = 0; li < plan.learners.size(); ++li) {
    learner_entry l;
    l.name = plan.learners[li].options.name;
    cs.learners.push_back(std::move(l));
    cs.learner_states.emplace_back();
    if (auto why = spawn_learner_at(self, cs, li); !why.empty())
      return why;
  }
  cs.alive = cs.learners.size();
  for (size_t li = 0; li < plan.learners.size(); ++li)
    for (size_t ri = 0; ri < plan.learners[li].options.num_runners; ++ri) {
      runner_entry r;
      r.learner = li;
      r.index = ri;
      r.name = fmt::format("{}.runner{}", cs.learners[li].name, ri);
      cs.runners.push_back(std::move(r));
    }
  // Guest runners (an environment-only host): slots after the learners' own,
  // with the same seeding by slot, feeding the other host's learners.
  const size_t guests = plan.cluster ? plan.cluster->guest_runners : 0;
  if (guests > 0 && plan.cluster->feed_learners.empty())
    return "guest runners without a learner to feed";
  for (size_t gi = 0; gi < guests; ++gi) {
    const auto& feed = plan.cluster->feed_learners;
    runner_entry r;
    r.learner = 0;
    r.index = gi;
    r.name = fmt::format("{}.runner{}", plan.cluster->guest_prefix, gi);
    r.guest_of = feed[gi % feed.size()];
    cs.runners.push_back(std::move(r));
  }
  for (auto& r : cs.runners)
    if (!spawn_runner(self, cs, r))
      return fmt::format("runner '{}' could not be started", r.name);
  return {};
}

void on_down(caf::blocking_actor* self, cast_state& cs, const caf::down_msg& down) {
  auto& sys = self->system();
  const bool failed = down.reason && down.reason != caf::exit_reason::user_shutdown;
  for (auto& r : cs.runners) {
    if (r.actor.address() != down.source)
      continue;
    r.actor = nullptr;
    if (!failed || cs.stopping || (!r.guest_of && !cs.learners[r.learner].alive))
      return;
    const auto why = error_message(sys, down.reason);
    if (r.failures >= cs.opts.cast.max_runner_restarts) {
      fail_run(self, cs,
               fmt::format("runner '{}' failed ({}) after {} restarts", r.name, why,
                           r.failures));
      return;
    }
    r.failures += 1;
    r.restarts += 1;
    cs.restarts += 1;
    write_log(cs.opts.log,
              fmt::format("supervisor: runner '{}' failed ({}); restart {} of {}", r.name,
                          why, r.failures, cs.opts.cast.max_runner_restarts));
    if (!spawn_runner(self, cs, r))
      fail_run(self, cs, fmt::format("runner '{}' could not be restarted", r.name));
    return;
  }
  for (auto& l : cs.learners) {
    if (l.actor.address() != down.source)
      continue;
    l.alive = false;
    --cs.alive;
    if (!failed || cs.stopping)
      return;
    const auto why = error_message(sys, down.reason);
    if (l.restarts >= cs.opts.cast.max_learner_restarts) {
      fail_run(self, cs,
               fmt::format("learner '{}' failed: {} (after {} restarts)", l.name, why,
                           l.restarts));
      return;
    }
    // A new learner from the server's current weights, and new runners for
    // it (fresh seeds): the batches the failed one had asked for are lost.
    l.restarts += 1;
    write_log(cs.opts.log,
              fmt::format("supervisor: learner '{}' failed ({}); restart {} of {}",
                          l.name, why, l.restarts, cs.opts.cast.max_learner_restarts));
    const size_t li = static_cast<size_t>(&l - cs.learners.data());
    if (auto problem = spawn_learner_at(self, cs, li); !problem.empty()) {
      fail_run(self, cs,
               fmt::format("learner '{}' failed ({}) and could not be restarted: {}",
                           l.name, why, problem));
      return;
    }
    ++cs.alive;
    for (auto& r : cs.runners) {
      if (r.learner != li || r.guest_of)
        continue;
      if (r.actor) {
        self->demonitor(r.actor);
        self->send_exit(r.actor, caf::exit_reason::user_shutdown);
      }
      r.restarts += 1;
      if (!spawn_runner(self, cs, r))
        fail_run(self, cs, fmt::format("runner '{}' could not be restarted", r.name));
    }
    return;
  }
  const char* role = down.source == cs.keeper.address()    ? "statistics keeper"
                     : down.source == cs.server.address()  ? "parameter server"
                     : down.source == cs.metrics.address() ? "metrics actor"
                                                           : nullptr;
  if (!role)
    return;
  if (down.source == cs.keeper.address())
    cs.keeper = nullptr;
  else if (down.source == cs.server.address())
    cs.server = nullptr;
  else
    cs.metrics = nullptr;
  fail_run(
    self, cs,
    fmt::format("the {} ended: {}", role,
                down.reason ? error_message(sys, down.reason) : "no reason given"));
}

// How long the end of a worker's cast waits for its runners to end (each
// ends after the batch it is collecting).
constexpr auto runners_end_wait = std::chrono::seconds(10);

// How long a checkpoint may hold the cast before the supervisor lets it go
// on by itself (its owner releases it as soon as the checkpoint is written).
constexpr auto hold_limit = std::chrono::seconds(120);

// Lets the held runners go on (each starts the batch that waited).
void release_runners(caf::blocking_actor* self, cast_state& cs) {
  if (cs.hold == 0)
    return;
  cs.hold = 0;
  for (auto& r : cs.runners)
    if (r.actor && !r.guest_of)
      self->send(r.actor, release_atom::value);
}

// The random states of the cast: live runners and learners are asked (each
// answers between two batches); an ended learner's last state is used.
//
// With `refusal` (a hold), the states are a consistent cut for a checkpoint taken while
// the run goes on: each runner stops between two batches and answers with its
// state then, each learner answers once it has learned every batch those
// runners had sent (so the parameter server, the keeper and the metrics
// actor, asked after this, hold exactly what the saved runners produced),
// and nothing moves until (release_atom). In sync mode every runner first
// reaches the most batches any runner has sent: a learner inside a sync step
// waits for the others' gradients of that step, whose batches must come.
//
// A held snapshot is all or nothing: an actor that does not answer within
// `snapshot_wait` (a learner still behind on the batches it was sent, a runner
// stuck in its environment) leaves the cut inconsistent (the keeper would hold
// moments of batches no saved counter accounts for), so the answer is an
// error naming it, the runners go on, and no checkpoint is written from it.
// An unheld snapshot (at the run's end, or asked without a hold) leaves such
// an actor out: the runner then starts fresh on resume, the learner's last
// state is kept.
cast_snapshot take_snapshot(caf::blocking_actor* self, cast_state& cs,
                            std::string* refusal = nullptr) {
  cast_snapshot out;
  bool hold = refusal != nullptr;
  const auto wait = cs.opts.snapshot_wait;
  std::string missing; // the first actor a held snapshot did not hear from
  auto skipped = [&](const std::string& who, const caf::error& e) {
    const auto why = error_message(self->system(), e);
    if (hold && missing.empty())
      missing = fmt::format("{} did not give its state within {} ms ({})", who,
                            wait.count(), why);
    else if (!hold)
      write_log(
        cs.opts.log,
        fmt::format("supervisor: no state from {} for this checkpoint: {}", who, why));
  };
  auto refused = [&] {
    release_runners(self, cs);
    *refusal = fmt::format("{}: the cast is not at a consistent cut, so no checkpoint "
                           "is written now; the run goes on and the previous "
                           "checkpoints stay",
                           missing);
    write_log(cs.opts.log, "supervisor: " + *refusal);
    return cast_snapshot{};
  };
  hold = hold && !cs.stopping;
  uint64_t sync_target = 0;
  if (hold) {
    release_runners(self, cs); // an earlier hold nobody released
    cs.hold =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    self->delayed_send(self, hold_limit, release_atom::value, cs.hold);
    if (cs.opts.cast.server.sync)
      for (auto& r : cs.runners)
        if (r.actor && !r.guest_of)
          self->request(r.actor, wait, status_atom::value)
            .receive(
              [&](env_runner_status& st) {
                sync_target = std::max(sync_target, st.batches);
              },
              [&](caf::error& e) {
                if (e != caf::sec::request_receiver_down)
                  skipped("runner '" + r.name + "'", e);
              });
    if (!missing.empty())
      return refused();
  }
  held_runners sent;
  for (auto& r : cs.runners) {
    if (!r.actor)
      continue;
    auto take = [&](env_runner_state& st) {
      if (hold && !r.guest_of) {
        sent.names.push_back(r.name);
        sent.next_sequence.push_back(st.status.batches);
      }
      if (!nothing_to_restore(st)) // a game-driven feeder: nothing to save
        out.runners.push_back(std::move(st));
    };
    auto failed = [&](caf::error& e) {
      if (e != caf::sec::request_receiver_down)
        skipped("runner '" + r.name + "'", e);
    }; // a runner that failed meanwhile: its replacement starts fresh
    if (hold && !r.guest_of)
      self->request(r.actor, wait, hold_atom::value, sync_target).receive(take, failed);
    else
      self->request(r.actor, wait, state_atom::value).receive(take, failed);
    if (!missing.empty())
      return refused();
  }
  for (size_t i = 0; i < cs.learners.size(); ++i) {
    auto& l = cs.learners[i];
    auto take = [&](learner_state& st) { cs.learner_states[i] = std::move(st); };
    auto failed = [&](caf::error& e) {
      if (e != caf::sec::request_receiver_down)
        skipped("learner '" + l.name + "'", e);
    };
    if (l.alive && hold)
      self->request(l.actor, wait, sent).receive(take, failed);
    else if (l.alive)
      self->request(l.actor, wait, state_atom::value).receive(take, failed);
    if (!missing.empty())
      return refused();
    if (!cs.learner_states[i].learner.empty())
      out.learners.push_back(cs.learner_states[i]);
  }
  return out;
}

// Ends every runner and learner of the cast that is alive.
void stop_runners_and_learners(caf::blocking_actor* self, cast_state& cs) {
  for (auto& r : cs.runners)
    if (r.actor)
      self->send_exit(r.actor, caf::exit_reason::user_shutdown);
  for (auto& l : cs.learners)
    if (l.actor)
      self->send_exit(l.actor, caf::exit_reason::user_shutdown);
}

// How long the end of a run waits for its metrics actor to answer.
constexpr auto metrics_drain_wait = std::chrono::seconds(30);

// A learner sends its last report to the metrics actor and then ends; its down
// message can reach this supervisor before the metrics actor has read that
// report and asked for the checkpoint it makes due. One round trip to the
// metrics actor, sent after every learner's down message, comes back after
// every such request (in-process, each sender's messages keep their order), so
// the requests of the run's last updates are forwarded instead of lost.
void forward_late_checkpoints(caf::blocking_actor* self, cast_state& cs) {
  if (cs.stopping || !cs.metrics || uses_existing(cs.opts.cast))
    return; // an existing metrics actor reports to its own supervisor
  self->request(cs.metrics, metrics_drain_wait, state_atom::value)
    .receive([](metrics_counters&) {},
             [&](caf::error& e) {
               write_log(
                 cs.opts.log,
                 fmt::format("supervisor: the metrics actor did not answer at the "
                             "run's end: {}",
                             error_message(self->system(), e)));
             });
  bool pending = true;
  while (pending)
    self->receive(
      [&](ckpt_atom, uint64_t updates) {
        self->send(cs.opts.owner, ckpt_atom::value, updates);
      },
      caf::after(std::chrono::seconds(0)) >> [&] { pending = false; });
}

void supervise(caf::blocking_actor* self, cast_state& cs) {
  auto owner = cs.opts.owner;
  if (auto why = start_cast(self, cs); !why.empty()) {
    write_log(cs.opts.log, fmt::format("supervisor: the run could not start: {}", why));
    stop_runners_and_learners(self, cs);
    if (!uses_existing(cs.opts.cast))
      for (auto& a : {cs.keeper, cs.server, cs.metrics})
        if (a)
          self->send_exit(a, caf::exit_reason::user_shutdown);
    self->send(owner, done_atom::value, false, why);
    return;
  }
  self->send(owner, ready_atom::value, cs.keeper, cs.server, cs.metrics);
  cs.ready = true;
  const auto poll = std::chrono::milliseconds(cs.opts.poll_ms);
  auto check_flag = [&] {
    if (cs.opts.stop_flag && cs.opts.stop_flag->load() != 0)
      stop_run(self, cs);
  };
  // With learners elsewhere (end_on_done) the run goes on until it stops.
  // So do guest runners, which feed learners elsewhere.
  const auto& cluster = cs.opts.cast.cluster;
  const bool hold = cluster && (cluster->end_on_done || cluster->guest_runners > 0);
  auto still_running = [&] { return cs.alive > 0 || (hold && !cs.stopping); };
  bool running = still_running();
  self->receive_while([&] { return running; })(
    [&](ckpt_atom, uint64_t updates) {
      if (!cs.stopping)
        self->send(owner, ckpt_atom::value, updates);
      check_flag();
    },
    [&](done_atom) {
      if (hold && !cs.stopping) {
        cs.budget_spent = true;
        stop_run(self, cs);
      }
      check_flag();
      running = still_running();
    },
    [&](stop_atom) {
      stop_run(self, cs);
      running = still_running();
    },
    [&](learner_state& st) {
      for (size_t i = 0; i < cs.learners.size(); ++i)
        if (cs.learners[i].name == st.learner)
          cs.learner_states[i] = std::move(st);
    },
    [&](state_atom) { return take_snapshot(self, cs); },
    [&](hold_atom) -> caf::result<cast_snapshot> {
      std::string refusal;
      auto snap = take_snapshot(self, cs, &refusal);
      if (!refusal.empty())
        return to_caf_error(make_error(errc::unavailable, "{}", refusal));
      return snap;
    },
    [&](release_atom) { release_runners(self, cs); },
    [&](release_atom, uint64_t hold) {
      if (hold == cs.hold) {
        write_log(cs.opts.log, fmt::format("supervisor: a checkpoint held the cast for "
                                           "{} s; it goes on",
                                           hold_limit.count()));
        release_runners(self, cs);
      }
    },
    [&](learners_atom) {
      std::vector<caf::actor> alive;
      for (auto& l : cs.learners)
        if (l.alive && l.actor)
          alive.push_back(l.actor);
      return alive;
    },
    [&](status_atom) {
      supervisor_status st;
      st.runners = static_cast<uint64_t>(
        std::count_if(cs.runners.begin(), cs.runners.end(),
                      [](const runner_entry& r) { return r.actor; }));
      st.runner_restarts = cs.restarts;
      st.learners_alive = cs.alive;
      st.stopping = cs.stopping;
      return st;
    },
    [&](caf::down_msg& down) {
      on_down(self, cs, down);
      check_flag();
      running = still_running();
    },
    [&](caf::exit_msg& msg) {
      fail_run(self, cs,
               "the supervisor was told to exit: " +
                 error_message(self->system(), msg.reason));
      running = still_running();
    },
    caf::after(poll) >>
      [&] {
        check_flag();
        running = still_running();
      });
  forward_late_checkpoints(self, cs);
  // Every learner has ended: the owner gets the cast's last random states for
  // its final checkpoint, and the runners go; the keeper, the server and the
  // metrics actor stay for that checkpoint.
  self->send(owner, take_snapshot(self, cs));
  // With a host's delta outbox (a worker of a run across processes) the
  // runners' ends are awaited (bounded), so that every delta they sent is in
  // the outbox before the owner hears done_atom and flushes it.
  const bool await_runners = cs.opts.cast.cluster && cs.opts.cast.cluster->deltas;
  std::vector<caf::actor_addr> ending;
  for (auto& r : cs.runners)
    if (r.actor) {
      if (await_runners)
        ending.push_back(r.actor.address());
      else
        self->demonitor(r.actor);
      self->send_exit(r.actor, caf::exit_reason::user_shutdown);
    }
  const auto runners_deadline = std::chrono::steady_clock::now() + runners_end_wait;
  while (!ending.empty()) {
    const auto left = runners_deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) {
      write_log(cs.opts.log, fmt::format("supervisor: {} runner(s) did not end within "
                                         "{} s of the run's end",
                                         ending.size(), runners_end_wait.count()));
      break;
    }
    self->receive(
      [&](caf::down_msg& down) {
        ending.erase(std::remove(ending.begin(), ending.end(), down.source),
                     ending.end());
      },
      caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(left)) >> [] {});
  }
  self->send(owner, done_atom::value,
             cs.stopping && !cs.budget_spent && cs.failure.empty(), cs.failure);
}

void supervisor_loop(caf::blocking_actor* self, supervisor_options opts) {
  cast_state cs;
  cs.opts = std::move(opts);
  try {
    supervise(self, cs);
  } catch (...) {
    self->fail_state(
      exception_error("supervisor", std::current_exception(), cs.opts.log));
    // Nothing supervises the cast any more: its runners and learners go. The
    // owner sees this actor end; once it has the keeper, the server and the
    // metrics actor (ready_atom), it writes a final checkpoint from them.
    stop_runners_and_learners(self, cs);
    if (!cs.ready && !uses_existing(cs.opts.cast))
      for (auto& a : {cs.keeper, cs.server, cs.metrics})
        if (a)
          self->send_exit(a, caf::exit_reason::user_shutdown);
  }
}

} // namespace

caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_options opts) {
  return sys.spawn<caf::detached>(supervisor_loop, std::move(opts));
}

} // namespace troupe::actors
