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
