// Tests of runtime::session, the runtime-drives form of embedding: a bad config
// opens nothing, start() returns while training runs on the runtime's threads,
// checkpoints on demand, stop and close, and calls on a closed session.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <thread>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <unistd.h>

#include "actors/env_runner.hpp"
#include "actors/policy_store.hpp"
#include "envs/registry.hpp"
#include "learners/checkpoint.hpp"
#include "runtime/config.hpp"
#include "runtime/session.hpp"
#include "tests/cli_support.hpp"
#include "tests/seed.hpp"
#include "tests/temp_folder.hpp"

using troupe::runtime::progress_info;
using troupe::runtime::session;
using troupe::test::temp_folder;

namespace fs = std::filesystem;

namespace {

// Longest a test waits for training to reach a point; every wait is bounded
// by it and fails naming what it expected.
constexpr std::chrono::seconds limit{120};

std::string config_path() {
  return std::string(TROUPE_SOURCE_DIR) + "/config/cartpole_ppo.toml";
}

// CartPole PPO (batches of 512 steps) with `seed`, writing under `out`, with a
// budget far beyond any test's wait unless `steps` says otherwise.
troupe::runtime::config cartpole(const fs::path& out, uint64_t seed,
                                 uint64_t steps = 50'000'000) {
  auto cfg = troupe::runtime::load_config(
    config_path(),
    {fmt::format("run.output_dir=\"{}\"", out.string()), fmt::format("run.seed={}", seed),
     fmt::format("algo.total_env_steps={}", steps), "run.checkpoint_every_updates=0"});
  INFO((cfg ? std::string{} : cfg.err().message));
  REQUIRE(cfg.ok());
  return *cfg;
}

// Waits (bounded, through session::wait) until `pred(progress)` holds while
// training still runs; fails naming `what` when training ends first or the
// limit passes.
template <class Pred>
progress_info wait_for_progress(session& s, Pred pred, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto p = s.progress();
    if (pred(p))
      return p;
    if (std::chrono::steady_clock::now() > deadline)
      FAIL("waited " << limit.count() << " s for " << what << "; env_steps "
                     << p.env_steps << ", updates " << p.updates);
    auto ended = s.wait(std::chrono::milliseconds(20));
    REQUIRE(ended.ok());
    if (*ended)
      FAIL("training ended before " << what);
  }
}

// The update count of checkpoint folder `dir` (its name).
uint64_t updates_of(const std::string& dir) {
  return std::stoull(fs::path(dir).filename().string());
}

} // namespace

TEST_CASE("a config naming an unknown environment opens no session and the error names "
          "the file line and key") {
  temp_folder dir("session-bad");
  auto file =
    dir.write("bad.toml", "[run]\noutput_dir = \"" + (dir.path / "out").string() +
                            "\"\n\n[env]\nid = \"NoSuchEnv-v0\"\n");
  auto cfg = troupe::runtime::load_config(file);
  REQUIRE(cfg.ok()); // the schema takes any id; the registry decides
  auto s = session::open(*cfg);
  REQUIRE_FALSE(s.ok());
  const auto& msg = s.err().message;
  INFO(msg);
  CHECK(msg.find(file + ":5") != std::string::npos);
  CHECK(msg.find("env.id") != std::string::npos);
  CHECK(msg.find("NoSuchEnv-v0") != std::string::npos);
  CHECK(!fs::exists(dir.path / "out"));

  // A value the schema rejects fails earlier, at load, also with file:line.
  auto worse = dir.write("worse.toml", "[algo]\nnum_steps = -3\n");
  auto rejected = troupe::runtime::load_config(worse);
  REQUIRE_FALSE(rejected.ok());
  CHECK(rejected.err().message.find(worse + ":2") != std::string::npos);
  CHECK(rejected.err().message.find("num_steps") != std::string::npos);
}

TEST_CASE("start returns while training runs on the runtime's threads and request_stop "
          "with close writes a final checkpoint and returns interrupted") {
  temp_folder dir("session-run");
  const uint64_t seed = troupe::test::fresh_seed() % 100000;
  CAPTURE(seed);
  auto opened = session::open(cartpole(dir.path / "out", seed));
  REQUIRE(opened.ok());
  session s = std::move(*opened);
  CHECK(s.run_dir().empty()); // nothing created before start
  CHECK(!fs::exists(dir.path / "out"));
  REQUIRE(s.start().ok());
  const std::string run = s.run_dir();
  REQUIRE(!run.empty());
  CHECK(fs::exists(fs::path(run) / "config.toml"));

  // The caller's thread is free: it watches the counters rise as training goes.
  auto first = wait_for_progress(
    s, [](const progress_info& p) { return p.updates >= 2; }, "two updates");
  CHECK(first.running);
  CHECK(!first.finished);
  CHECK(first.env_steps >= 1024);
  CHECK(first.policy_version >= 1);
  CHECK(first.transitions_dropped == 0);
  auto later = wait_for_progress(
    s, [&](const progress_info& p) { return p.env_steps > first.env_steps; },
    "env_steps to rise past the first reading");
  CHECK(later.updates >= first.updates);

  s.request_stop();
  auto r = s.close();
  INFO((r ? std::string{} : r.err().message));
  REQUIRE(r.ok());
  CHECK(r->interrupted);
  CHECK(r->run_dir == run);
  CHECK(r->env_steps >= later.env_steps);
  CHECK(r->env_steps < 50'000'000u);
  // The final checkpoint is the newest, complete, at the final update count.
  auto ckpts = troupe::learners::checkpoint_folders(run);
  REQUIRE(!ckpts.empty());
  CHECK(fs::exists(fs::path(ckpts.back()) / "manifest.txt"));
  CHECK(updates_of(ckpts.back()) >= later.updates);

  // After close: the last counters stay readable, the session no longer runs,
  // and every call that needs a running session says so.
  auto after = s.progress();
  CHECK(!after.running);
  CHECK(after.finished);
  CHECK(after.updates >= later.updates);
  auto again = s.close();
  REQUIRE_FALSE(again.ok());
  CHECK(again.err().message.find("closed already") != std::string::npos);
  auto waited = s.wait(std::chrono::milliseconds(1));
  REQUIRE_FALSE(waited.ok());
  CHECK(waited.err().message.find("closed") != std::string::npos);
  CHECK_FALSE(s.start().ok());
  auto saved = s.save_checkpoint();
  REQUIRE_FALSE(saved.ok());
  CHECK(saved.err().message.find("closed") != std::string::npos);
}

TEST_CASE("save_checkpoint mid-run writes a complete checkpoint that --resume continues "
          "from") {
  temp_folder dir("session-save");
  const uint64_t seed = troupe::test::fresh_seed() % 100000;
  CAPTURE(seed);
  auto opened = session::open(cartpole(dir.path / "out", seed));
  REQUIRE(opened.ok());
  auto& s = *opened;
  REQUIRE(s.start().ok());
  auto p = wait_for_progress(
    s, [](const progress_info& x) { return x.updates >= 3; }, "three updates");
  auto saved = s.save_checkpoint();
  INFO((saved ? std::string{} : saved.err().message));
  REQUIRE(saved.ok());
  const std::string run = s.run_dir();
  CHECK(fs::path(*saved).parent_path() == fs::path(run) / "checkpoints");
  CHECK(fs::exists(fs::path(*saved) / "manifest.txt"));
  CHECK(!fs::exists(*saved + ".tmp"));
  CHECK(updates_of(*saved) >= p.updates);
  // Still training after the checkpoint.
  wait_for_progress(
    s, [&](const progress_info& x) { return x.updates > updates_of(*saved); },
    "an update after the checkpoint");
  s.request_stop();
  REQUIRE(s.close().ok());

  // Keep only the checkpoint saved on demand, then resume from it.
  for (auto& c : troupe::learners::checkpoint_folders(run))
    if (c != *saved)
      fs::remove_all(c);
  std::string counters;
  {
    std::ifstream in(fs::path(*saved) / "counters.txt");
    counters.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto at = counters.find("env_steps ");
  REQUIRE(at != std::string::npos);
  const uint64_t saved_steps = std::stoull(counters.substr(at + 10));
  const uint64_t budget = saved_steps + 2 * 512;
  // With a trailing slash: the same run, named the same.
  auto r = troupe::test::run_troupe(
    fmt::format("train --resume '{}/' --set algo.total_env_steps={}", run, budget), dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("run folder: " + run + "\n") != std::string::npos);
  CHECK(r.err.find("resuming from " + *saved) != std::string::npos);
  CHECK(r.out.find(fmt::format("env_steps {}", budget)) != std::string::npos);
}

TEST_CASE("a run folder that another session runs is refused to a resume, naming the "
          "holder's pid, and once that session is closed the resume runs") {
  temp_folder dir("session-lock");
  const uint64_t seed = troupe::test::fresh_seed() % 100000;
  CAPTURE(seed);
  auto opened = session::open(cartpole(dir.path / "out", seed));
  REQUIRE(opened.ok());
  auto& first = *opened;
  REQUIRE(first.start().ok());
  // The first checkpoint is written at the run's start; one update later the
  // folder is a run to resume.
  wait_for_progress(
    first, [](const progress_info& x) { return x.updates >= 1; }, "one update");
  const std::string run = first.run_dir();
  auto second = session::open(cartpole(dir.path / "out", seed), run);
  INFO((second ? std::string{} : second.err().message));
  REQUIRE(second.ok());
  auto refused = second->start();
  REQUIRE_FALSE(refused.ok());
  const auto& why = refused.err().message;
  CAPTURE(why);
  CHECK(refused.err().code == troupe::errc::unavailable);
  CHECK(why.find("run folder " + run + " is in use by another troupe process") !=
        std::string::npos);
  CHECK(why.find(fmt::format("pid {}", ::getpid())) != std::string::npos);
  (void)second->close();
  first.request_stop();
  REQUIRE(first.close().ok());
  // Released: a resume of the same folder starts and ends.
  auto third = session::open(cartpole(dir.path / "out", seed, 1), run);
  INFO((third ? std::string{} : third.err().message));
  REQUIRE(third.ok());
  auto started = third->start();
  INFO((started ? std::string{} : started.err().message));
  REQUIRE(started.ok());
  third->request_stop();
  CHECK(third->close().ok());
}

TEST_CASE("a session closed without start returns an empty result and writes nothing "
          "and a second close is an error") {
  temp_folder dir("session-unstarted");
  const uint64_t seed = troupe::test::fresh_seed() % 100000;
  CAPTURE(seed);
  auto opened = session::open(cartpole(dir.path / "out", seed));
  REQUIRE(opened.ok());
  auto& s = *opened;
  auto waited = s.wait(std::chrono::milliseconds(1));
  REQUIRE_FALSE(waited.ok());
  CHECK(waited.err().message.find("not started") != std::string::npos);
  auto saved = s.save_checkpoint();
  REQUIRE_FALSE(saved.ok());
  CHECK(saved.err().message.find("not started") != std::string::npos);
  s.request_stop(); // a no-op before start
  auto p = s.progress();
  CHECK(!p.running);
  CHECK(!p.finished);
  CHECK(p.env_steps == 0);
  CHECK(std::isnan(p.return_mean_100));

  auto r = s.close();
  REQUIRE(r.ok());
  CHECK(r->env_steps == 0);
  CHECK(r->updates == 0);
  CHECK(r->run_dir.empty());
  CHECK(!r->interrupted);
  CHECK(!fs::exists(dir.path / "out"));
  auto again = s.close();
  REQUIRE_FALSE(again.ok());
  CHECK(again.err().message.find("closed already") != std::string::npos);
  CHECK_FALSE(s.start().ok());
  CHECK(!fs::exists(dir.path / "out"));
}

TEST_CASE("a session that trains to its budget ends by itself and close returns the "
          "whole run while a moved-from session answers with errors") {
  temp_folder dir("session-budget");
  const uint64_t seed = troupe::test::fresh_seed() % 100000;
  CAPTURE(seed);
  auto opened = session::open(cartpole(dir.path / "out", seed, 4 * 512));
  REQUIRE(opened.ok());
  session s = std::move(*opened);
  auto stale = opened->close();
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.err().message.find("moved from") != std::string::npos);

  REQUIRE(s.start().ok());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto ended = s.wait(std::chrono::milliseconds(100));
    REQUIRE(ended.ok());
    if (*ended)
      break;
    if (std::chrono::steady_clock::now() > deadline)
      FAIL("a 2048-step run did not end within " << limit.count() << " s");
  }
  CHECK(s.progress().finished);
  auto r = s.close();
  INFO((r ? std::string{} : r.err().message));
  REQUIRE(r.ok());
  CHECK(!r->interrupted);
  CHECK(r->env_steps == 4 * 512);
  CHECK(r->updates == 4);
  auto ckpts = troupe::learners::checkpoint_folders(r->run_dir);
  REQUIRE(!ckpts.empty());
  CHECK(updates_of(ckpts.back()) == 4);
}

TEST_CASE("a learner whose runner slots come from a factory trains with the factory's "
          "actors") {
  temp_folder dir("session-slots");
  const uint64_t seed = troupe::test::fresh_seed() % 100000;
  CAPTURE(seed);
  std::atomic<int> calls{0};
  std::vector<troupe::runtime::runner_slot> seen;
  std::mutex seen_mtx;
  troupe::runtime::session_options options;
  // The factory stands an environment runner of its own in the slot: what a
  // game-driven agent would put there instead.
  options.cast.runner_factories.push_back(
    [&](caf::actor_system& sys, const troupe::runtime::runner_slot& slot) {
      ++calls;
      {
        std::lock_guard<std::mutex> lock(seen_mtx);
        seen.push_back(slot);
      }
      auto env = troupe::envs::make_vector_env("CartPole-v1", slot.envs, 1);
      if (!env)
        return caf::actor{};
      troupe::actors::env_runner_options ro;
      ro.name = slot.request.name;
      ro.seed = slot.seed;
      ro.steps_per_batch = slot.steps_per_batch;
      return troupe::actors::spawn_env_runner(
        sys, ro, std::shared_ptr<troupe::envs::vector_env>(std::move(*env)),
        troupe::actors::make_store_policy(slot.store, slot.steps_per_batch),
        slot.request.consumer, slot.request.keeper);
    });
  const auto dropped = std::make_shared<std::atomic<uint64_t>>(seed + 1);
  options.transitions_dropped = dropped;
  auto opened = session::open(cartpole(dir.path / "out", seed, 4 * 512), {}, options);
  REQUIRE(opened.ok());
  CHECK(opened->progress().transitions_dropped == seed + 1);
  auto r = [&] {
    REQUIRE(opened->start().ok());
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto ended = opened->wait(std::chrono::milliseconds(100));
      REQUIRE(ended.ok());
      if (*ended)
        break;
      if (std::chrono::steady_clock::now() > deadline)
        FAIL("a 2048-step run did not end within " << limit.count() << " s");
    }
    return opened->close();
  }();
  INFO((r ? std::string{} : r.err().message));
  REQUIRE(r.ok());
  CHECK(r->env_steps == 4 * 512);
  CHECK(calls.load() == 1); // one learner, one runner slot, no restart
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].request.learner == 0);
  CHECK(seen[0].request.index == 0);
  CHECK(seen[0].request.restarts == 0);
  CHECK(seen[0].request.name == "learner0.runner0");
  CHECK(seen[0].envs == 4);
  CHECK(seen[0].steps_per_batch == 128);
  CHECK(seen[0].store != nullptr);
  CHECK(seen[0].spec.obs_dim == 4);
  CHECK(!seen[0].saved);
  dropped->store(seed + 5);
  CHECK(opened->progress().transitions_dropped == seed + 5);
}

TEST_CASE("a session started on one thread is closed on another while the first lives "
          "on") {
  // The thread that made the actor system held its logger, and the system's
  // destructor waited for the logger forever when another thread closed it.
  temp_folder dir("session-threads");
  const uint64_t seed = troupe::test::fresh_seed() % 100000;
  CAPTURE(seed);
  auto opened = session::open(cartpole(dir.path / "out", seed, 2 * 512));
  REQUIRE(opened.ok());
  auto s = std::make_shared<session>(std::move(*opened));
  REQUIRE(s->start().ok()); // this thread lives on while another closes
  auto closing = std::async(std::launch::async, [s] { return s->close(); });
  if (closing.wait_for(limit) != std::future_status::ready) {
    // Left undestroyed: its destructor would wait for the hung close().
    new auto(std::move(closing));
    FAIL("close() on another thread than start() did not return within " << limit.count()
                                                                         << " s");
  }
  auto r = closing.get();
  INFO((r ? std::string{} : r.err().message));
  REQUIRE(r.ok());
  // Closed at once, it may have counted no step yet (under ASan it had not).
  CHECK(r->run_dir == s->run_dir());
  CHECK(!r->run_dir.empty());
}

TEST_CASE("more slow runners than the layout has runner slots opens no session, naming "
          "the key, the value and the slots") {
  temp_folder dir("session-slow");
  auto file =
    dir.write("slow.toml", "[run]\noutput_dir = \"" + (dir.path / "out").string() +
                             "\"\n\n[env]\nslow_runners = 5\nslowdown = 2.0\n\n"
                             "[algo]\nnum_learners = 2\nrunners_per_learner = 2\n");
  auto cfg = troupe::runtime::load_config(file);
  REQUIRE(cfg.ok());
  auto s = session::open(*cfg);
  REQUIRE_FALSE(s.ok());
  const auto& msg = s.err().message;
  INFO(msg);
  CHECK(msg.find(file + ":5") != std::string::npos);
  CHECK(msg.find("env.slow_runners = 5") != std::string::npos);
  CHECK(msg.find("4 (algo.num_learners = 2 x algo.runners_per_learner = 2)") !=
        std::string::npos);
  CHECK(!fs::exists(dir.path / "out"));
}
