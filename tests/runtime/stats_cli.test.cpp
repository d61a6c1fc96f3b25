#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tests/cli_support.hpp"

using troupe::test::fresh_seed;
using troupe::test::run_troupe;
using troupe::test::temp_folder;

namespace {

// The numbers of a JSON array field "name" of the object in `text`.
std::vector<double> json_array(const std::string& text, const std::string& name) {
  const auto parsed = nlohmann::json::parse(text);
  REQUIRE_MESSAGE(parsed.contains(name), name, " missing in ", text);
  return parsed.at(name).get<std::vector<double>>();
}

double json_number(const std::string& text, const std::string& name) {
  const auto parsed = nlohmann::json::parse(text);
  REQUIRE_MESSAGE(parsed.contains(name), name, " missing in ", text);
  return parsed.at(name).get<double>();
}

// A CSV file of float32 values written with 9 significant digits, so that
// the values troupe reads are exactly the float32 values kept here.
struct dataset {
  size_t dim;
  std::vector<float> values; // every file's rows, in file order

  std::string add_file(const temp_folder& dir, const std::string& name,
                       std::mt19937_64& rng, size_t rows, double offset, double scale,
                       bool header) {
    std::normal_distribution<double> n(0.0, 1.0);
    std::string text;
    if (header) {
      for (size_t j = 0; j < dim; ++j)
        text += fmt::format("{}col{}", j ? "," : "", j);
      text += "\n";
    }
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < dim; ++j) {
        float v = static_cast<float>(offset + scale * (n(rng) + 0.1 * j));
        values.push_back(v);
        text += fmt::format("{}{:.9g}", j ? "," : "", v);
      }
      text += "\n";
    }
    return dir.write(name, text);
  }
};

} // namespace

TEST_CASE(
  "stats compute merges several files into the float64 pooled mean and variance") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("stats");
  std::uniform_int_distribution<size_t> dims(1, 8), sizes(1, 3000), batch(1, 700);
  dataset data{dims(rng), {}};
  std::string files;
  for (int f = 0; f < 3; ++f)
    files += " '" +
             data.add_file(dir, fmt::format("part{}.csv", f), rng, sizes(rng),
                           100.0 * f - 50.0, 0.5 + f, f == 1) +
             "'";
  const size_t batch_rows = batch(rng);
  auto r = run_troupe(
    fmt::format("stats compute{} --batch-rows {} --json", files, batch_rows), dir);
  REQUIRE_MESSAGE(r.status == 0, r.err);
  const size_t rows = data.values.size() / data.dim;
  CHECK(json_number(r.out, "count") == rows);
  CHECK(json_number(r.out, "dim") == data.dim);
  auto mean = json_array(r.out, "mean");
  auto var = json_array(r.out, "var");
  REQUIRE(mean.size() == data.dim);
  REQUIRE(var.size() == data.dim);
  for (size_t j = 0; j < data.dim; ++j) {
    long double s = 0, q = 0;
    for (size_t i = 0; i < rows; ++i)
      s += data.values[i * data.dim + j];
    long double m = s / rows;
    for (size_t i = 0; i < rows; ++i)
      q += (data.values[i * data.dim + j] - m) * (data.values[i * data.dim + j] - m);
    double want_var = static_cast<double>(q / rows);
    CHECK(std::fabs(mean[j] - static_cast<double>(m)) <=
          1e-12 * std::fabs(static_cast<double>(m)) + 1e-12);
    CHECK(std::fabs(var[j] - want_var) <= 1e-12 * want_var);
  }
  // One delta per batch of each file.
  CHECK(nlohmann::json::parse(r.out).contains("version"));
  CHECK(r.out.back() == '\n');
  CHECK(r.out.find('\n') == r.out.size() - 1); // exactly one JSON object
}

TEST_CASE("stats compute in ema mode applies the momentum update batch by batch") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  temp_folder dir("stats-ema");
  dataset data{3, {}};
  auto file = data.add_file(dir, "d.csv", rng, 1000, 4.0, 2.0, false);
  auto r = run_troupe(fmt::format("stats compute '{}' --mode ema --momentum 0.8 "
                                  "--batch-rows 100 --json",
                                  file),
                      dir);
  REQUIRE_MESSAGE(r.status == 0, r.err);
  std::vector<double> mean(3), var(3);
  for (size_t b = 0; b < 10; ++b) {
    for (size_t j = 0; j < 3; ++j) {
      long double s = 0, q = 0;
      for (size_t i = 0; i < 100; ++i)
        s += data.values[(b * 100 + i) * 3 + j];
      long double m = s / 100;
      for (size_t i = 0; i < 100; ++i)
        q += (data.values[(b * 100 + i) * 3 + j] - m) *
             (data.values[(b * 100 + i) * 3 + j] - m);
      double bm = static_cast<double>(m), bv = static_cast<double>(q / 100);
      mean[j] = b == 0 ? bm : 0.8 * mean[j] + 0.2 * bm;
      var[j] = b == 0 ? bv : 0.8 * var[j] + 0.2 * bv;
    }
  }
  auto got_mean = json_array(r.out, "mean"), got_var = json_array(r.out, "var");
  for (size_t j = 0; j < 3; ++j) {
    CHECK(got_mean[j] == doctest::Approx(mean[j]).epsilon(1e-12));
    CHECK(got_var[j] == doctest::Approx(var[j]).epsilon(1e-12));
  }
  CHECK(json_number(r.out, "version") == 10);
}

TEST_CASE("stats compute rejects bad files with FILE:LINE and exit status 2, printing no "
          "result") {
  temp_folder dir("stats-bad");
  auto good = dir.write("good.csv", "x,y,z\n1,2,3\n4,5,6\n");
  struct bad_case {
    std::string name, text, says;
  };
  std::vector<bad_case> cases = {
    {"ragged.csv", "1,2,3\n4,5\n",
     "ragged.csv:2: expected 3 values (as on line 1), got 2"},
    {"word.csv", "1,2,3\n4,five,6\n", "word.csv:2: field 2: 'five' is not a number"},
    {"nan.csv", "1,2,3\n4,nan,6\n", "nan.csv:2: field 2: nan is not allowed"},
    {"inf.csv", "h1,h2,h3\n1,2,3\n-inf,5,6\n", "inf.csv:3: field 1: -inf is not allowed"},
    {"huge.csv", "1,2,3e39\n", "huge.csv:1: field 3: 3e39 is outside the float32 range"},
    {"empty.csv", "", "empty.csv: no data rows"},
    {"header_only.csv", "a,b,c\n", "header_only.csv: no data rows"},
    {"narrow.csv", "1,2\n", "narrow.csv: 2 values per row, but"},
    {"blank_field.csv", "1,2,3\n1,,3\n",
     "blank_field.csv:2: field 2: '' is not a number"},
  };
  for (auto& c : cases) {
    CAPTURE(c.name);
    auto path = dir.write(c.name, c.text);
    auto r = run_troupe(fmt::format("stats compute '{}' '{}' --json", good, path), dir);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(c.says) != std::string::npos);
  }
  auto r = run_troupe("stats compute missing.csv", dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("missing.csv: cannot open file") != std::string::npos);
  r = run_troupe(fmt::format("stats compute '{}' --batch-rows 0", good), dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("--batch-rows: expected an integer in [1,") != std::string::npos);
  r = run_troupe(fmt::format("stats compute '{}' --mode median", good), dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("--mode: expected cumulative or ema, got 'median'") !=
        std::string::npos);
  r = run_troupe("stats compute", dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("usage: troupe stats compute") != std::string::npos);
}
