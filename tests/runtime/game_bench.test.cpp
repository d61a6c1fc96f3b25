// The embedding benchmark (runtime/cli/game_bench.hpp) behind `troupe bench embed`.
#include <doctest/doctest.h>

#include <algorithm>

#include "runtime/cli/game_bench.hpp"

using namespace troupe;
using namespace troupe::runtime;

TEST_CASE("the embedding benchmark runs a game-driven CartPole with a learner and "
          "reports consistent counts and ordered act() latency percentiles") {
  embed_bench_options o;
  o.train_env_steps = 20480; // forty batches of 4 x 128
  o.latency_samples = 50000;
  auto r = run_embed_bench(o);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.err().message));
  MESSAGE("act p50 " << r->act_p50_us << " us, p99 " << r->act_p99_us << " us, max "
                     << r->act_max_us << " us; game " << r->game_env_steps_per_s
                     << " steps/s, learned " << r->learned_env_steps_per_s << " steps/s");
  CHECK(r->learned_env_steps == o.train_env_steps);
  CHECK(r->game_env_steps >= r->learned_env_steps);
  CHECK(r->act_samples == std::min<uint64_t>(r->game_env_steps, o.latency_samples));
  CHECK(r->act_p50_us > 0);
  CHECK(r->act_p50_us <= r->act_p99_us);
  CHECK(r->act_p99_us <= r->act_max_us);
  o.train_env_steps = 0;
  o.untrained_act_calls = 1000;
  r = run_embed_bench(o);
  REQUIRE(r.ok());
  CHECK(r->game_env_steps == 1000);
  CHECK(r->learned_env_steps == 0);
}
