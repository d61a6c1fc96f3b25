// The supervisor actor with a real cast: it spawns the keeper, the parameter
// server, the metrics actor, the learners and their CartPole runners from a
// plan; restarts failed runners (bounded, counted, logged); ends the run when
// a learner or the server fails; stops on the flag. The runners' policies
// throw on purpose where a test needs a failure.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <set>
#include <stdexcept>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/env_runner.hpp"
#include "actors/messages.hpp"
#include "actors/supervisor.hpp"
#include "envs/registry.hpp"
#include "learners/ppo.hpp"
#include "tests/temp_folder.hpp"
#include "tests/actors/ask.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

// `inner`, throwing on call `fail_on` (0: never): a runner that fails.
policy_fn throwing_on_call(policy_fn inner, uint64_t fail_on) {
  auto calls = std::make_shared<uint64_t>(0);
  return [inner = std::move(inner), calls, fail_on](const float* obs, size_t n,
                                                    base::rng& gen, float* actions,
                                                    float* logp) -> result<uint64_t> {
    if (++*calls == fail_on)
      throw std::runtime_error("policy failure thrown on purpose by the test");
    return inner(obs, n, gen, actions, logp);
  };
}

struct supervisor_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::mutex mtx;
  std::vector<std::string> log;
  std::vector<runner_request> requests; // every runner the factory made
  // Wraps a runner's policy where a test needs to (empty: as made).
  std::function<policy_fn(const runner_request&, policy_fn)> wrap_policy;
  test::temp_folder dir{"supervisor"};

  supervisor_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  log_sink sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> g(mtx);
      log.push_back(line);
    };
  }

  bool logged(const std::string& part) {
    std::lock_guard<std::mutex> g(mtx);
    for (auto& line : log)
      if (line.find(part) != std::string::npos)
        return true;
    return false;
  }

  // A CartPole cast: `learners` PPO learners with `runners` runners of 4
  // environments x 8 steps each, sharing a budget of `batches` batches.
  // `fails(request)` gives the policy call on which that runner throws (0: never).
  cast_plan plan(uint64_t seed, size_t learners, size_t runners, uint64_t batches,
                 std::function<uint64_t(const runner_request&)> fails) {
    const size_t envs = 4, steps = 8;
    learners::model_spec spec;
    spec.obs_dim = 4;
    spec.n = 2;
    spec.hidden = {8};
    learners::actor_critic initial(spec, seed);
    cast_plan p;
    p.keeper.log = sink();
    p.server.log = sink();
    p.params.assign(initial.params(), initial.params() + initial.param_count());
    p.store = std::make_shared<policy_store>(initial, 16);
    p.metrics.csv_path = (dir.path / "metrics.csv").string();
    p.metrics.jsonl_path = (dir.path / "metrics.jsonl").string();
    p.metrics.quiet = true;
    p.metrics.total_env_steps = batches * envs * steps;
    p.streams.push_back(stream_decl{"obs", 4, "cumulative", 0.99});
    p.obs_stream = "obs";
    p.obs_dim = 4;
    auto budget = std::make_shared<step_budget>(batches * envs * steps);
    for (size_t li = 0; li < learners; ++li) {
      learner_plan lp;
      lp.options.name = "learner" + std::to_string(li);
      lp.options.spec = spec;
      learners::settings_of<learners::ppo_settings>(lp.options.algorithm).update_epochs =
        1;
      learners::settings_of<learners::ppo_settings>(lp.options.algorithm)
        .num_minibatches = 2;
      lp.options.num_runners = runners;
      lp.options.steps_per_runner_batch = envs * steps;
      lp.options.pipelined = true;
      lp.options.seed = seed + li;
      lp.options.log = sink();
      lp.budget = budget;
      p.learners.push_back(std::move(lp));
    }
    p.make_runner = [this, seed, store = p.store, fails](const runner_request& req) {
      {
        std::lock_guard<std::mutex> g(mtx);
        requests.push_back(req);
      }
      std::shared_ptr<envs::vector_env> env =
        envs::make_vector_env("CartPole-v1", envs).value();
      env_runner_options ro;
      ro.name = req.name;
      ro.seed = seed + 1000 * req.learner + 100 * req.index + 10 * req.restarts;
      ro.steps_per_batch = steps;
      ro.log = sink();
      auto policy = throwing_on_call(make_store_policy(store, steps), fails(req));
      if (wrap_policy)
        policy = wrap_policy(req, std::move(policy));
      return spawn_env_runner(*sys, ro, env, std::move(policy), req.consumer, req.keeper);
    };
    return p;
  }
};

struct run_end {
  bool interrupted = true;
  std::string failure = "unset";
  std::vector<uint64_t> checkpoints;
};

// How long a test waits between two messages of a running cast: a learner's
// update between checkpoints takes well under a second when the machine is quiet.
constexpr std::chrono::seconds run_message_limit{60};

// Waits for ready (the cast's handles), then for done; counts checkpoint requests.
run_end await_run(caf::scoped_actor& self, caf::actor& keeper, caf::actor& server,
                  caf::actor& metrics, std::function<void()> on_ready = {}) {
  run_end end;
  bool done = false;
  while (!done)
    self->receive(
      [&](ready_atom, caf::actor& k, caf::actor& s, caf::actor& m) {
        keeper = k;
        server = s;
        metrics = m;
        if (on_ready)
          on_ready();
      },
      [&](ckpt_atom, uint64_t updates) { end.checkpoints.push_back(updates); },
      [&](done_atom, bool interrupted, std::string& why) {
        done = true;
        end.interrupted = interrupted;
        end.failure = why;
      },
      test::fail_after("the supervisor's ready, checkpoint or done message",
                       run_message_limit));
  return end;
}

using test::ask;

void shut_down(caf::scoped_actor& self, std::initializer_list<caf::actor> actors) {
  for (auto& a : actors)
    if (a)
      self->send_exit(a, caf::exit_reason::user_shutdown);
}

} // namespace

TEST_CASE("the supervisor spawns the cast from its plan, and the run learns exactly its "
          "budget, counted by the server and the keeper") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t batches = 12;
  supervisor_options opts;
  opts.cast = fx.plan(seed, 2, 2, batches, [](const runner_request&) { return 0; });
  opts.cast.metrics.checkpoint_every_updates = 4;
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics;
  auto end = await_run(self, keeper, server, metrics);
  CHECK_FALSE(end.interrupted);
  CHECK(end.failure.empty());
  REQUIRE(server);
  REQUIRE(keeper);
  // 12 updates with a checkpoint every 4: each request reaches the owner, the
  // last ones too, which fall due as the learners end.
  CHECK(end.checkpoints == std::vector<uint64_t>{4, 8, 12});
  {
    std::lock_guard<std::mutex> g(fx.mtx);
    REQUIRE(fx.requests.size() == 4); // two learners x two runners, none restarted
    for (auto& r : fx.requests) {
      CHECK(r.restarts == 0);
      CHECK(r.name ==
            "learner" + std::to_string(r.learner) + ".runner" + std::to_string(r.index));
    }
  }
  auto ps = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(ps.batches == batches);
  CHECK(ps.env_steps == batches * 4 * 8);
  CHECK(ps.applied + ps.dropped == batches * 2); // two minibatches per batch
  // Every step that was learned had its observation moments merged, and no more.
  auto obs = ask<stream_status>(self, keeper, status_atom::value, std::string{"obs"});
  CHECK(obs.count == ps.env_steps);
  auto row = ask<metrics_counters>(self, metrics, row_atom::value);
  CHECK(row.env_steps == ps.env_steps);
  CHECK(row.updates == batches);
  shut_down(self, {keeper, server, metrics});
}

TEST_CASE("checkpoints that fall due while the learners end still reach the owner, "
          "however far the metrics actor lags behind") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t batches = 12;
  supervisor_options opts;
  opts.cast = fx.plan(seed, 2, 2, batches, [](const runner_request&) { return 0; });
  opts.cast.metrics.checkpoint_every_updates = 3;
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics;
  // A backlog in front of every learner report: the metrics actor reads the
  // run's reports, and asks for their checkpoints, long after the learners
  // ended (before the fix every request after the learners' ends was lost).
  auto end = await_run(self, keeper, server, metrics, [&] {
    for (int i = 0; i < 200000; ++i)
      caf::anon_send(metrics, hosts_atom::value, uint64_t{0}, uint64_t{0}, uint64_t{0});
  });
  CHECK(end.failure.empty());
  CHECK_FALSE(end.interrupted);
  CHECK(end.checkpoints == std::vector<uint64_t>{3, 6, 9, 12});
  shut_down(self, {keeper, server, metrics});
}

TEST_CASE("a runner that throws is restarted with the next restart number, counted and "
          "logged, and the run still learns its whole budget") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  const uint64_t batches = 10;
  supervisor_options opts;
  // learner0.runner1 throws on its 11th policy call (inside its second batch).
  opts.cast = fx.plan(seed, 1, 2, batches, [](const runner_request& r) {
    return r.index == 1 && r.restarts == 0 ? uint64_t{11} : uint64_t{0};
  });
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics;
  auto end = await_run(self, keeper, server, metrics);
  CHECK(end.failure.empty());
  CHECK_FALSE(end.interrupted);
  CHECK(fx.logged("runner 'learner0.runner1' failed"));
  CHECK(fx.logged("restart 1 of 3"));
  {
    std::lock_guard<std::mutex> g(fx.mtx);
    REQUIRE(fx.requests.size() == 3);
    CHECK(fx.requests[2].name == "learner0.runner1");
    CHECK(fx.requests[2].restarts == 1);
  }
  // The lost batch was collected again by the replacement: the budget is whole.
  auto ps = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(ps.env_steps == batches * 4 * 8);
  auto row = ask<metrics_counters>(self, metrics, row_atom::value);
  CHECK(row.env_steps == batches * 4 * 8);
  shut_down(self, {keeper, server, metrics});
}

TEST_CASE("a runner that keeps failing past max_runner_restarts ends the run with a "
          "failure naming it") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  supervisor_options opts;
  opts.cast = fx.plan(seed, 1, 2, 1000, [](const runner_request& r) {
    return r.index == 0 ? uint64_t{3} : uint64_t{0};
  });
  opts.cast.max_runner_restarts = 2;
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics;
  auto end = await_run(self, keeper, server, metrics);
  CHECK_FALSE(end.interrupted);
  CHECK(end.failure.find("runner 'learner0.runner0'") != std::string::npos);
  CHECK(end.failure.find("after 2 restarts") != std::string::npos);
  CHECK(fx.logged("restart 2 of 2"));
  shut_down(self, {keeper, server, metrics});
}

TEST_CASE("a learner that fails is restarted with new runners that feed it, and the run "
          "goes on to its budget") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  // A budget the learners cannot finish before the injected failure arrives,
  // even on a loaded machine (at 40 batches learner 1 once ended normally
  // first, so nothing was restarted).
  const uint64_t batches = 400;
  supervisor_options opts;
  opts.cast = fx.plan(seed, 2, 1, batches, [](const runner_request&) { return 0; });
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics, first_learner1;
  auto end = await_run(self, keeper, server, metrics, [&] {
    {
      std::lock_guard<std::mutex> g(fx.mtx);
      for (auto& r : fx.requests)
        if (r.learner == 1)
          first_learner1 = r.consumer;
    }
    REQUIRE(first_learner1);
    self->send_exit(first_learner1, caf::make_error(caf::sec::runtime_error, "injected"));
  });
  CHECK(end.failure.empty());
  CHECK_FALSE(end.interrupted);
  CHECK(fx.logged("learner 'learner1' failed"));
  CHECK(fx.logged("restart 1 of 2"));
  {
    std::lock_guard<std::mutex> g(fx.mtx);
    REQUIRE(fx.requests.size() == 3);
    const auto& again = fx.requests[2];
    CHECK(again.name == "learner1.runner0");
    CHECK(again.restarts == 1);
    CHECK(again.consumer != first_learner1); // it feeds the new learner
  }
  // The batch the failed learner had asked for is lost; the rest is learned.
  auto ps = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(ps.env_steps <= batches * 4 * 8);
  CHECK(ps.env_steps + 2 * 4 * 8 >= batches * 4 * 8);
  shut_down(self, {keeper, server, metrics});
}

TEST_CASE("a learner that fails past max_learner_restarts ends the run, and the owner "
          "hears its name and reason") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  supervisor_options opts;
  opts.cast = fx.plan(seed, 2, 1, 1000000, [](const runner_request&) { return 0; });
  opts.cast.max_learner_restarts = 0;
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics;
  auto end = await_run(self, keeper, server, metrics, [&] {
    caf::actor learner1;
    {
      std::lock_guard<std::mutex> g(fx.mtx);
      for (auto& r : fx.requests)
        if (r.learner == 1)
          learner1 = r.consumer;
    }
    REQUIRE(learner1);
    self->send_exit(learner1, caf::make_error(caf::sec::runtime_error, "injected"));
  });
  CHECK_FALSE(end.interrupted);
  CHECK(end.failure.find("learner 'learner1' failed") != std::string::npos);
  CHECK(fx.logged("learner 'learner1' failed"));
  shut_down(self, {keeper, server, metrics});
}

TEST_CASE("raising the stop flag stops every learner and drains the server, then the "
          "owner hears that the run was interrupted") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  auto flag = std::make_shared<std::atomic<int>>(0);
  supervisor_options opts;
  opts.cast = fx.plan(seed, 2, 1, 1000000, [](const runner_request&) { return 0; });
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.stop_flag = flag;
  opts.poll_ms = 1;
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics;
  auto end = await_run(self, keeper, server, metrics, [&] { flag->store(15); });
  CHECK(end.interrupted);
  CHECK(end.failure.empty());
  // Far from the budget: the learners stopped on request.
  auto ps = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(ps.env_steps < 1000000 * 4 * 8);
  shut_down(self, {keeper, server, metrics});
}

TEST_CASE(
  "a resume state that does not load stops the start-up, and the owner hears why") {
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  supervisor_options opts;
  opts.cast = fx.plan(1, 1, 1, 10, [](const runner_request&) { return 0; });
  opts.cast.keeper_state = fx.dir.write("stats.bin", "not a statistics file");
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  bool ready = false;
  std::string failure;
  self->receive(
    [&](ready_atom, caf::actor&, caf::actor&, caf::actor&) { ready = true; },
    [&](done_atom, bool, std::string& why) { failure = why; },
    test::fail_after("the supervisor's done message naming the bad stats file"));
  CHECK_FALSE(ready);
  CHECK(failure.find("stats.bin") != std::string::npos);
  CHECK(fx.requests.empty()); // nothing acted
}

TEST_CASE("the supervisor answers every runner's and learner's random state, and sends "
          "the last ones to its owner before done") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  supervisor_options opts;
  opts.cast = fx.plan(seed, 2, 2, 1000000, [](const runner_request&) { return 0; });
  // Learner 1 continues a generator given as words.
  const std::array<uint64_t, 4> words = {seed | 1, seed >> 7, ~seed, 12345};
  opts.cast.learners[1].options.start_gen = words;
  opts.cast.learners[1].budget = std::make_shared<step_budget>(0); // ends at once
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics;
  cast_snapshot during, last;
  bool got_last = false;
  bool done = false;
  while (!done)
    self->receive(
      [&](ready_atom, caf::actor& k, caf::actor& s, caf::actor& m) {
        keeper = k;
        server = s;
        metrics = m;
        during = ask<cast_snapshot>(self, sup, state_atom::value);
        self->send(sup, stop_atom::value);
      },
      [&](ckpt_atom, uint64_t) {},
      [&](cast_snapshot& snap) {
        got_last = true;
        last = std::move(snap);
      },
      [&](done_atom, bool, std::string&) { done = true; },
      test::fail_after("the supervisor's ready, last snapshots or done message",
                       run_message_limit));
  REQUIRE(during.runners.size() == 4);
  std::set<std::string> names;
  for (auto& r : during.runners) {
    names.insert(r.runner);
    CHECK(r.env_id == "CartPole-v1");
    CHECK(r.env.num_envs == 4);
    CHECK(r.episode_return.size() == 4);
  }
  CHECK(names == std::set<std::string>{"learner0.runner0", "learner0.runner1",
                                       "learner1.runner0", "learner1.runner1"});
  // Learner 1 may have ended before the question: then its last state is
  // answered only once it has arrived.
  REQUIRE(!during.learners.empty());
  CHECK(during.learners[0].learner == "learner0");
  REQUIRE(got_last);
  CHECK(last.runners.size() == 4);
  REQUIRE(last.learners.size() == 2);
  for (auto& l : last.learners)
    if (l.learner == "learner1")
      CHECK(l.gen == words); // no batch learned: the generator is where it started
  shut_down(self, {keeper, server, metrics});
}

namespace {

// A latch one runner's policy stops at, mid-batch, until the test opens it
// (or its own bound passes, so that a failed test cannot hang the process).
struct policy_latch {
  std::mutex m;
  std::condition_variable cv;
  bool reached = false;
  bool opened = false;

  void open() {
    std::lock_guard<std::mutex> g(m);
    opened = true;
    cv.notify_all();
  }
};

// Opens the latch when the test ends, however it ends.
struct open_on_exit {
  std::shared_ptr<policy_latch> latch;
  ~open_on_exit() { latch->open(); }
};

} // namespace

TEST_CASE("a checkpoint's hold that an actor does not answer in time is refused naming "
          "it, and the cast goes on and is held whole later") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  supervisor_fixture fx;
  auto latch = std::make_shared<policy_latch>();
  // The first runner of the first learner stops inside its third policy call:
  // inside a batch, where it cannot answer a hold.
  fx.wrap_policy = [latch](const runner_request& req, policy_fn inner) -> policy_fn {
    if (req.learner != 0 || req.index != 0 || req.restarts != 0)
      return inner;
    auto calls = std::make_shared<uint64_t>(0);
    return [inner = std::move(inner), calls, latch](const float* obs, size_t n,
                                                    base::rng& gen, float* actions,
                                                    float* logp) -> result<uint64_t> {
      if (++*calls == 3) {
        std::unique_lock<std::mutex> lock(latch->m);
        latch->reached = true;
        latch->cv.notify_all();
        latch->cv.wait_for(lock, std::chrono::minutes(2), [&] { return latch->opened; });
      }
      return inner(obs, n, gen, actions, logp);
    };
  };
  open_on_exit opener{latch};
  caf::scoped_actor self{*fx.sys};
  supervisor_options opts;
  opts.cast = fx.plan(seed, 1, 2, 1000000, [](const runner_request&) { return 0; });
  opts.owner = caf::actor_cast<caf::actor>(self);
  opts.log = fx.sink();
  opts.snapshot_wait = std::chrono::milliseconds(200);
  auto sup = spawn_supervisor(*fx.sys, opts);
  caf::actor keeper, server, metrics;
  self->receive(
    [&](ready_atom, caf::actor& k, caf::actor& s, caf::actor& m) {
      keeper = k;
      server = s;
      metrics = m;
    },
    test::fail_after("the supervisor's ready message"));
  {
    std::unique_lock<std::mutex> lock(latch->m);
    REQUIRE_MESSAGE(
      latch->cv.wait_for(lock, test::wait_limit, [&] { return latch->reached; }),
      "the runner never reached its third policy call");
  }
  std::string refusal;
  self->request(sup, test::wait_limit, hold_atom::value)
    .receive(
      [&](cast_snapshot&) {
        FAIL("a hold with a runner stuck in a batch was "
             "answered with a snapshot");
      },
      [&](caf::error& e) { refusal = error_message(*fx.sys, e); });
  CHECK(refusal.find("runner 'learner0.runner0' did not give its state within 200 ms") !=
        std::string::npos);
  CHECK(refusal.find("no checkpoint is written now") != std::string::npos);
  CHECK(fx.logged("supervisor: runner 'learner0.runner0' did not give its state"));
  latch->open();
  // The runners were let go: the stuck one finishes its batch, and a later hold
  // gets every runner and the learner. Each try may itself miss the short
  // wait on a loaded machine, so it is tried again, within a bound.
  std::optional<cast_snapshot> held;
  const auto deadline = std::chrono::steady_clock::now() + test::wait_limit;
  std::string last_refusal;
  while (!held && std::chrono::steady_clock::now() < deadline)
    self->request(sup, test::wait_limit, hold_atom::value)
      .receive([&](cast_snapshot& snap) { held = std::move(snap); },
               [&](caf::error& e) { last_refusal = error_message(*fx.sys, e); });
  REQUIRE_MESSAGE(held, "no hold succeeded after the runner went on; the last refusal: "
                          << last_refusal);
  self->send(sup, release_atom::value);
  CHECK(held->runners.size() == 2);
  REQUIRE(held->learners.size() == 1);
  CHECK(held->learners[0].learner == "learner0");
  uint64_t stuck_batches = 0;
  for (auto& r : held->runners)
    if (r.runner == "learner0.runner0")
      stuck_batches = r.status.batches;
  CHECK(stuck_batches >= 1); // the batch it was stuck in was sent
  self->send(sup, stop_atom::value);
  auto end = await_run(self, keeper, server, metrics);
  CHECK(end.interrupted);
  shut_down(self, {keeper, server, metrics});
}
