#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "learners/safetensors.hpp"
#include "tests/cli_support.hpp"
#include "tests/learners/policy_reference.hpp"

using namespace troupe::learners;
using troupe::test::fresh_seed;
using troupe::test::lines_of;
using troupe::test::reference_arch;
using troupe::test::run_troupe;
using troupe::test::split_json_numbers;
using troupe::test::temp_folder;

namespace {

std::string expected_skeleton(const reference_arch& a) {
  std::string list = "[";
  for (int64_t j = 0; j < a.action_dim; ++j)
    list += j == 0 ? "#" : ",#";
  list += "]";
  if (a.discrete)
    return "{\"logits\":" + list + ",\"value\":#}";
  return "{\"mean\":" + list + ",\"log_std\":" + list + ",\"value\":#}";
}

// Observations as CSV text, with a header line and a blank line in between.
std::string obs_csv(const std::vector<std::vector<double>>& rows) {
  std::string text;
  for (size_t j = 0; j < rows[0].size(); ++j)
    text += fmt::format("{}x{}", j == 0 ? "" : ",", j);
  text += "\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t j = 0; j < rows[r].size(); ++j)
      text += fmt::format("{}{}", j == 0 ? "" : ", ", rows[r][j]);
    text += r == 1 ? "\n\n" : "\n";
  }
  return text;
}

std::vector<std::vector<double>> random_rows(size_t rows, int64_t dim,
                                             std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<double>> out(rows);
  for (auto& row : out)
    for (int64_t j = 0; j < dim; ++j)
      row.push_back(normal(rng)); // float32 values, exact in the CSV text
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("policy act prints the float64 reference outputs, one JSON object per row with "
          "9 significant digits") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("policy");
  for (int trial = 0; trial < 8; ++trial) {
    auto a = troupe::test::random_arch(rng);
    CAPTURE(trial);
    CAPTURE(a.discrete);
    CAPTURE(a.batch_norm);
    CAPTURE(a.obs_norm);
    auto file = troupe::test::random_checkpoint_file(a, rng);
    auto ckpt = dir.path / "policy.safetensors";
    REQUIRE(write_safetensors(ckpt.string(), file));
    auto rows = random_rows(5, a.obs_dim, rng);
    auto obs = dir.write("obs.csv", obs_csv(rows));
    auto r = run_troupe(
      fmt::format("policy act --checkpoint '{}' --obs '{}' --json", ckpt.string(), obs),
      dir);
    CAPTURE(r.err);
    REQUIRE(r.status == 0);
    auto lines = lines_of(r.out);
    REQUIRE(lines.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      CAPTURE(lines[i]);
      auto [skeleton, numbers] = split_json_numbers(lines[i]);
      CHECK(skeleton == expected_skeleton(a));
      auto want = troupe::test::reference_forward(a, file, rows[i]);
      std::vector<double> expected = a.discrete ? want.logits : want.mean;
      if (!a.discrete)
        expected.insert(expected.end(), want.log_std.begin(), want.log_std.end());
      expected.push_back(want.value);
      REQUIRE(numbers.size() == expected.size());
      for (size_t k = 0; k < numbers.size(); ++k) {
        CAPTURE(k);
        double got = std::strtod(numbers[k].c_str(), nullptr);
        CHECK(troupe::test::close_to(got, expected[k]));
        // A float32's shortest literal: never more than the 9 significant
        // digits that always suffice (plus sign, point and "e-NN").
        CHECK(numbers[k].size() <= 9 + 6);
      }
    }
  }
}

TEST_CASE("policy act without --json prints a table with a header and one line per row") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("policy");
  reference_arch a;
  a.discrete = false;
  a.obs_dim = 3;
  a.action_dim = 2;
  a.hidden = {6};
  a.obs_norm = true;
  auto file = troupe::test::random_checkpoint_file(a, rng);
  auto ckpt = dir.path / "policy.safetensors";
  REQUIRE(write_safetensors(ckpt.string(), file));
  auto rows = random_rows(4, a.obs_dim, rng);
  auto obs = dir.write("obs.csv", obs_csv(rows));
  auto r = run_troupe(
    fmt::format("policy act --checkpoint '{}' --obs '{}'", ckpt.string(), obs), dir);
  CAPTURE(r.err);
  REQUIRE(r.status == 0);
  auto lines = lines_of(r.out);
  REQUIRE(lines.size() == rows.size() + 1);
  std::stringstream header(lines[0]);
  std::vector<std::string> columns;
  for (std::string w; header >> w;)
    columns.push_back(w);
  CHECK(columns == std::vector<std::string>{"row", "mean[0]", "mean[1]", "log_std[0]",
                                            "log_std[1]", "value"});
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(lines[i + 1]);
    std::stringstream ss(lines[i + 1]);
    size_t row = 99;
    ss >> row;
    CHECK(row == i);
    auto want = troupe::test::reference_forward(a, file, rows[i]);
    std::vector<double> expected{want.mean[0], want.mean[1], want.log_std[0],
                                 want.log_std[1], want.value};
    for (double w : expected) {
      double got = 0;
      REQUIRE(bool(ss >> got));
      CHECK(troupe::test::close_to(got, w, 1e-5)); // 7 significant digits
    }
  }
}

TEST_CASE("a bad observation file fails with FILE:LINE, exit status 2 and no output") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("policy");
  reference_arch a;
  a.obs_dim = 3;
  a.hidden = {4};
  auto ckpt = dir.path / "policy.safetensors";
  REQUIRE(write_safetensors(ckpt.string(), troupe::test::random_checkpoint_file(a, rng)));
  auto act = [&](const std::string& csv_text) {
    auto obs = dir.write("obs.csv", csv_text);
    return run_troupe(
      fmt::format("policy act --checkpoint '{}' --obs '{}' --json", ckpt.string(), obs),
      dir);
  };

  auto word = act("a,b,c\n1,2,3\n4,five,6\n7,8,9\n");
  CHECK(word.status == 2);
  CHECK(word.out.empty());
  CHECK(contains(word.err, "obs.csv:3:"));
  CHECK(contains(word.err, "five"));

  auto ragged = act("1,2,3\n4,5,6\n\n7,8\n");
  CHECK(ragged.status == 2);
  CHECK(ragged.out.empty());
  CHECK(contains(ragged.err, "obs.csv:4: expected 3 values"));

  auto huge = act("1,2,3\n4,1e39,6\n");
  CHECK(huge.status == 2);
  CHECK(contains(huge.err, "obs.csv:2: field 2"));
  CHECK(contains(huge.err, "float32 range"));

  auto nan = act("1,2,3\nnan,5,6\n");
  CHECK(nan.status == 2);
  CHECK(contains(nan.err, "obs.csv:2:"));

  auto wide = act("1,2,3,4\n5,6,7,8\n");
  CHECK(wide.status == 2);
  CHECK(wide.out.empty());
  CHECK(contains(wide.err, "obs.csv:1: expected 3 values"));
  CHECK(contains(wide.err, "obs_dim"));
  CHECK(contains(wide.err, "got 4"));

  auto empty = act("x,y,z\n");
  CHECK(empty.status == 2);
  CHECK(contains(empty.err, "obs.csv"));
}

TEST_CASE("bad options and bad checkpoints fail with exit status 2 and a message naming "
          "the problem") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("policy");
  reference_arch a;
  a.obs_dim = 2;
  a.hidden = {3, 3};
  a.batch_norm = "local";
  auto file = troupe::test::random_checkpoint_file(a, rng);
  auto csv = dir.write("obs.csv", "0.5,-1\n");

  auto no_checkpoint = run_troupe(fmt::format("policy act --obs '{}'", csv), dir);
  CHECK(no_checkpoint.status == 2);
  CHECK(contains(no_checkpoint.err, "--checkpoint is required"));

  auto unknown = run_troupe(fmt::format("policy act --obs '{}' --jsn", csv), dir);
  CHECK(unknown.status == 2);
  CHECK(contains(unknown.err, "unknown option '--jsn'"));
  CHECK(contains(unknown.err, "--json"));

  auto absent = run_troupe(fmt::format("policy act --checkpoint '{}' --obs '{}'",
                                       (dir.path / "none.st").string(), csv),
                           dir);
  CHECK(absent.status == 2);
  CHECK(contains(absent.err, "none.st"));

  auto broken = dir.path / "broken.safetensors";
  file.tensors.erase(std::find_if(file.tensors.begin(), file.tensors.end(), [](auto& t) {
    return t.name == "critic.4.running_mean";
  }));
  REQUIRE(write_safetensors(broken.string(), file));
  auto missing = run_troupe(
    fmt::format("policy act --checkpoint '{}' --obs '{}'", broken.string(), csv), dir);
  CHECK(missing.status == 2);
  CHECK(
    contains(missing.err, "missing tensor 'critic.4.running_mean' (expected F32 [3])"));

  auto garbage = dir.write("garbage.safetensors",
                           std::string("\x10\0\0\0\0\0\0\0{\"a\": [1, 2}    ", 24));
  auto corrupt =
    run_troupe(fmt::format("policy act --checkpoint '{}' --obs '{}'", garbage, csv), dir);
  CHECK(corrupt.status == 2);
  CHECK(contains(corrupt.err, "garbage.safetensors"));
  CHECK(contains(corrupt.err, "malformed JSON"));
}
