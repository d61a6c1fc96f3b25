// The runner-state file: random states round trip field by field, and every
// malformed file is refused with a message naming the file, the runner, the
// tensor and the problem.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "edge/runner_state_file.hpp"
#include "envs/registry.hpp"
#include "learners/safetensors.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::edge;

namespace {

// A state with random values everywhere (not necessarily one a runner could
// reach: the file stores whatever it is given), generator words with the
// high bit set, counters beyond 32 bits.
env_runner_state random_state(const std::string& name, const std::string& id, size_t n,
                              std::mt19937_64& gen) {
  const size_t dim = envs::find_spec(id).value()->state_dim();
  std::uniform_real_distribution<double> real(-5.0, 5.0);
  env_runner_state s;
  s.runner = name;
  s.env_id = id;
  auto& e = s.env;
  e.env_id = id;
  e.num_envs = n;
  for (size_t k = 0; k < 4 * n; ++k)
    e.rng.push_back(gen() | (k % 3 == 0 ? uint64_t{1} << 63 : 0));
  for (size_t k = 0; k < dim * n; ++k)
    e.state.push_back(real(gen));
  for (size_t i = 0; i < n; ++i) {
    e.elapsed_steps.push_back(static_cast<int32_t>(gen() % 1000));
    e.rewards.push_back(static_cast<float>(real(gen)));
    e.terminated.push_back(static_cast<uint8_t>(gen() % 2));
    e.truncated.push_back(static_cast<uint8_t>(gen() % 2));
    e.autoreset.push_back(static_cast<uint8_t>(gen() % 2));
    s.episode_return.push_back(real(gen) * 100);
    s.episode_length.push_back(gen() % 100000);
  }
  // Reward normalization's accumulators, in about half the states.
  if (gen() % 2)
    for (size_t i = 0; i < n; ++i)
      s.discounted_return.push_back(real(gen) * 10);
  for (auto& w : s.gen)
    w = gen();
  s.status.runner = name;
  s.status.env_id = id;
  s.status.batches = gen() >> 20;
  s.status.env_steps = gen() >> 2;
  s.status.episodes = gen() >> 30;
  s.status.non_finite = gen() % 7;
  s.status.deltas_sent = gen() >> 40;
  return s;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

void check_same(const env_runner_state& a, const env_runner_state& b) {
  CHECK(a.runner == b.runner);
  CHECK(a.env_id == b.env_id);
  CHECK(a.env.env_id == b.env.env_id);
  CHECK(a.env.num_envs == b.env.num_envs);
  CHECK(a.env.with_state == b.env.with_state);
  CHECK(a.env.rng == b.env.rng);
  CHECK(same_bits(a.env.state, b.env.state));
  CHECK(a.env.elapsed_steps == b.env.elapsed_steps);
  CHECK(same_bits(a.env.rewards, b.env.rewards));
  CHECK(a.env.terminated == b.env.terminated);
  CHECK(a.env.truncated == b.env.truncated);
  CHECK(a.env.autoreset == b.env.autoreset);
  CHECK(a.gen == b.gen);
  CHECK(same_bits(a.episode_return, b.episode_return));
  CHECK(a.episode_length == b.episode_length);
  CHECK(same_bits(a.discounted_return, b.discounted_return));
  CHECK(a.status.runner == b.status.runner);
  CHECK(a.status.env_id == b.status.env_id);
  CHECK(a.status.batches == b.status.batches);
  CHECK(a.status.env_steps == b.status.env_steps);
  CHECK(a.status.episodes == b.status.episodes);
  CHECK(a.status.non_finite == b.status.non_finite);
  CHECK(a.status.deltas_sent == b.status.deltas_sent);
}

bool contains(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

} // namespace

TEST_CASE("runner states round trip through the file field by field") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  test::temp_folder dir("runner-states");
  std::vector<env_runner_state> states;
  const auto ids = envs::registered_ids();
  for (size_t k = 0; k < 7; ++k) {
    // Discrete and Box environments, sizes from 1 up.
    const std::string& id = ids[k % ids.size()];
    states.push_back(random_state(fmt::format("runner-{}", k), id, 1 + gen() % 9, gen));
  }
  states[3].runner = "a name with spaces, dots. and \"quotes\"";
  states[3].status.runner = states[3].runner; // the status names its runner
  // A runner whose environments saved no state (a game without state callbacks).
  const size_t stateless = 1 + gen() % 6;
  states[stateless].env.with_state = false;
  states[stateless].env.rng.clear();
  states[stateless].env.state.clear();
  states[stateless].env.elapsed_steps.clear();
  const std::string path = (dir.path / "runners.safetensors").string();
  REQUIRE(save_runner_states(path, states));
  auto loaded = load_runner_states(path);
  REQUIRE(loaded);
  REQUIRE(loaded->size() == states.size());
  for (size_t k = 0; k < states.size(); ++k) {
    CAPTURE(k);
    check_same((*loaded)[k], states[k]);
  }
  // The file is plain safetensors: metadata and tensors as documented.
  auto raw = learners::read_safetensors(path).value();
  CHECK(raw.metadata.at("format") == "troupe.runner_states");
  CHECK(raw.metadata.at("version") == "3");
  for (size_t k = 0; k < states.size(); ++k)
    CHECK((raw.find(fmt::format("runner.{}.discounted_return", k)) != nullptr) ==
          !states[k].discounted_return.empty());
  CHECK(raw.metadata.at("runners") == "7");
  const size_t full = stateless == 1 ? 2 : 1;
  CHECK(raw.metadata.at(fmt::format("runner.{}.env_id", full)) == states[full].env_id);
  CHECK(raw.metadata.at(fmt::format("runner.{}.env_state", full)) == "saved");
  CHECK(raw.metadata.at(fmt::format("runner.{}.env_state", stateless)) == "none");
  const auto* st = raw.find(fmt::format("runner.{}.env.state", full));
  REQUIRE(st != nullptr);
  CHECK(st->shape == std::vector<int64_t>{
                       static_cast<int64_t>(states[full].env.num_envs),
                       static_cast<int64_t>(
                         envs::find_spec(states[full].env_id).value()->state_dim())});
  for (const char* field : {"env.rng", "env.state", "env.elapsed_steps"})
    CHECK(raw.find(fmt::format("runner.{}.{}", stateless, field)) == nullptr);

  // No runners at all is a valid file too.
  REQUIRE(save_runner_states(path, {}));
  auto none = load_runner_states(path);
  REQUIRE(none);
  CHECK(none->empty());
}

TEST_CASE(
  "a malformed runner state file is refused with the file, runner, tensor and problem") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  test::temp_folder dir("runner-states-bad");
  std::vector<env_runner_state> states = {random_state("alpha", "CartPole-v1", 3, gen),
                                          random_state("beta", "Pendulum-v1", 4, gen)};
  const std::string good_path = (dir.path / "good.safetensors").string();
  REQUIRE(save_runner_states(good_path, states));
  const auto good = learners::read_safetensors(good_path).value();

  SUBCASE("a truncated file") {
    std::ifstream in(good_path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
    const size_t cut = 1 + gen() % (bytes.size() - 1);
    CAPTURE(cut);
    const std::string path = dir.write("truncated.safetensors", bytes.substr(0, cut));
    auto r = load_runner_states(path);
    REQUIRE_FALSE(r);
    CAPTURE(r.err().message);
    CHECK(contains(r.err().message, path));
  }

  // Writes `good` changed by `spoil` and checks the load's message.
  auto refused = [&](const std::string& what,
                     std::function<void(learners::st_file&)> spoil,
                     std::vector<std::string> words) {
    CAPTURE(what);
    auto file = good;
    spoil(file);
    const std::string path = (dir.path / "bad.safetensors").string();
    REQUIRE(learners::write_safetensors(path, file));
    auto r = load_runner_states(path);
    REQUIRE_FALSE(r);
    const auto& message = r.err().message;
    CAPTURE(message);
    CHECK(contains(message, path));
    for (auto& w : words)
      CHECK(contains(message, w));
  };
  auto tensor = [](learners::st_file& f,
                   const std::string& name) -> learners::st_tensor& {
    for (auto& t : f.tensors)
      if (t.name == name)
        return t;
    FAIL("no tensor " << name);
    return f.tensors.front();
  };

  refused("wrong format name", [](auto& f) { f.metadata["format"] = "troupe.stats"; },
          {"format", "troupe.stats", "troupe.runner_states"});
  refused("no format", [](auto& f) { f.metadata.erase("format"); }, {"format"});
  refused("another version", [](auto& f) { f.metadata["version"] = "4"; },
          {"version", "'4'", "1 to 3"});
  refused("a discounted_return of the wrong shape",
          [&](auto& f) {
            std::vector<double> values(5, 0.5);
            f.tensors.erase(std::remove_if(f.tensors.begin(), f.tensors.end(),
                                           [](const learners::st_tensor& t) {
                                             return t.name ==
                                                    "runner.0.discounted_return";
                                           }),
                            f.tensors.end());
            f.tensors.push_back(learners::st_tensor::from_f64(
              "runner.0.discounted_return", {5}, values.data()));
          },
          {"runner 0", "runner.0.discounted_return", "F64 [3]", "[5]"});
  refused("missing env_state", [](auto& f) { f.metadata.erase("runner.1.env_state"); },
          {"runner 1", "beta", "runner.1.env_state", "missing"});
  refused("env_state neither saved nor none",
          [](auto& f) { f.metadata["runner.0.env_state"] = "partly"; },
          {"runner 0", "alpha", "runner.0.env_state", "'saved' or 'none'", "partly"});
  refused("env_state none with the state tensors",
          [](auto& f) { f.metadata["runner.0.env_state"] = "none"; },
          {"runner.0.env.", "not part of the format"});
  refused("env_state saved without the state tensors",
          [](auto& f) {
            f.metadata["runner.0.env_state"] = "saved";
            auto& ts = f.tensors;
            ts.erase(std::remove_if(ts.begin(), ts.end(),
                                    [](auto& t) { return t.name == "runner.0.env.rng"; }),
                     ts.end());
          },
          {"runner 0", "runner.0.env.rng", "missing"});
  refused("tensor of the wrong size",
          [&](auto& f) {
            auto& t = tensor(f, "runner.1.env.state");
            t.shape = {3, 2};
            t.bytes.resize(3 * 2 * sizeof(double));
          },
          {"runner 1", "beta", "runner.1.env.state", "[4, 2]", "[3, 2]"});
  refused("tensor of the wrong dtype",
          [&](auto& f) {
            auto& t = tensor(f, "runner.0.episode_return");
            auto values = t.to_f64();
            std::vector<float> narrow(values.begin(), values.end());
            t = learners::st_tensor::from_f32(t.name, t.shape, narrow.data());
          },
          {"runner 0", "alpha", "runner.0.episode_return", "F64", "F32"});
  refused("missing tensor",
          [&](auto& f) {
            auto& ts = f.tensors;
            ts.erase(std::remove_if(ts.begin(), ts.end(),
                                    [](auto& t) { return t.name == "runner.1.gen"; }),
                     ts.end());
          },
          {"runner 1", "beta", "runner.1.gen", "missing"});
  refused("unknown tensor",
          [&](auto& f) {
            double x = 1.5;
            f.tensors.push_back(
              learners::st_tensor::from_f64("runner.2.env.state", {1}, &x));
          },
          {"runner.2.env.state", "not part of the format"});
  refused("count of runners too small", [](auto& f) { f.metadata["runners"] = "1"; },
          {"runner.1.", "not part of the format"});
  refused("count of runners not a number", [](auto& f) { f.metadata["runners"] = "two"; },
          {"runners", "two"});
  refused("unknown env id", [](auto& f) { f.metadata["runner.0.env_id"] = "Pong-v5"; },
          {"runner 0", "alpha", "Pong-v5"});
  refused("number of envs disagreeing with the tensors",
          [](auto& f) { f.metadata["runner.1.num_envs"] = "5"; },
          {"runner 1", "runner.1.env.rng", "[5, 4]", "[4, 4]"});
  refused("flag of 2",
          [&](auto& f) {
            auto& t = tensor(f, "runner.0.env.autoreset");
            t.bytes[2] = std::byte{2};
          },
          {"runner 0", "runner.0.env.autoreset", "environment 2", "0 or 1", "got 2"});
  refused("negative counter",
          [&](auto& f) {
            auto& t = tensor(f, "runner.1.env.elapsed_steps");
            auto values = t.to_i64();
            values[3] = -4;
            t = learners::st_tensor::from_i64(t.name, t.shape, values.data());
          },
          {"runner 1", "runner.1.env.elapsed_steps", "element 3", "-4"});
  refused("missing name", [](auto& f) { f.metadata.erase("runner.1.name"); },
          {"runner 1", "runner.1.name", "missing"});
}

TEST_CASE("a version 1 file (always with the environments' state) still loads") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  test::temp_folder dir("runner-states-v1");
  std::vector<env_runner_state> states = {random_state("alpha", "CartPole-v1", 3, gen),
                                          random_state("beta", "Acrobot-v1", 2, gen)};
  for (auto& s : states)
    s.discounted_return.clear(); // version 3's
  const std::string path = (dir.path / "runners.safetensors").string();
  REQUIRE(save_runner_states(path, states));
  // What troupe wrote before version 2: the same tensors, no env_state.
  auto file = learners::read_safetensors(path).value();
  file.metadata["version"] = "1";
  file.metadata.erase("runner.0.env_state");
  file.metadata.erase("runner.1.env_state");
  const std::string old_path = (dir.path / "v1.safetensors").string();
  REQUIRE(learners::write_safetensors(old_path, file));
  auto loaded = load_runner_states(old_path);
  REQUIRE(loaded);
  REQUIRE(loaded->size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    CAPTURE(k);
    CHECK((*loaded)[k].env.with_state);
    check_same((*loaded)[k], states[k]);
  }
}

TEST_CASE("a version 2 file (no discounted returns) still loads, and a discounted_return "
          "tensor in it is refused as not part of that version") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  test::temp_folder dir("runner-states-v2");
  std::vector<env_runner_state> states = {random_state("alpha", "Pendulum-v1", 3, gen),
                                          random_state("beta", "CartPole-v1", 2, gen)};
  states[0].discounted_return.clear();
  states[1].discounted_return.assign(2, 0.25);
  const std::string path = (dir.path / "runners.safetensors").string();
  REQUIRE(save_runner_states(path, states));
  auto file = learners::read_safetensors(path).value();
  file.metadata["version"] = "2";
  const std::string with_tensor = (dir.path / "v2-extra.safetensors").string();
  REQUIRE(learners::write_safetensors(with_tensor, file));
  auto refused = load_runner_states(with_tensor);
  REQUIRE_FALSE(refused);
  CHECK(contains(refused.err().message, "runner.1.discounted_return"));
  file.tensors.erase(std::remove_if(file.tensors.begin(), file.tensors.end(),
                                    [](const learners::st_tensor& t) {
                                      return t.name == "runner.1.discounted_return";
                                    }),
                     file.tensors.end());
  const std::string old_path = (dir.path / "v2.safetensors").string();
  REQUIRE(learners::write_safetensors(old_path, file));
  auto loaded = load_runner_states(old_path);
  REQUIRE(loaded);
  REQUIRE(loaded->size() == 2);
  states[1].discounted_return.clear();
  for (size_t k = 0; k < 2; ++k) {
    CAPTURE(k);
    check_same((*loaded)[k], states[k]);
  }
}

TEST_CASE(
  "states whose arrays disagree with their number of environments are not saved") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  test::temp_folder dir("runner-states-save");
  const std::string path = (dir.path / "runners.safetensors").string();
  std::vector<env_runner_state> states = {random_state("alpha", "Acrobot-v1", 3, gen),
                                          random_state("beta", "MountainCar-v0", 2, gen)};
  states[1].episode_return.push_back(1.0);
  auto r = save_runner_states(path, states);
  REQUIRE_FALSE(r);
  CAPTURE(r.err().message);
  CHECK(contains(r.err().message, path));
  CHECK(contains(r.err().message, "runner 1 ('beta')"));
  CHECK(contains(r.err().message, "episode_return"));
  CHECK(contains(r.err().message, "got 3"));
  CHECK_FALSE(std::filesystem::exists(path));

  // A state that says its environments saved nothing must hold no env state.
  states[1].episode_return.pop_back();
  states[0].env.with_state = false;
  states[0].env.state.clear();
  states[0].env.elapsed_steps.clear();
  auto half = save_runner_states(path, states);
  REQUIRE_FALSE(half);
  CAPTURE(half.err().message);
  CHECK(contains(half.err().message, "runner 0 ('alpha')"));
  CHECK(contains(half.err().message, "env.rng"));
  CHECK(contains(half.err().message, "must be empty"));
  CHECK(contains(half.err().message, "got 12"));
  CHECK_FALSE(std::filesystem::exists(path));
}
