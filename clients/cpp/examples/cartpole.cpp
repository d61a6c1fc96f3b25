// CartPole-v1 in C++, trained by troupe over ZeroMQ with the C++ client
// (clients/cpp/troupe_remote.hpp). Start troupe with a config whose env.id is
// "remote" (config/remote_cartpole.toml), then:
//
//   cartpole_cpp ENDPOINT [ENVS [MAX_ENV_STEPS [TARGET]]]
//
// steps ENVS CartPoles (Gymnasium's CartPole-v1 dynamics: Euler, 500-step
// limit) in one message per step until the mean return of the last 100
// episodes exceeds TARGET (exit 0), MAX_ENV_STEPS pass (exit 1) or the
// session fails for good (exit 2, the message on stderr). When troupe goes
// away or drops the session, the client says HELLO again with back-off
// (session::reconnect) and every CartPole starts a new episode. CURVE: set
// TROUPE_SERVER_KEY (troupe's public key) and TROUPE_CLIENT_KEY (a file with
// this client's secret key, as `troupe remote keygen` writes it). It prints
// a line every 100 episodes.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "troupe_remote.hpp"

namespace {

struct cartpole {
  std::array<double, 4> s{}; // x, x_dot, theta, theta_dot
  int steps = 0;
  std::mt19937_64 rng;

  explicit cartpole(uint64_t seed) : rng(seed) {}

  void observe(float* obs) const {
    for (int k = 0; k < 4; ++k)
      obs[k] = static_cast<float>(s[k]);
  }

  void reset(float* obs) {
    std::uniform_real_distribution<double> u(-0.05, 0.05);
    for (double& v : s)
      v = u(rng);
    steps = 0;
    observe(obs);
  }

  // One step; returns the flags (troupe_client::terminated / truncated).
  uint8_t step(int action, float* obs) {
    const double g = 9.8, mc = 1.0, mp = 0.1, l = 0.5, tau = 0.02;
    const double force = action == 1 ? 10.0 : -10.0;
    const double cs = std::cos(s[2]), sn = std::sin(s[2]);
    const double temp = (force + mp * l * s[3] * s[3] * sn) / (mc + mp);
    const double theta_acc =
      (g * sn - cs * temp) / (l * (4.0 / 3.0 - mp * cs * cs / (mc + mp)));
    const double x_acc = temp - mp * l * theta_acc * cs / (mc + mp);
    s[0] += tau * s[1];
    s[1] += tau * x_acc;
    s[2] += tau * s[3];
    s[3] += tau * theta_acc;
    steps += 1;
    observe(obs);
    if (std::fabs(s[0]) > 2.4 || std::fabs(s[2]) > 12 * 2 * M_PI / 360)
      return troupe_client::terminated;
    return steps >= 500 ? troupe_client::truncated : 0;
  }
};

std::string first_word(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: cartpole_cpp ENDPOINT [ENVS [MAX_ENV_STEPS [TARGET]]]\n");
    return 2;
  }
  const uint32_t n = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 16;
  const long long max_steps = argc > 3 ? std::atoll(argv[3]) : 1000000;
  const double target = argc > 4 ? std::atof(argv[4]) : 475.0;
  if (n == 0 || n > 4096) {
    std::fprintf(stderr, "cartpole_cpp: ENVS must be in [1, 4096]\n");
    return 2;
  }
  troupe_client::options opts;
  if (const char* server = std::getenv("TROUPE_SERVER_KEY")) {
    const char* client = std::getenv("TROUPE_CLIENT_KEY");
    char pub[41] = {};
    const std::string secret = client ? first_word(client) : std::string{};
    if (secret.size() != 40 || zmq_curve_public(pub, secret.c_str()) != 0) {
      std::fprintf(stderr, "cartpole_cpp: TROUPE_CLIENT_KEY must name a file holding a "
                           "Z85 secret key\n");
      return 2;
    }
    opts.server_public_key = server;
    opts.public_key = pub;
    opts.secret_key = secret;
  }
  troupe_client::session session;
  auto ok = session.open(argv[1], "cartpole-cpp", n, 4, troupe_client::discrete(2),
                         std::chrono::seconds(60), opts);
  if (!ok) {
    std::fprintf(stderr, "cartpole_cpp: %s\n", ok.message.c_str());
    return 2;
  }
  std::vector<cartpole> envs;
  std::vector<uint32_t> ids(n);
  std::vector<float> obs(4 * n), final_obs, actions;
  std::vector<double> rewards, returns(n, 0.0), last100(100, 0.0);
  std::vector<uint8_t> flags;
  for (uint32_t i = 0; i < n; ++i) {
    ids[i] = i;
    envs.emplace_back(1000 + i);
    envs[i].reset(&obs[4 * i]);
  }
  long long env_steps = 0, episodes = 0;
  double mean = 0;
  int status = 1;
  while (env_steps < max_steps) {
    ok = session.step(ids, obs, rewards, flags, final_obs, actions);
    if (!ok) {
      std::fprintf(stderr, "cartpole_cpp: %s\n", ok.message.c_str());
      if (troupe_client::session::retryable(ok) && (ok = session.reconnect())) {
        std::fprintf(stderr, "cartpole_cpp: a new session (%llu)\n",
                     static_cast<unsigned long long>(session.id()));
        for (uint32_t i = 0; i < n; ++i) { // a new session: new episodes
          returns[i] = 0;
          envs[i].reset(&obs[4 * i]);
        }
        rewards.clear();
        flags.clear();
        final_obs.clear();
        continue;
      }
      std::fprintf(stderr, "cartpole_cpp: %s\n", ok.message.c_str());
      status = 2;
      break;
    }
    rewards.assign(n, 1.0);
    flags.assign(n, 0);
    final_obs.clear();
    for (uint32_t i = 0; i < n; ++i) {
      flags[i] = envs[i].step(static_cast<int>(actions[i]), &obs[4 * i]);
      returns[i] += 1.0;
      if (flags[i]) {
        final_obs.insert(final_obs.end(), &obs[4 * i], &obs[4 * i + 4]);
        last100[episodes % 100] = returns[i];
        episodes += 1;
        returns[i] = 0;
        envs[i].reset(&obs[4 * i]);
        if (episodes % 100 == 0) {
          double m = 0;
          for (double r : last100)
            m += r / 100.0;
          std::printf("cartpole_cpp: %lld env steps, %lld episodes, 100-episode mean "
                      "%.1f, policy version %llu\n",
                      env_steps + n, episodes, m,
                      static_cast<unsigned long long>(session.policy_version()));
          std::fflush(stdout);
        }
      }
    }
    env_steps += n;
    if (episodes >= 100) {
      mean = 0;
      for (double r : last100)
        mean += r / 100.0;
      if (mean > target) {
        status = 0;
        break;
      }
    }
  }
  std::printf("cartpole_cpp: %lld env steps, %lld episodes, 100-episode mean %.1f\n",
              env_steps, episodes, mean);
  session.close();
  return status;
}
