// A simulator that lets troupe drive: the runtime steps the environment as
// fast as it goes on its own threads while the caller's thread stays free.
//
// The program registers Catcher (examples/catcher.hpp) as a
// troupe::environment, opens a session from TOML text, starts it and polls
// progress() from its own thread (a line per second), asks for a checkpoint
// halfway, and closes the session (which writes the final checkpoint). Then
// it ships the result: the trained policy is loaded from the run folder as a
// troupe::policy, without a session, and plays a few rounds deterministically.
//
//   simulator [--env-steps N] [--rounds K] [--output-dir DIR]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <troupe/troupe.hpp>

#include "catcher.hpp"
#include "catcher_env.hpp"

namespace {

struct options {
  long env_steps = 200000;
  int rounds = 20;
  std::string output_dir = "runs";
};

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--env-steps" && v) {
      o.env_steps = std::atol(v);
      ++i;
      if (o.env_steps <= 0)
        return false;
    } else if (a == "--rounds" && v) {
      o.rounds = std::atoi(v);
      ++i;
      if (o.rounds <= 0)
        return false;
    } else if (a == "--output-dir" && v) {
      o.output_dir = v;
      ++i;
    } else {
      std::fprintf(stderr, "simulator: bad option '%s'\n", a.c_str());
      return false;
    }
  }
  return true;
}

int fail(const char* call, const troupe::error& e) {
  std::fprintf(stderr, "simulator: %s: %s\n", call, e.message.c_str());
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: simulator [--env-steps N] [--rounds K] [--output-dir DIR]\n");
    return 2;
  }
  if (auto s = catcher::register_catcher(); !s.ok())
    return fail("register_environment", s.err());

  // PPO over 8 Catchers the runtime steps itself.
  const std::string config = "[run]\n"
                             "name = \"catcher_simulator\"\n"
                             "seed = 3\n"
                             "device = \"cpu\"\n"
                             "output_dir = \"" +
                             o.output_dir +
                             "\"\n"
                             "[env]\n"
                             "id = \"Catcher-v0\"\n"
                             "num_envs = 8\n"
                             "[algo]\n"
                             "name = \"ppo\"\n"
                             "total_env_steps = " +
                             std::to_string(o.env_steps) +
                             "\n"
                             "num_steps = 64\n"
                             "learning_rate = 5e-4\n"
                             "[algo.ppo]\n"
                             "num_minibatches = 4\n"
                             "update_epochs = 4\n";
  auto opened = troupe::session::open_toml(config, "simulator.toml");
  if (!opened.ok())
    return fail("session::open_toml", opened.err());
  troupe::session session = std::move(*opened);
  if (auto s = session.start(); !s.ok())
    return fail("session::start", s.err());
  std::printf("training Catcher-v0 for %ld env steps; run folder %s\n", o.env_steps,
              session.run_dir().c_str());

  // The caller's thread is free: it polls, prints and asks for a checkpoint.
  using clock_type = std::chrono::steady_clock;
  const auto start = clock_type::now();
  auto next_print = start;
  bool saved = false;
  for (;;) {
    auto done = session.wait(std::chrono::milliseconds(50));
    if (!done.ok())
      return fail("session::wait", done.err());
    const troupe::progress p = session.progress();
    if (!saved && !*done && p.env_steps >= static_cast<uint64_t>(o.env_steps / 2)) {
      auto folder = session.save_checkpoint();
      saved = true;
      if (folder.ok()) {
        std::printf("checkpoint halfway (%llu env steps): %s\n",
                    static_cast<unsigned long long>(p.env_steps), folder->c_str());
      } else {
        // Training may have reached its end since the poll; then the final
        // checkpoint close() writes is the one to ship.
        auto ended = session.wait(std::chrono::milliseconds(0));
        if (!ended.ok() || !*ended)
          return fail("session::save_checkpoint", folder.err());
        std::printf("the run ended before the halfway checkpoint (%s)\n",
                    folder.err().message.c_str());
      }
    }
    if (*done)
      break;
    if (clock_type::now() >= next_print) {
      std::printf("%5.1f s  env steps %llu  updates %llu  episodes %llu  mean return "
                  "(last 100) %.2f\n",
                  std::chrono::duration<double>(clock_type::now() - start).count(),
                  static_cast<unsigned long long>(p.env_steps),
                  static_cast<unsigned long long>(p.updates),
                  static_cast<unsigned long long>(p.episodes), p.return_mean_100);
      std::fflush(stdout);
      next_print += std::chrono::seconds(1);
    }
  }
  const std::string run_dir = session.run_dir();
  auto closed = session.close();
  if (!closed.ok())
    return fail("session::close", closed.err());
  std::printf("trained: %llu env steps, %llu updates, mean return (last 100) %.2f\n",
              static_cast<unsigned long long>(closed->env_steps),
              static_cast<unsigned long long>(closed->updates), closed->return_mean_100);
  if (!saved)
    std::printf("(the run ended before the halfway poll saw it; no extra checkpoint)\n");

  // Deployment: the policy alone, no session, no training.
  auto loaded = troupe::policy::load(run_dir);
  if (!loaded.ok())
    return fail("policy::load", loaded.err());
  const troupe::policy& policy = *loaded;
  std::printf("loaded %s\n", policy.source().c_str());
  double total = 0;
  for (int round = 0; round < o.rounds; ++round) {
    catcher::lane lane;
    lane.gen.s = 900000 + static_cast<uint64_t>(round);
    lane.reset();
    bool over = false;
    double round_return = 0;
    while (!over) {
      float obs[catcher::obs_dim], action = 1;
      lane.observe(obs);
      if (auto s = policy.act(obs, catcher::obs_dim, &action); !s.ok())
        return fail("policy::act", s.err());
      round_return += lane.step(static_cast<int>(action), over);
    }
    total += round_return;
  }
  std::printf("deployed policy, %d rounds, deterministic: mean return %.2f of %d "
              "(random play: about -7)\n",
              o.rounds, total / o.rounds, catcher::fruits_per_round);
  return 0;
}
