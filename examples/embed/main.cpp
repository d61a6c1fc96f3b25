// An embedder's program: registers its own environment (a corridor where the
// agent walks to a goal), trains it from a config held in the program with
// the runtime driving, then again from its own loop (the game drives: an
// agent acts and reports), and deploys the first run's trained policy.
// Prints the run folder on its last line.
//
// usage: embed_cpp OUTPUT_DIR
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <troupe/troupe.hpp>

namespace {

// The game's context, shared by every instance the factory makes.
struct corridor_rules {
  float goal = 3;
  int instances = 0;
};

class corridor final : public troupe::environment {
public:
  explicit corridor(corridor_rules& rules) : rules_(rules) { ++rules_.instances; }

  void reset(uint64_t seed, float* obs) override {
    x_ = static_cast<float>(seed % 3) - 1;
    observe(obs);
  }

  troupe::status step(const float* action, float* obs, double& reward, bool& terminated,
                      bool& truncated) override {
    x_ += action[0] > 0.5f ? 1.0f : -1.0f; // action 1: right, 0: left
    terminated = x_ >= rules_.goal;
    truncated = false;
    reward = terminated ? 1.0 : -0.01;
    observe(obs);
    return troupe::ok_status();
  }

private:
  void observe(float* obs) const {
    obs[0] = x_;
    obs[1] = rules_.goal - x_;
  }

  corridor_rules& rules_;
  float x_ = 0;
};

int fail(const char* what, const troupe::error& e) {
  std::fprintf(stderr, "embed_cpp: %s: %s (%s)\n", what, e.message.c_str(),
               troupe::to_string(e.code));
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: embed_cpp OUTPUT_DIR\n");
    return 2;
  }
  std::printf("troupe %s (ABI %d)\n", troupe::version(), troupe::abi_version);

  corridor_rules rules;
  troupe::env_description d;
  d.id = "Corridor-v0";
  d.obs_low = {-50, -50};
  d.obs_high = {50, 50};
  d.num_actions = 2;
  d.max_episode_steps = 25;
  if (auto ok = troupe::register_environment(
        d, [&rules] { return std::make_unique<corridor>(rules); });
      !ok)
    return fail("register_environment", ok.err());

  const std::string config = "[run]\nname = \"corridor\"\nseed = 4\noutput_dir = \"" +
                             std::string(argv[1]) +
                             "\"\n[env]\nid = \"Corridor-v0\"\nnum_envs = 2\n"
                             "[algo]\nname = \"ppo\"\nmode = \"sync\"\n"
                             "total_env_steps = 2048\nnum_steps = 64\n";
  auto session = troupe::session::open_toml(config, "corridor.toml");
  if (!session)
    return fail("open", session.err());
  if (auto ok = session->start(); !ok)
    return fail("start", ok.err());
  // The caller's thread is free while training runs; here it just waits.
  while (true) {
    auto done = session->wait(std::chrono::seconds(1));
    if (!done)
      return fail("wait", done.err());
    if (*done)
      break;
  }
  const std::string run_dir = session->run_dir();
  auto final_progress = session->close();
  if (!final_progress)
    return fail("close", final_progress.err());
  std::printf("trained %llu env steps in %d corridors\n",
              static_cast<unsigned long long>(final_progress->env_steps),
              rules.instances);

  // The game drives: the program's own loop steps four corridors and asks an
  // agent for every action; training learns from what it reports.
  auto game = troupe::session::open_toml(
    config, "corridor_game.toml",
    {"run.name=\"corridor_game\"", "algo.total_env_steps=100000000"});
  if (!game)
    return fail("open (game)", game.err());
  auto agent = game->make_agent(4);
  if (!agent)
    return fail("make_agent", agent.err());
  if (auto ok = game->start(); !ok)
    return fail("start (game)", ok.err());
  corridor_rules game_rules;
  std::vector<corridor> lanes(4, corridor(game_rules));
  std::vector<float> obs(4 * 2);
  std::vector<int> elapsed(4, 0);
  for (size_t i = 0; i < lanes.size(); ++i)
    lanes[i].reset(i, &obs[2 * i]);
  uint64_t steps = 0;
  // Bounded: two updates need 256 reported steps per learner batch.
  while (game->progress().updates < 2 && steps < 2000000) {
    for (size_t i = 0; i < lanes.size(); ++i, ++steps) {
      float action = 0;
      if (auto ok = agent->act(i, &obs[2 * i], &action); !ok)
        return fail("agent::act", ok.err());
      double reward = 0;
      bool terminated = false, truncated = false;
      (void)lanes[i].step(&action, &obs[2 * i], reward, terminated, truncated);
      if (!terminated && ++elapsed[i] == 25)
        truncated = true; // the game's own time limit
      float final_obs[2] = {obs[2 * i], obs[2 * i + 1]};
      if (auto ok = agent->report(i, reward, terminated, truncated, final_obs); !ok)
        return fail("agent::report", ok.err());
      if (terminated || truncated) {
        lanes[i].reset(steps, &obs[2 * i]);
        elapsed[i] = 0;
      }
    }
  }
  auto game_progress = game->close();
  if (!game_progress)
    return fail("close (game)", game_progress.err());
  std::printf("game-driven: %llu updates from %llu steps of the program's loop\n",
              static_cast<unsigned long long>(game_progress->updates),
              static_cast<unsigned long long>(steps));

  // Deployment: the trained policy without a session.
  auto policy = troupe::policy::load(run_dir);
  if (!policy)
    return fail("policy::load", policy.err());
  for (float x = -1; x <= 2; ++x) {
    const float obs[2] = {x, rules.goal - x};
    float action = -1;
    if (auto ok = policy->act(obs, 2, &action); !ok)
      return fail("policy::act", ok.err());
    std::printf("x = %+.0f -> action %.0f\n", x, action);
  }
  std::printf("%s\n", run_dir.c_str());
  return 0;
}
