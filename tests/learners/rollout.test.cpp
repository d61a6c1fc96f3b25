// Action selection of learners/rollout.hpp that tests/actors does not cover.
#include "learners/rollout.hpp"

#include <random>

#include <doctest/doctest.h>

#include "tests/seed.hpp"

using namespace troupe::learners;

TEST_CASE("the most likely categorical action is the largest logit, the first on ties") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> level(-3, 3); // few values: ties are common
  const size_t rows = 50, n = 6;
  std::vector<float> logits(rows * n);
  for (auto& l : logits)
    l = static_cast<float>(level(rng));
  std::vector<float> actions(rows, -1.0f);
  most_likely_categorical(logits.data(), rows, n, actions.data());
  for (size_t r = 0; r < rows; ++r) {
    size_t expected = 0;
    for (size_t j = 1; j < n; ++j)
      if (logits[r * n + j] > logits[r * n + expected])
        expected = j;
    CAPTURE(r);
    CHECK(actions[r] == static_cast<float>(expected));
  }
}

TEST_CASE("a transition both terminated and truncated is cut without bootstrapping: "
          "terminated wins, as in Gymnasium") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> draw(0.5f, 2.0f);
  const size_t steps = 6, envs = 1, ended = 3;
  std::vector<float> rewards(steps), values(steps + 1);
  for (auto& r : rewards)
    r = draw(rng);
  for (auto& v : values)
    v = draw(rng); // positive: a bootstrap would change the result
  std::vector<uint8_t> none(steps, 0), flag(steps, 0), autoreset(steps, 0);
  flag[ended] = 1;
  autoreset[ended + 1] = 1; // next-step autoreset after the episode's end
  const double gamma = 0.9, lambda = 0.8;
  struct outcome {
    std::vector<float> adv, ret;
  };
  auto gae = [&](const std::vector<uint8_t>& term, const std::vector<uint8_t>& trunc) {
    outcome o{std::vector<float>(steps), std::vector<float>(steps)};
    std::vector<uint8_t> valid(steps);
    compute_gae(steps, envs, rewards.data(), term.data(), trunc.data(), autoreset.data(),
                values.data(), gamma, lambda, o.adv.data(), o.ret.data(), valid.data());
    return o;
  };
  const auto both = gae(flag, flag);
  const auto terminated = gae(flag, none);
  const auto truncated = gae(none, flag);
  CHECK(both.adv == terminated.adv);
  CHECK(both.ret == terminated.ret);
  // float64 reference of the ended step: no bootstrap, no trace from the next episode.
  CHECK(both.adv[ended] ==
        doctest::Approx(static_cast<double>(rewards[ended]) - values[ended]));
  CHECK(truncated.adv[ended] != doctest::Approx(both.adv[ended]));
}
