#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "learners/checkpoint.hpp"
#include "tests/learners/policy_reference.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe::learners;
using troupe::test::fresh_seed;
using troupe::test::random_arch;
using troupe::test::random_checkpoint_file;
using troupe::test::random_model;
using troupe::test::random_stats;
using troupe::test::reference_arch;
using troupe::test::reference_forward;
using troupe::test::required_tensors;
using troupe::test::temp_folder;

namespace {

std::vector<float> random_obs(size_t rows, int64_t dim, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> obs(rows * static_cast<size_t>(dim));
  for (auto& x : obs)
    x = normal(rng);
  return obs;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Compares a model's evaluation with the float64 reference on the file.
void check_outputs(const reference_arch& a, const st_file& file,
                   const actor_critic& model, const stats_snapshot* stats,
                   std::mt19937_64& rng) {
  const size_t rows = 7;
  auto obs = random_obs(rows, a.obs_dim, rng);
  policy_output out;
  auto ok = model.evaluate(obs.data(), rows, stats, out);
  REQUIRE_MESSAGE(bool(ok), ok.err().message);
  REQUIRE(out.value.size() == rows);
  const auto dim = static_cast<size_t>(a.obs_dim);
  const auto act = static_cast<size_t>(a.action_dim);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<double> row(obs.begin() + r * dim, obs.begin() + (r + 1) * dim);
    auto want = reference_forward(a, file, row);
    CAPTURE(r);
    CHECK(troupe::test::close_to(out.value[r], want.value));
    for (size_t j = 0; j < act; ++j) {
      CAPTURE(j);
      if (a.discrete) {
        CHECK(troupe::test::close_to(out.logits[r * act + j], want.logits[j]));
      } else {
        CHECK(troupe::test::close_to(out.mean[r * act + j], want.mean[j]));
        CHECK(out.log_std[j] == want.log_std[j]);
      }
    }
  }
}

} // namespace

TEST_CASE("a saved policy loads back with identical tensors, statistics and spec") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("ckpt");
  for (int trial = 0; trial < 20; ++trial) {
    auto a = random_arch(rng);
    CAPTURE(trial);
    CAPTURE(a.discrete);
    CAPTURE(a.batch_norm);
    CAPTURE(a.hidden.size());
    auto model = random_model(a, rng);
    auto stats = random_stats(a.obs_dim, rng);
    auto path = (dir.path / "policy.safetensors").string();
    auto saved = save_checkpoint(path, model, &stats, {{"env_id", "CartPole-v1"}});
    REQUIRE_MESSAGE(bool(saved), saved.err().message);
    auto back = load_checkpoint(path);
    REQUIRE_MESSAGE(back.has_value(), (back ? std::string() : back.err().message));
    auto& s = back->model.spec();
    auto& want = model.spec();
    CHECK(s.obs_dim == want.obs_dim);
    CHECK(s.action == want.action);
    CHECK(s.head_dim() == want.head_dim());
    CHECK(s.hidden == want.hidden);
    CHECK(s.activation == want.activation);
    CHECK(s.obs_norm == want.obs_norm);
    CHECK(s.obs_norm_eps == want.obs_norm_eps);
    CHECK(s.obs_norm_clip == want.obs_norm_clip);
    CHECK(s.batch_norm == want.batch_norm);
    CHECK(s.batch_norm_eps == want.batch_norm_eps);
    CHECK(s.batch_norm_momentum == want.batch_norm_momentum);
    CHECK(back->metadata.at("env_id") == "CartPole-v1");
    auto got_tensors = back->model.tensors();
    auto want_tensors = model.tensors();
    REQUIRE(got_tensors.size() == want_tensors.size());
    for (size_t i = 0; i < got_tensors.size(); ++i) {
      CAPTURE(want_tensors[i].name);
      CHECK(got_tensors[i].name == want_tensors[i].name);
      CHECK(got_tensors[i].shape == want_tensors[i].shape);
      CHECK(std::equal(want_tensors[i].data,
                       want_tensors[i].data + want_tensors[i].size(),
                       got_tensors[i].data));
    }
    if (a.has_bn())
      CHECK(back->model.num_batches_tracked() == model.num_batches_tracked());
    if (a.obs_norm) {
      CHECK(back->obs_stats.mean == stats.mean);
      CHECK(back->obs_stats.var == stats.var);
      CHECK(back->obs_stats.count == stats.count);
    } else {
      CHECK(back->obs_stats.mean.empty());
    }
  }
}

TEST_CASE("a saved policy holds exactly the documented names and gives the reference "
          "outputs") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    auto a = random_arch(rng);
    CAPTURE(trial);
    CAPTURE(a.discrete);
    CAPTURE(a.batch_norm);
    CAPTURE(a.obs_norm);
    auto model = random_model(a, rng);
    auto stats = random_stats(a.obs_dim, rng);
    auto file = make_checkpoint(model, &stats);
    REQUIRE(file.has_value());
    std::set<std::string> names;
    for (auto& t : file->tensors)
      names.insert(t.name);
    CHECK(names.size() == file->tensors.size());
    auto required = required_tensors(a);
    CHECK(names.size() == required.size());
    for (auto& r : required) {
      CAPTURE(r.name);
      auto* t = file->find(r.name);
      REQUIRE(t != nullptr);
      CHECK(t->dtype == r.dtype);
      CHECK(t->shape == r.shape);
    }
    CHECK(file->metadata == troupe::test::reference_metadata(a));
    check_outputs(a, *file, model, &stats, rng);
  }
}

TEST_CASE("a checkpoint assembled by hand with the documented names loads and gives the "
          "reference outputs") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    auto a = random_arch(rng);
    CAPTURE(trial);
    CAPTURE(a.discrete);
    CAPTURE(a.batch_norm);
    CAPTURE(a.obs_norm);
    CAPTURE(a.relu);
    auto file = random_checkpoint_file(a, rng);
    // Writers may order tensors and metadata as they like.
    std::shuffle(file.tensors.begin(), file.tensors.end(), rng);
    auto loaded = checkpoint_from_file(file, "hand.safetensors");
    REQUIRE_MESSAGE(loaded.has_value(), (loaded ? std::string() : loaded.err().message));
    check_outputs(a, file, loaded->model, &loaded->obs_stats, rng);
    if (a.obs_norm)
      CHECK(loaded->obs_stats.count == 1000);
  }
}

TEST_CASE("loading names the tensor and the expectation when a tensor is missing, "
          "misshapen or of the wrong dtype") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  reference_arch a;
  a.obs_dim = 4;
  a.action_dim = 2;
  a.hidden = {8, 8};
  a.obs_norm = true;
  a.batch_norm = "global";
  auto good = random_checkpoint_file(a, rng);
  REQUIRE(checkpoint_from_file(good, "p.safetensors").has_value());

  auto expect_error = [&](const st_file& f, std::initializer_list<const char*> parts) {
    auto got = checkpoint_from_file(f, "p.safetensors");
    REQUIRE(!got.has_value());
    CAPTURE(got.err().message);
    CHECK(contains(got.err().message, "p.safetensors"));
    for (auto* part : parts)
      CHECK(contains(got.err().message, part));
  };

  auto missing = good;
  missing.tensors.erase(std::find_if(missing.tensors.begin(), missing.tensors.end(),
                                     [](auto& t) { return t.name == "actor.3.weight"; }));
  expect_error(missing, {"missing tensor 'actor.3.weight'", "expected F32 [8, 8]"});

  auto missing_rms = good;
  missing_rms.tensors.erase(
    std::find_if(missing_rms.tensors.begin(), missing_rms.tensors.end(),
                 [](auto& t) { return t.name == "obs_rms.var"; }));
  expect_error(missing_rms, {"missing tensor 'obs_rms.var'", "expected F64 [4]"});

  auto shaped = good;
  for (auto& t : shaped.tensors)
    if (t.name == "actor.0.weight")
      t.shape = {4, 8}; // transposed: [in, out] instead of [out, in]
  expect_error(shaped, {"tensor 'actor.0.weight' is F32 [4, 8]", "expected F32 [8, 4]"});

  auto typed = good;
  for (auto& t : typed.tensors)
    if (t.name == "obs_rms.mean") {
      std::vector<float> v(4, 0.5f);
      t = st_tensor::from_f32("obs_rms.mean", {4}, v.data());
    }
  expect_error(typed, {"tensor 'obs_rms.mean' is F32 [4]", "expected F64 [4]"});

  auto extra = good;
  std::vector<float> one{1.0f};
  extra.tensors.push_back(st_tensor::from_f32("actor.9.weight", {1}, one.data()));
  expect_error(extra, {"unexpected tensor 'actor.9.weight'"});

  auto nan = good;
  for (auto& t : nan.tensors)
    if (t.name == "critic.0.bias") {
      auto v = t.to_f32();
      v[3] = std::nanf("");
      t = st_tensor::from_f32(t.name, t.shape, v.data());
    }
  expect_error(nan, {"tensor 'critic.0.bias'", "index 3", "finite"});

  auto negative = good;
  for (auto& t : negative.tensors)
    if (t.name == "critic.1.running_var") {
      auto v = t.to_f32();
      v[0] = -0.5f;
      t = st_tensor::from_f32(t.name, t.shape, v.data());
    }
  expect_error(negative, {"tensor 'critic.1.running_var'", "variances >= 0"});
}

TEST_CASE("loading rejects an unknown format version and bad metadata with the key and "
          "the expected value") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  reference_arch a;
  a.discrete = false;
  a.obs_dim = 3;
  a.action_dim = 2;
  a.hidden = {5};
  auto good = random_checkpoint_file(a, rng);

  auto error_for = [&](const std::string& key, const std::string& value) {
    auto f = good;
    if (value.empty())
      f.metadata.erase(key);
    else
      f.metadata[key] = value;
    auto got = checkpoint_from_file(f, "p.safetensors");
    REQUIRE(!got.has_value());
    return got.err();
  };

  auto version = error_for("format_version", "2");
  CHECK(version.code == troupe::errc::unsupported_version);
  CHECK(contains(version.message, "format_version 2 is not supported"));
  CHECK(contains(version.message, "reads version 1"));

  CHECK(contains(error_for("format", "").message, "missing metadata key \"format\""));
  CHECK(contains(error_for("format", "safetensors").message,
                 "\"format\" must be \"troupe.policy\", got \"safetensors\""));
  CHECK(contains(error_for("format_version", "one").message,
                 "\"format_version\" must be a decimal integer, got \"one\""));
  CHECK(contains(error_for("hidden", "").message, "missing metadata key \"hidden\""));
  CHECK(contains(error_for("hidden", "64,64").message, "\"hidden\" must be a JSON list"));
  CHECK(
    contains(error_for("hidden", "[64, -1]").message, "\"hidden\" must be a JSON list"));
  CHECK(contains(error_for("activation", "gelu").message,
                 "\"activation\" must be \"tanh\" or \"relu\", got \"gelu\""));
  CHECK(contains(error_for("action_space", "multi").message, "\"action_space\""));
  CHECK(contains(error_for("obs_norm", "True").message,
                 "\"obs_norm\" must be \"true\" or \"false\", got \"True\""));
  CHECK(contains(error_for("obs_norm_eps", "1e-8x").message,
                 "\"obs_norm_eps\" must be a number"));
  CHECK(contains(error_for("batch_norm", "sync").message, "\"batch_norm\""));
  CHECK(contains(error_for("obs_dim", "0").message, "invalid policy"));

  // A narrower hidden layer than the tensors hold: the first tensor that
  // disagrees is named.
  auto narrower = error_for("hidden", "[4]");
  CHECK(contains(narrower.message, "expected F32 [4, 3]"));
  // A network far larger than the file is refused (before it is allocated:
  // 10^12 parameters would not fit in memory).
  auto huge = error_for("hidden", "[1000000, 1000000]");
  CHECK(contains(huge.message, "expected F32 [1000000, 3]"));

  // Unknown extra metadata keys are kept and ignored.
  auto f = good;
  f.metadata["trained_steps"] = "123";
  auto loaded = checkpoint_from_file(f, "p.safetensors");
  REQUIRE(loaded.has_value());
  CHECK(loaded->metadata.at("trained_steps") == "123");
}

TEST_CASE("saving refuses missing or invalid observation statistics and reserved keys") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  reference_arch a;
  a.obs_norm = true;
  a.obs_dim = 3;
  a.hidden = {4};
  auto model = random_model(a, rng);
  auto none = make_checkpoint(model, nullptr);
  REQUIRE(!none.has_value());
  CHECK(contains(none.err().message, "no observation statistics"));
  auto stats = random_stats(2, rng);
  auto wrong_dim = make_checkpoint(model, &stats);
  REQUIRE(!wrong_dim.has_value());
  CHECK(contains(wrong_dim.err().message, "dimension 3"));
  stats = random_stats(3, rng);
  stats.var[1] = -1.0;
  auto negative = make_checkpoint(model, &stats);
  REQUIRE(!negative.has_value());
  CHECK(contains(negative.err().message, "var[1]"));
  stats.var[1] = 1.0;
  auto reserved = make_checkpoint(model, &stats, {{"hidden", "[1]"}});
  REQUIRE(!reserved.has_value());
  CHECK(contains(reserved.err().message, "reserved key \"hidden\""));
  CHECK(make_checkpoint(model, &stats).has_value());
}
