/* CartPole-v1 in C, trained by troupe over ZeroMQ with the C client
 * (clients/c/troupe_remote.h). Start troupe with a config whose env.id is
 * "remote" (config/remote_cartpole.toml), then:
 *
 *   cartpole_c ENDPOINT [ENVS [MAX_ENV_STEPS [TARGET]]]
 *
 * steps ENVS CartPoles (Gymnasium's CartPole-v1 dynamics: Euler, 500-step
 * limit) in one message per step until the mean return of the last 100
 * episodes exceeds TARGET (exit 0), MAX_ENV_STEPS pass (exit 1) or the
 * session fails for good (exit 2, the message on stderr). When troupe goes
 * away or drops the session, the client says HELLO again with back-off
 * (troupe_remote_reconnect: 8 attempts, 100 ms doubling to 5 s) and every
 * CartPole starts a new episode. It prints a line every 100 episodes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "troupe_remote.h"

#define MAX_ENVS 256

typedef struct {
  double x, x_dot, theta, theta_dot;
  int steps;
  uint64_t rng;
} cartpole;

static double uniform(uint64_t* s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static void reset(cartpole* c, float* obs) {
  c->x = uniform(&c->rng) * 0.1 - 0.05;
  c->x_dot = uniform(&c->rng) * 0.1 - 0.05;
  c->theta = uniform(&c->rng) * 0.1 - 0.05;
  c->theta_dot = uniform(&c->rng) * 0.1 - 0.05;
  c->steps = 0;
  obs[0] = (float)c->x, obs[1] = (float)c->x_dot, obs[2] = (float)c->theta,
  obs[3] = (float)c->theta_dot;
}

/* One step; returns the flags (TROUPE_REMOTE_TERMINATED / _TRUNCATED). */
static uint8_t step(cartpole* c, int action, float* obs) {
  const double g = 9.8, mc = 1.0, mp = 0.1, l = 0.5, tau = 0.02;
  const double force = action == 1 ? 10.0 : -10.0;
  const double cs = cos(c->theta), sn = sin(c->theta);
  const double temp = (force + mp * l * c->theta_dot * c->theta_dot * sn) / (mc + mp);
  const double theta_acc =
    (g * sn - cs * temp) / (l * (4.0 / 3.0 - mp * cs * cs / (mc + mp)));
  const double x_acc = temp - mp * l * theta_acc * cs / (mc + mp);
  c->x += tau * c->x_dot;
  c->x_dot += tau * x_acc;
  c->theta += tau * c->theta_dot;
  c->theta_dot += tau * theta_acc;
  c->steps += 1;
  obs[0] = (float)c->x, obs[1] = (float)c->x_dot, obs[2] = (float)c->theta,
  obs[3] = (float)c->theta_dot;
  if (fabs(c->x) > 2.4 || fabs(c->theta) > 12 * 2 * 3.14159265358979323846 / 360)
    return TROUPE_REMOTE_TERMINATED;
  return c->steps >= 500 ? TROUPE_REMOTE_TRUNCATED : 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: cartpole_c ENDPOINT [ENVS [MAX_ENV_STEPS [TARGET]]]\n");
    return 2;
  }
  const uint32_t n = argc > 2 ? (uint32_t)atoi(argv[2]) : 16;
  const long long max_steps = argc > 3 ? atoll(argv[3]) : 1000000;
  const double target = argc > 4 ? atof(argv[4]) : 475.0;
  if (n == 0 || n > MAX_ENVS) {
    fprintf(stderr, "cartpole_c: ENVS must be in [1, %d]\n", MAX_ENVS);
    return 2;
  }
  static cartpole envs[MAX_ENVS];
  static float obs[MAX_ENVS * 4], final_obs[MAX_ENVS * 4], actions[MAX_ENVS];
  static double rewards[MAX_ENVS], returns[MAX_ENVS], last100[100];
  static uint8_t flags[MAX_ENVS];
  static uint32_t ids[MAX_ENVS];
  char error[512];
  troupe_remote* r =
    troupe_remote_open(argv[1], "cartpole-c", n, 4, 2, 0, 60000, error, sizeof error);
  if (!r) {
    fprintf(stderr, "cartpole_c: %s\n", error);
    return 2;
  }
  for (uint32_t i = 0; i < n; ++i) {
    ids[i] = i;
    envs[i].rng = 1000 + i;
    reset(&envs[i], &obs[4 * i]);
  }
  long long env_steps = 0, episodes = 0;
  uint32_t ended = 0;
  int first = 1, status = 1;
  double mean = 0;
  while (env_steps < max_steps) {
    uint64_t version = 0;
    const int got = troupe_remote_step(r, n, ids, obs, first ? NULL : rewards,
                                       first ? NULL : flags, ended ? final_obs : NULL,
                                       actions, &version, error, sizeof error);
    if (got != TROUPE_REMOTE_OK) {
      fprintf(stderr, "cartpole_c: %s\n", error);
      if (troupe_remote_retryable(r, got) &&
          troupe_remote_reconnect(r, error, sizeof error) == TROUPE_REMOTE_OK) {
        fprintf(stderr, "cartpole_c: a new session (%llu)\n",
                (unsigned long long)troupe_remote_session(r));
        for (uint32_t i = 0; i < n; ++i) { /* a new session: new episodes */
          returns[i] = 0;
          reset(&envs[i], &obs[4 * i]);
        }
        first = 1;
        ended = 0;
        continue;
      }
      fprintf(stderr, "cartpole_c: %s\n", error);
      status = 2;
      break;
    }
    first = 0;
    ended = 0;
    for (uint32_t i = 0; i < n; ++i) {
      flags[i] = step(&envs[i], (int)actions[i], &obs[4 * i]);
      rewards[i] = 1.0;
      returns[i] += 1.0;
      if (flags[i]) {
        for (int k = 0; k < 4; ++k)
          final_obs[4 * ended + k] = obs[4 * i + k];
        ended += 1;
        last100[episodes % 100] = returns[i];
        episodes += 1;
        if (episodes % 100 == 0) {
          double m = 0;
          for (int k = 0; k < 100; ++k)
            m += last100[k] / 100.0;
          printf("cartpole_c: %lld env steps, %lld episodes, 100-episode mean %.1f, "
                 "policy version %llu\n",
                 env_steps + n, episodes, m, (unsigned long long)version);
          fflush(stdout);
        }
        returns[i] = 0;
        reset(&envs[i], &obs[4 * i]);
      }
    }
    env_steps += n;
    if (episodes >= 100) {
      mean = 0;
      for (int k = 0; k < 100; ++k)
        mean += last100[k] / 100.0;
      if (mean > target) {
        status = 0;
        break;
      }
    }
  }
  printf("cartpole_c: %lld env steps, %lld episodes, 100-episode mean %.1f\n", env_steps,
         episodes, mean);
  troupe_remote_close(r);
  return status;
}
