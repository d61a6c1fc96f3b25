// Checkpoints cross between troupe and PyTorch: a file troupe saves loads into
// the documented PyTorch module (benchmarks/torch_policy.py, load_state_dict
// strict) and gives the same outputs as `troupe policy act`; a file PyTorch
// writes loads into troupe and gives PyTorch's outputs. Needs Debian's
// python3-torch at /usr/bin/python3; skipped with a message without it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "learners/checkpoint.hpp"
#include "tests/cli_support.hpp"
#include "tests/learners/policy_reference.hpp"
#include "tests/skip.hpp"

using namespace troupe::learners;
using troupe::test::fresh_seed;
using troupe::test::lines_of;
using troupe::test::reference_arch;
using troupe::test::run_command;
using troupe::test::run_troupe;
using troupe::test::split_json_numbers;
using troupe::test::temp_folder;

namespace {

constexpr const char* python = "/usr/bin/python3";

bool torch_available() {
  auto cmd = fmt::format("{} -c 'import torch' > /dev/null 2>&1", python);
  return std::system(cmd.c_str()) == 0;
}

std::string torch_policy_script() {
  return std::string(TROUPE_SOURCE_DIR) + "/benchmarks/torch_policy.py";
}

// One architecture of the interop matrix, with the default epsilons, clip
// and momentum.
reference_arch arch(bool discrete, int64_t obs_dim, int64_t action_dim,
                    std::vector<int64_t> hidden, bool relu, bool obs_norm,
                    const char* batch_norm) {
  reference_arch a;
  a.discrete = discrete;
  a.obs_dim = obs_dim;
  a.action_dim = action_dim;
  a.hidden = std::move(hidden);
  a.relu = relu;
  a.obs_norm = obs_norm;
  a.batch_norm = batch_norm;
  return a;
}

// CleanRL's CartPole and continuous-control shapes, both activations, every
// batch-norm mode, and a network without hidden layers.
const std::vector<reference_arch> matrix = {
  arch(true, 4, 2, {64, 64}, false, true, "none"),
  arch(false, 3, 1, {64, 64}, false, true, "none"),
  arch(true, 6, 3, {32, 16}, true, false, "global"),
  arch(false, 5, 2, {8}, true, true, "local"),
  arch(true, 2, 4, {}, false, true, "none"),
};

std::string write_obs_csv(const temp_folder& dir, int64_t dim, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::string text;
  for (int64_t j = 0; j < dim; ++j)
    text += fmt::format("{}obs{}", j == 0 ? "" : ",", j);
  text += "\n";
  for (int r = 0; r < 16; ++r) {
    for (int64_t j = 0; j < dim; ++j)
      text += fmt::format("{}{}", j == 0 ? "" : ",", normal(rng));
    text += "\n";
  }
  return dir.write("obs.csv", text);
}

// The values of number literals, in order.
std::vector<double> values_of(const std::vector<std::string>& literals) {
  std::vector<double> out;
  for (auto& literal : literals)
    out.push_back(std::strtod(literal.c_str(), nullptr));
  return out;
}

// Same keys and list lengths on every line, numbers equal to 1e-5 relative
// to max(1, |x|) (float32 outputs near zero carry no relative precision).
void check_same_outputs(const std::string& troupe_out, const std::string& torch_out) {
  auto a = lines_of(troupe_out);
  auto b = lines_of(torch_out);
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i]);
    CAPTURE(b[i]);
    auto [sa, literals_a] = split_json_numbers(a[i]);
    auto [sb, literals_b] = split_json_numbers(b[i]);
    auto na = values_of(literals_a);
    auto nb = values_of(literals_b);
    CHECK(sa == sb);
    REQUIRE(na.size() == nb.size());
    for (size_t k = 0; k < na.size(); ++k)
      CHECK(std::fabs(na[k] - nb[k]) <= 1e-5 * std::max(1.0, std::fabs(nb[k])));
  }
}

} // namespace

TEST_CASE(
  "a checkpoint saved by troupe loads into the documented PyTorch module with the "
  "same outputs") {
  if (!torch_available()) {
    TROUPE_SKIP(std::string(python) +
                " cannot import torch (install Debian's python3-torch)");
  }
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("interop");
  for (auto& a : matrix) {
    CAPTURE(a.discrete);
    CAPTURE(a.hidden.size());
    CAPTURE(a.batch_norm);
    // Random values everywhere (batch-norm statistics, log-std, biases).
    auto model = troupe::test::random_model(a, rng);
    auto stats = troupe::test::random_stats(a.obs_dim, rng);
    auto ckpt = (dir.path / "troupe.safetensors").string();
    REQUIRE(save_checkpoint(ckpt, model, &stats));
    auto csv = write_obs_csv(dir, a.obs_dim, rng);

    auto ours = run_troupe(
      fmt::format("policy act --checkpoint '{}' --obs '{}' --json", ckpt, csv), dir);
    CAPTURE(ours.err);
    REQUIRE(ours.status == 0);
    auto theirs = run_command(fmt::format("{} '{}' act --checkpoint '{}' --obs '{}'",
                                          python, torch_policy_script(), ckpt, csv),
                              dir);
    CAPTURE(theirs.err);
    REQUIRE(theirs.status == 0);
    check_same_outputs(ours.out, theirs.out);
  }
}

TEST_CASE("a checkpoint written by PyTorch loads into troupe with PyTorch's outputs") {
  if (!torch_available()) {
    TROUPE_SKIP(std::string(python) +
                " cannot import torch (install Debian's python3-torch)");
  }
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("interop");
  for (auto& a : matrix) {
    CAPTURE(a.discrete);
    CAPTURE(a.hidden.size());
    CAPTURE(a.batch_norm);
    auto ckpt = (dir.path / "torch.safetensors").string();
    auto csv = write_obs_csv(dir, a.obs_dim, rng);
    std::string hidden;
    for (auto h : a.hidden)
      hidden += fmt::format("{}{}", hidden.empty() ? "" : ",", h);
    auto theirs = run_command(
      fmt::format("{} '{}' write --out '{}' --obs-dim {} --action {} --action-dim {} "
                  "--hidden='{}' --activation {} {} --batch-norm {} --seed {} --obs '{}'",
                  python, torch_policy_script(), ckpt, a.obs_dim,
                  a.discrete ? "discrete" : "box", a.action_dim, hidden,
                  a.relu ? "relu" : "tanh", a.obs_norm ? "--obs-norm" : "", a.batch_norm,
                  rng() % 1000000, csv),
      dir);
    CAPTURE(theirs.err);
    REQUIRE(theirs.status == 0);
    auto ours = run_troupe(
      fmt::format("policy act --checkpoint '{}' --obs '{}' --json", ckpt, csv), dir);
    CAPTURE(ours.err);
    REQUIRE(ours.status == 0);
    check_same_outputs(ours.out, theirs.out);

    // The library sees the architecture PyTorch described.
    auto loaded = load_checkpoint(ckpt);
    REQUIRE(loaded.has_value());
    CHECK(loaded->model.spec().hidden == a.hidden);
    CHECK(loaded->metadata.count("producer") == 1);
  }
}
