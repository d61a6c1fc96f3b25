#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "learners/safetensors.hpp"
#include "tests/learners/policy_reference.hpp"

using namespace troupe::learners;
using troupe::test::reference_arch;
namespace fs = std::filesystem;

namespace {

uint64_t test_seed() {
  return std::random_device{}();
}

struct temp_folder {
  fs::path path;
  explicit temp_folder(uint64_t seed) {
    path = fs::temp_directory_path() / ("troupe-policy-" + std::to_string(seed) + "-"
                                        + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~temp_folder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct run_result {
  int status = -1;
  std::string out;
  std::string err;
};

run_result run_command(const std::string& command, const fs::path& dir) {
  auto err_path = dir / "stderr.txt";
  auto full = fmt::format("{} 2> '{}'", command, err_path.string());
  run_result r;
  FILE* pipe = ::popen(full.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0)
    r.out.append(buf, n);
  int st = ::pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  return r;
}

run_result run_troupe(const std::string& args, const fs::path& dir) {
  return run_command(fmt::format("'{}' {}", TROUPE_BINARY, args), dir);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line))
    out.push_back(line);
  return out;
}

// Splits a JSON line into its skeleton (every number replaced by '#') and
// the number literals in order.
void split_numbers(const std::string& line, std::string& skeleton,
                   std::vector<std::string>& numbers) {
  skeleton.clear();
  numbers.clear();
  size_t i = 0;
  while (i < line.size()) {
    char c = line[i];
    bool starts_number = (c == '-' || (c >= '0' && c <= '9')) && i > 0
                         && (line[i - 1] == ' ' || line[i - 1] == '[');
    if (!starts_number) {
      skeleton += c;
      ++i;
      continue;
    }
    size_t end = line.find_first_of(",]}", i);
    numbers.push_back(line.substr(i, end - i));
    skeleton += '#';
    i = end;
  }
}

std::string expected_skeleton(const reference_arch& a) {
  std::string list = "[";
  for (int64_t j = 0; j < a.action_dim; ++j)
    list += j == 0 ? "#" : ", #";
  list += "]";
  if (a.discrete)
    return "{\"logits\": " + list + ", \"value\": #}";
  return "{\"mean\": " + list + ", \"log_std\": " + list + ", \"value\": #}";
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

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("policy act prints the float64 reference outputs, one JSON object per row with "
          "9 significant digits") {
  auto seed = test_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir(seed);
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
    write_text(dir.path / "obs.csv", obs_csv(rows));
    auto r = run_troupe(fmt::format("policy act --checkpoint '{}' --obs '{}' --json",
                                    ckpt.string(), (dir.path / "obs.csv").string()),
                        dir.path);
    CAPTURE(r.err);
    REQUIRE(r.status == 0);
    auto lines = lines_of(r.out);
    REQUIRE(lines.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      CAPTURE(lines[i]);
      std::string skeleton;
      std::vector<std::string> numbers;
      split_numbers(lines[i], skeleton, numbers);
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
        // The literal is the canonical 9-digit form of a float32.
        auto as_float = static_cast<double>(static_cast<float>(got));
        CHECK(numbers[k] == fmt::format("{:.9g}", as_float));
      }
    }
  }
}

TEST_CASE("policy act without --json prints a table with a header and one line per row") {
  auto seed = test_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir(seed);
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
  write_text(dir.path / "obs.csv", obs_csv(rows));
  auto r = run_troupe(fmt::format("policy act --checkpoint '{}' --obs '{}'", ckpt.string(),
                                  (dir.path / "obs.csv").string()),
                      dir.path);
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
  auto seed = test_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir(seed);
  reference_arch a;
  a.obs_dim = 3;
  a.hidden = {4};
  auto ckpt = dir.path / "policy.safetensors";
  REQUIRE(write_safetensors(ckpt.string(), troupe::test::random_checkpoint_file(a, rng)));
  auto act = [&](const std::string& csv_text) {
    write_text(dir.path / "obs.csv", csv_text);
    return run_troupe(fmt::format("policy act --checkpoint '{}' --obs '{}' --json",
                                  ckpt.string(), (dir.path / "obs.csv").string()),
                      dir.path);
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
  auto seed = test_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir(seed);
  reference_arch a;
  a.obs_dim = 2;
  a.hidden = {3, 3};
  a.batch_norm = "local";
  auto file = troupe::test::random_checkpoint_file(a, rng);
  auto csv = (dir.path / "obs.csv").string();
  write_text(csv, "0.5,-1\n");

  auto no_checkpoint = run_troupe(fmt::format("policy act --obs '{}'", csv), dir.path);
  CHECK(no_checkpoint.status == 2);
  CHECK(contains(no_checkpoint.err, "--checkpoint is required"));

  auto unknown = run_troupe(fmt::format("policy act --obs '{}' --jsn", csv), dir.path);
  CHECK(unknown.status == 2);
  CHECK(contains(unknown.err, "unknown option '--jsn'"));
  CHECK(contains(unknown.err, "--json"));

  auto absent = run_troupe(
    fmt::format("policy act --checkpoint '{}' --obs '{}'", (dir.path / "none.st").string(),
                csv),
    dir.path);
  CHECK(absent.status == 2);
  CHECK(contains(absent.err, "none.st"));

  auto broken = dir.path / "broken.safetensors";
  file.tensors.erase(std::find_if(file.tensors.begin(), file.tensors.end(),
                                  [](auto& t) { return t.name == "critic.4.running_mean"; }));
  REQUIRE(write_safetensors(broken.string(), file));
  auto missing = run_troupe(
    fmt::format("policy act --checkpoint '{}' --obs '{}'", broken.string(), csv), dir.path);
  CHECK(missing.status == 2);
  CHECK(contains(missing.err, "missing tensor 'critic.4.running_mean' (expected F32 [3])"));

  auto garbage = dir.path / "garbage.safetensors";
  write_text(garbage, std::string("\x10\0\0\0\0\0\0\0{\"a\": [1, 2}    ", 24));
  auto corrupt = run_troupe(
    fmt::format("policy act --checkpoint '{}' --obs '{}'", garbage.string(), csv), dir.path);
  CHECK(corrupt.status == 2);
  CHECK(contains(corrupt.err, "garbage.safetensors"));
  CHECK(contains(corrupt.err, "malformed JSON"));
}
