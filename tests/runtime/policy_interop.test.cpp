// Checkpoints cross between troupe and PyTorch: a file troupe saves loads into
// the documented PyTorch module (benchmarks/torch_policy.py, load_state_dict
// strict) and gives the same outputs as `troupe policy act`; a file PyTorch
// writes loads into troupe and gives PyTorch's outputs; a checkpoint loads
// strictly into CleanRL's own PPO agents (tests/runtime/cleanrl_agents.py)
// and acts as troupe does. Needs Debian's python3-torch at /usr/bin/python3;
// skipped with a message without it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "envs/registry.hpp"
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

std::string write_obs_csv(const temp_folder& dir, int64_t dim, std::mt19937_64& rng,
                          const std::string& name = "obs.csv") {
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
  return dir.write(name, text);
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

// -- CleanRL's agents ------------------------------------------------------------

namespace {

std::string cleanrl_script() {
  return std::string(TROUPE_SOURCE_DIR) + "/tests/runtime/cleanrl_agents.py";
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// One checkpoint the CleanRL side evaluates, and what troupe printed for it.
struct cleanrl_case {
  std::string env_id;
  std::string checkpoint;
  std::string obs_csv;
  std::string out;    // path prefix of the script's files
  std::string tamper; // "rename" or "drop": the strict load must refuse
  std::string troupe_json;
};

std::string cases_json(const std::vector<cleanrl_case>& cases) {
  std::string text = "[\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    text +=
      fmt::format(R"({{"env_id": "{}", "checkpoint": "{}", "obs": "{}", "out": "{}")",
                  c.env_id, c.checkpoint, c.obs_csv, c.out);
    if (!c.tamper.empty())
      text += fmt::format(R"(, "tamper": "{}")", c.tamper);
    text += i + 1 < cases.size() ? "},\n" : "}\n";
  }
  return text + "]\n";
}

// troupe's deterministic action for one `policy act --json` line, as
// `troupe eval` takes it: the argmax of the logits (the first on ties), or
// the mean clipped to the registered Box bounds (Gymnasium's ClipAction).
std::vector<double> troupe_action(const std::string& json_line,
                                  const troupe::envs::space& action_space) {
  auto numbers = values_of(split_json_numbers(json_line).numbers);
  if (action_space.kind == troupe::envs::space_kind::discrete) {
    auto n = static_cast<size_t>(action_space.n);
    REQUIRE(numbers.size() == n + 1);
    auto best = std::max_element(numbers.begin(), numbers.begin() + n);
    return {static_cast<double>(best - numbers.begin())};
  }
  auto dim = action_space.size();
  REQUIRE(numbers.size() == 2 * dim + 1);
  std::vector<double> action;
  for (size_t j = 0; j < dim; ++j)
    action.push_back(std::clamp(static_cast<float>(numbers[j]), action_space.low[j],
                                action_space.high[j]));
  return action;
}

// The CleanRL side's actions equal troupe's: a Box action to 1e-5 relative to
// max(1, |x|); a discrete one exactly, unless the two logits are a tie within
// that tolerance. Returns how many Box components the clip changed.
size_t check_same_actions(const cleanrl_case& c, const troupe::envs::space& action_space,
                          const std::string& cleanrl_actions) {
  auto ours = lines_of(c.troupe_json);
  auto theirs = lines_of(cleanrl_actions);
  REQUIRE(ours.size() == theirs.size());
  size_t clipped = 0;
  for (size_t r = 0; r < ours.size(); ++r) {
    CAPTURE(r);
    CAPTURE(ours[r]);
    CAPTURE(theirs[r]);
    auto want = troupe_action(ours[r], action_space);
    std::vector<double> got;
    std::istringstream fields(theirs[r]);
    for (std::string field; std::getline(fields, field, ',');)
      got.push_back(std::strtod(field.c_str(), nullptr));
    REQUIRE(got.size() == want.size());
    if (action_space.kind == troupe::envs::space_kind::discrete) {
      if (got[0] == want[0])
        continue;
      auto logits = values_of(split_json_numbers(ours[r]).numbers);
      auto theirs_index = static_cast<size_t>(got[0]);
      REQUIRE(theirs_index < static_cast<size_t>(action_space.n));
      auto best = logits[static_cast<size_t>(want[0])];
      CHECK(std::fabs(logits[theirs_index] - best) <=
            1e-5 * std::max(1.0, std::fabs(best)));
      continue;
    }
    auto mean = values_of(split_json_numbers(ours[r]).numbers);
    for (size_t j = 0; j < want.size(); ++j) {
      CHECK(std::fabs(got[j] - want[j]) <= 1e-5 * std::max(1.0, std::fabs(want[j])));
      clipped += mean[j] != want[j] ? 1 : 0;
    }
  }
  return clipped;
}

// A [64, 64] tanh model with random values at the scale CleanRL's
// initialization and training give: weights N(0, 1.5^2 / fan_in), biases and
// log-std N(0, 0.5^2). (random_model's N(0, 0.25) weights give Humanoid's
// 376-wide first layer a gain near 10, and float32 summation order alone then
// moves outputs by up to 2e-5, past the 1e-5 comparison.)
troupe::learners::actor_critic random_cleanrl_model(const reference_arch& a,
                                                    std::mt19937_64& rng) {
  troupe::learners::actor_critic model(troupe::test::to_spec(a), rng());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& t : model.tensors()) {
    float scale = t.shape.size() == 2 && t.name != "actor_logstd"
                    ? 1.5f / std::sqrt(static_cast<float>(t.shape[1]))
                    : 0.5f;
    for (size_t i = 0; i < t.size(); ++i)
      t.data[i] = scale * normal(rng);
  }
  return model;
}

// The newest checkpoint folder's policy file under a run's output folder.
std::string newest_policy_file(const std::filesystem::path& output_dir) {
  std::string newest;
  for (auto& entry : std::filesystem::recursive_directory_iterator(output_dir)) {
    auto path = entry.path().string();
    if (entry.path().filename() == "policy.safetensors" &&
        path.find(".tmp") == std::string::npos && path > newest)
      newest = path;
  }
  return newest;
}

} // namespace

TEST_CASE("checkpoints load strictly into CleanRL's PPO agents and act as troupe does") {
  if (!torch_available()) {
    TROUPE_SKIP(std::string(python) +
                " cannot import torch (install Debian's python3-torch)");
  }
  auto seed = fresh_seed();
  MESSAGE("seed " << seed << " (TROUPE_TEST_SEED replays it)");
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("cleanrl");

  // Every MuJoCo task troupe registers with the shipped configs' model
  // (ppo_continuous_action's Agent, obs norm on), and CartPole with ppo.py's
  // Agent (no normalizer, as ppo.py trains it). Random weights and statistics.
  std::vector<std::string> ids;
  for (auto& id : troupe::envs::registered_ids())
    if (id.size() > 3 && id.compare(id.size() - 3, 3, "-v4") == 0)
      ids.push_back(id);
  CHECK(ids.size() == 9);
  ids.push_back("CartPole-v1");

  std::vector<cleanrl_case> cases;
  for (auto& id : ids) {
    auto spec = troupe::envs::find_spec(id);
    REQUIRE(spec.has_value());
    const auto& action_space = (*spec)->action_space;
    bool discrete = action_space.kind == troupe::envs::space_kind::discrete;
    auto obs_dim = static_cast<int64_t>((*spec)->observation_space.size());
    auto a = arch(discrete, obs_dim,
                  discrete ? action_space.n : static_cast<int64_t>(action_space.size()),
                  {64, 64}, false, !discrete, "none");
    auto model = random_cleanrl_model(a, rng);
    auto stats = troupe::test::random_stats(a.obs_dim, rng);
    cleanrl_case c;
    c.env_id = id;
    c.checkpoint = (dir.path / (id + ".safetensors")).string();
    REQUIRE(save_checkpoint(c.checkpoint, model, a.obs_norm ? &stats : nullptr));
    c.obs_csv = write_obs_csv(dir, a.obs_dim, rng, id + ".csv");
    c.out = (dir.path / id).string();
    cases.push_back(c);
  }

  // One real checkpoint: the final one of a short HalfCheetah run.
  auto trained =
    run_troupe(fmt::format("train '{}/config/mujoco/half_cheetah_ppo.toml' --set "
                           "run.output_dir='\"trained\"' --set algo.total_env_steps=4096",
                           TROUPE_SOURCE_DIR),
               dir);
  CAPTURE(trained.err);
  REQUIRE(trained.status == 0);
  {
    cleanrl_case c;
    c.env_id = "HalfCheetah-v4";
    c.checkpoint = newest_policy_file(dir.path / "trained");
    REQUIRE(!c.checkpoint.empty());
    c.obs_csv = (dir.path / "HalfCheetah-v4.csv").string();
    c.out = (dir.path / "trained-HalfCheetah-v4").string();
    cases.push_back(c);
  }

  for (auto& c : cases) {
    CAPTURE(c.checkpoint);
    auto ours = run_troupe(fmt::format("policy act --checkpoint '{}' --obs '{}' --json",
                                       c.checkpoint, c.obs_csv),
                           dir);
    CAPTURE(ours.err);
    REQUIRE(ours.status == 0);
    c.troupe_json = ours.out;
  }

  // A renamed and a missing tensor (a random and the trained checkpoint): the
  // strict load must refuse them.
  auto renamed = cases.front();
  renamed.tamper = "rename";
  renamed.out += "-renamed";
  auto dropped = cases.back();
  dropped.tamper = "drop";
  dropped.out += "-dropped";
  auto all = cases;
  all.push_back(renamed);
  all.push_back(dropped);

  // One python start for every case.
  auto manifest = dir.write("cases.json", cases_json(all));
  auto theirs =
    run_command(fmt::format("{} '{}' '{}'", python, cleanrl_script(), manifest), dir);
  CAPTURE(theirs.err);
  REQUIRE(theirs.status == 0);

  size_t clipped = 0;
  for (auto& c : cases) {
    CAPTURE(c.env_id);
    CAPTURE(c.checkpoint);
    auto spec = troupe::envs::find_spec(c.env_id);
    REQUIRE(spec.has_value());
    check_same_outputs(c.troupe_json, read_text(c.out + ".jsonl"));
    clipped +=
      check_same_actions(c, (*spec)->action_space, read_text(c.out + ".actions"));
  }
  // The clip was exercised (random means fall outside the bounds often).
  CHECK(clipped > 0);
  for (const auto* t : {&renamed, &dropped}) {
    CAPTURE(t->checkpoint);
    CAPTURE(t->tamper);
    auto refused = read_text(t->out + ".refused");
    CHECK(refused.rfind("refused: ", 0) == 0);
    CHECK(refused.find("critic.4.weight") != std::string::npos);
  }
}
