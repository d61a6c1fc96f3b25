#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/cli/plot.hpp"
#include "tests/cli_support.hpp"

using namespace troupe::runtime;
using troupe::test::fresh_seed;
using troupe::test::run_troupe;
using troupe::test::temp_folder;
namespace fs = std::filesystem;

namespace {

const char* metrics_header =
  "wall_time_s,env_steps,updates,episodes,return_mean_100,return_last,"
  "episode_length_mean,sps,policy_lag_mean,policy_lag_max,stats_version,stats_lag,"
  "loss_policy,loss_value,entropy,learning_rate";

// Rows of a made-up run: strictly increasing steps and time, returns in
// [lo, hi], some returns NaN (before the first episode ends, say).
struct fake_metrics {
  std::vector<double> wall_time_s, env_steps, returns;

  fake_metrics(uint64_t seed, size_t rows, double lo, double hi, double nan_fraction) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> unit(0, 1);
    double t = unit(gen), steps = std::floor(1 + 5000 * unit(gen));
    for (size_t i = 0; i < rows; ++i) {
      wall_time_s.push_back(t);
      env_steps.push_back(steps);
      returns.push_back(unit(gen) < nan_fraction
                          ? std::numeric_limits<double>::quiet_NaN()
                          : lo + (hi - lo) * unit(gen));
      t += 0.01 + unit(gen);
      steps += std::floor(1 + 20000 * unit(gen));
    }
  }

  std::string csv() const {
    std::string text = std::string(metrics_header) + "\n";
    for (size_t i = 0; i < env_steps.size(); ++i)
      text += fmt::format("{:.17g},{:.17g},{},{},{},{},1,2,3,4,5,6,7,8,9,0.001\n",
                          wall_time_s[i], env_steps[i], i, 3 * i,
                          std::isnan(returns[i]) ? std::string("nan")
                                                 : fmt::format("{:.17g}", returns[i]),
                          i);
    return text;
  }
};

std::string config_toml(const std::string& name, const std::string& env,
                        const std::string& algo, const std::string& mode) {
  return fmt::format("[run]\nname = \"{}\"\n\n[env]\nid = \"{}\"\n\n[algo]\nname = "
                     "\"{}\"\nmode = \"{}\"\n",
                     name, env, algo, mode);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of attribute `name` of one element (empty when absent).
std::string attribute(const std::string& element, const std::string& name) {
  auto key = " " + name + "=\"";
  auto at = element.find(key);
  if (at == std::string::npos)
    return {};
  auto begin = at + key.size();
  return element.substr(begin, element.find('"', begin) - begin);
}

// Every element `<tag ...>` (up to its '>') inside `text`.
std::vector<std::string> elements(const std::string& text, const std::string& tag) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = text.find("<" + tag + " ", at)) != std::string::npos) {
    auto end = text.find('>', at);
    out.push_back(text.substr(at, end - at + 1));
    at = end;
  }
  return out;
}

// The <g class="panel"> group of panel `id`.
std::string panel(const std::string& svg, const std::string& id) {
  auto begin = svg.find(fmt::format("data-panel=\"{}\"", id));
  REQUIRE(begin != std::string::npos);
  return svg.substr(begin, svg.find("</g>", begin) - begin);
}

struct point {
  double x, y;
};

std::vector<point> polyline_points(const std::string& element) {
  std::vector<point> out;
  std::stringstream ss(attribute(element, "points"));
  std::string pair;
  while (ss >> pair) {
    auto comma = pair.find(',');
    out.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  return out;
}

// Tick labels of one axis as (pixel position, value): "50k" is 50000.
std::vector<point> ticks(const std::string& group, const std::string& cls, bool x_axis) {
  std::vector<point> out;
  size_t at = 0;
  const auto key = fmt::format("<text class=\"{}\"", cls);
  while ((at = group.find(key, at)) != std::string::npos) {
    auto open_end = group.find('>', at);
    auto element = group.substr(at, open_end - at + 1);
    auto label = group.substr(open_end + 1, group.find('<', open_end) - open_end - 1);
    double scale = 1;
    if (!label.empty() && label.back() == 'k')
      scale = 1e3;
    if (!label.empty() && label.back() == 'M')
      scale = 1e6;
    double pos = std::stod(attribute(element, x_axis ? "x" : "y"));
    // y tick labels sit 4 px below their grid line, to centre the digits.
    out.push_back({x_axis ? pos : pos - 4, std::stod(label) * scale});
    at = open_end;
  }
  return out;
}

// Checks that the points of one curve are the finite (x, return) pairs of
// the data under one increasing affine map for x and one decreasing affine
// map for y (SVG's y grows downwards), inside the plot area, and that the
// tick labels sit where the same maps put their values.
void check_panel(const std::string& svg, const std::string& id,
                 const std::vector<double>& xs, const std::vector<double>& ys) {
  CAPTURE(id);
  auto group = panel(svg, id);
  auto lines = elements(group, "polyline");
  REQUIRE(lines.size() == 1);
  auto pts = polyline_points(lines[0]);
  std::vector<point> data;
  for (size_t i = 0; i < xs.size(); ++i)
    if (std::isfinite(xs[i]) && std::isfinite(ys[i]))
      data.push_back({xs[i], ys[i]});
  REQUIRE(pts.size() == data.size());
  REQUIRE(data.size() >= 2);

  // Map fitted in float64 from the extreme points of the data.
  auto lo_y = std::min_element(data.begin(), data.end(),
                               [](auto& a, auto& b) { return a.y < b.y; }) -
              data.begin();
  auto hi_y = std::max_element(data.begin(), data.end(),
                               [](auto& a, auto& b) { return a.y < b.y; }) -
              data.begin();
  const size_t last = data.size() - 1;
  double x_slope = (pts[last].x - pts[0].x) / (data[last].x - data[0].x);
  double y_slope = (pts[hi_y].y - pts[lo_y].y) / (data[hi_y].y - data[lo_y].y);
  CHECK(x_slope > 0);
  CHECK(y_slope < 0);
  auto map_x = [&](double x) { return pts[0].x + (x - data[0].x) * x_slope; };
  auto map_y = [&](double y) { return pts[lo_y].y + (y - data[lo_y].y) * y_slope; };

  auto area = elements(group, "rect")[0];
  double left = std::stod(attribute(area, "x")), top = std::stod(attribute(area, "y"));
  double right = left + std::stod(attribute(area, "width"));
  double bottom = top + std::stod(attribute(area, "height"));
  // Coordinates are printed with 2 decimals; slopes come from rounded pixels.
  const double tol = 0.02;
  for (size_t i = 0; i < pts.size(); ++i) {
    CAPTURE(i);
    if (i > 0)
      CHECK(pts[i].x >= pts[i - 1].x); // rows closer than 0.005 px share a pixel
    CHECK(std::abs(pts[i].x - map_x(data[i].x)) <= tol);
    CHECK(std::abs(pts[i].y - map_y(data[i].y)) <= tol);
    CHECK(pts[i].x >= left - 0.01);
    CHECK(pts[i].x <= right + 0.01);
    CHECK(pts[i].y >= top - 0.01);
    CHECK(pts[i].y <= bottom + 0.01);
  }
  auto x_ticks = ticks(group, "x-tick", true);
  auto y_ticks = ticks(group, "y-tick", false);
  CHECK(x_ticks.size() >= 3);
  CHECK(y_ticks.size() >= 3);
  // Tick labels are rounded to the tick step's digits, which is exact for
  // "nice" steps; the pixel tolerance covers the slope's rounding.
  for (auto& t : x_ticks)
    CHECK(std::abs(t.x - map_x(t.y)) <= 0.5);
  for (auto& t : y_ticks)
    CHECK(std::abs(t.x - map_y(t.y)) <= 0.5);
}

fs::path make_run(const temp_folder& dir, const std::string& folder,
                  const std::string& config, const std::string& metrics) {
  auto run = dir.path / folder;
  fs::create_directories(run);
  if (!config.empty())
    std::ofstream(run / "config.toml") << config;
  std::ofstream(run / "metrics.csv", std::ios::binary) << metrics;
  return run;
}

} // namespace

TEST_CASE("the curves map every finite metrics row to one point of each panel") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t rows = 5 + gen() % 200;
  CAPTURE(rows);
  const double lo = -500 + static_cast<double>(gen() % 400);
  fake_metrics m(seed, rows, lo, lo + 1 + static_cast<double>(gen() % 600), 0.2);
  temp_folder dir("plot");
  auto run = make_run(dir, "cartpole-20260101-120000",
                      config_toml("cartpole", "CartPole-v1", "ppo", "async"), m.csv());
  auto out = dir.path / "curve.svg";
  auto written = write_curve_svg(run.string(), out.string());
  REQUIRE_MESSAGE(written, written.err().message);
  auto svg = read_text(out);
  check_panel(svg, "env_steps", m.env_steps, m.returns);
  check_panel(svg, "wall_time_s", m.wall_time_s, m.returns);
}

TEST_CASE("a long run is thinned to a few points per pixel column, keeping each row's "
          "place and the extremes") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  const size_t rows = 20000;
  fake_metrics m(seed, rows, -100, 100, 0.05);
  temp_folder dir("plot");
  auto run = make_run(dir, "long", "", m.csv());
  auto out = dir.path / "c.svg";
  REQUIRE(write_curve_svg(run.string(), out.string()));
  auto lines = elements(panel(read_text(out), "env_steps"), "polyline");
  REQUIRE(lines.size() == 1);
  auto pts = polyline_points(lines[0]);
  CHECK(pts.size() <= 4 * 431);
  REQUIRE(pts.size() >= 2);

  std::vector<size_t> finite;
  for (size_t i = 0; i < rows; ++i)
    if (std::isfinite(m.returns[i]))
      finite.push_back(i);
  // The first and last rows and the rows of the extreme returns are kept;
  // they fix the affine maps.
  auto by_return = [&](size_t a, size_t b) { return m.returns[a] < m.returns[b]; };
  size_t lo = *std::min_element(finite.begin(), finite.end(), by_return);
  size_t hi = *std::max_element(finite.begin(), finite.end(), by_return);
  const size_t first = finite.front(), last = finite.back();
  double x_slope =
    (pts.back().x - pts.front().x) / (m.env_steps[last] - m.env_steps[first]);
  auto map_x = [&](size_t i) {
    return pts.front().x + (m.env_steps[i] - m.env_steps[first]) * x_slope;
  };
  auto by_y = [](const point& a, const point& b) { return a.y < b.y; };
  double top = std::min_element(pts.begin(), pts.end(), by_y)->y;
  double bottom = std::max_element(pts.begin(), pts.end(), by_y)->y;
  double y_slope = (top - bottom) / (m.returns[hi] - m.returns[lo]);
  auto map_y = [&](size_t i) {
    return bottom + (m.returns[i] - m.returns[lo]) * y_slope;
  };
  // Every point is the image of a finite row, in row order.
  size_t k = 0;
  for (size_t p = 0; p < pts.size(); ++p) {
    CAPTURE(p);
    while (k < finite.size() && !(std::abs(map_x(finite[k]) - pts[p].x) <= 0.05 &&
                                  std::abs(map_y(finite[k]) - pts[p].y) <= 0.05))
      ++k;
    REQUIRE(k < finite.size());
    ++k;
  }
}

TEST_CASE("the title names the run, the algorithm with its mode and the environment") {
  temp_folder dir("plot");
  fake_metrics m(fresh_seed(), 10, 0, 500, 0);
  auto run =
    make_run(dir, "pend-20260101-000000",
             config_toml("pendulum_ppo", "Pendulum-v1", "impala", "sync"), m.csv());
  auto out = dir.path / "c.svg";
  REQUIRE(write_curve_svg(run.string(), out.string()));
  auto svg = read_text(out);
  auto title_at = svg.find("<text class=\"title\"");
  REQUIRE(title_at != std::string::npos);
  auto title = svg.substr(title_at, svg.find("</text>", title_at) - title_at);
  CHECK(title.find("pendulum_ppo") != std::string::npos);
  CHECK(title.find("impala (sync)") != std::string::npos);
  CHECK(title.find("Pendulum-v1") != std::string::npos);
  CHECK(svg.find(">env steps<") != std::string::npos);
  CHECK(svg.find(">wall time (s)<") != std::string::npos);
  CHECK(svg.find("mean return (last 100 episodes)") != std::string::npos);
}

TEST_CASE("the svg is self-contained and escapes names that look like markup") {
  temp_folder dir("plot");
  fake_metrics m(fresh_seed(), 10, 0, 500, 0);
  auto run =
    make_run(dir, "r", config_toml("a&b <c>", "CartPole-v1", "ppo", "async"), m.csv());
  auto out = dir.path / "c.svg";
  REQUIRE(write_curve_svg(run.string(), out.string()));
  auto svg = read_text(out);
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.find("a&amp;b &lt;c&gt;") != std::string::npos);
  CHECK(svg.find("<c>") == std::string::npos);
  for (const char* external :
       {"<script", "href", "url(", "@import", "<image", "@font-face"})
    CHECK_MESSAGE(svg.find(external) == std::string::npos, external);
  // Only the namespace may name a web address.
  auto first = svg.find("http");
  CHECK(svg.find("http", first + 1) == std::string::npos);
}

TEST_CASE("a metrics file with only its header gives an svg saying no data yet") {
  temp_folder dir("plot");
  auto run = make_run(dir, "r", config_toml("n", "CartPole-v1", "ppo", "async"),
                      std::string(metrics_header) + "\n");
  auto out = dir.path / "c.svg";
  auto written = write_curve_svg(run.string(), out.string());
  REQUIRE_MESSAGE(written, written.err().message);
  auto svg = read_text(out);
  CHECK(svg.find("no data yet") != std::string::npos);
  CHECK(svg.find("<polyline") == std::string::npos);
  CHECK(svg.find("</svg>") != std::string::npos);
}

TEST_CASE("rows whose returns are all NaN give no data yet rather than a curve") {
  temp_folder dir("plot");
  fake_metrics m(fresh_seed(), 7, 0, 1, 1.0);
  auto run = make_run(dir, "r", "", m.csv());
  auto out = dir.path / "c.svg";
  REQUIRE(write_curve_svg(run.string(), out.string()));
  auto svg = read_text(out);
  CHECK(svg.find("no data yet") != std::string::npos);
  CHECK(svg.find("<polyline") == std::string::npos);
}

TEST_CASE("a missing config.toml leaves the folder name and unknown labels") {
  temp_folder dir("plot");
  fake_metrics m(fresh_seed(), 5, 0, 100, 0);
  auto run = make_run(dir, "lonely-run", "", m.csv());
  auto curve = read_run_curve(run.string());
  REQUIRE_MESSAGE(curve, curve.err().message);
  CHECK(curve->name == "lonely-run");
  CHECK(curve->env_id == "unknown");
  CHECK(curve->algo == "unknown");
  CHECK(curve->return_mean_100.size() == 5);
}

TEST_CASE("columns are found by name in any order, extra columns ignored") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  fake_metrics m(seed, 12, -200, 0, 0.1);
  std::string text = "extra,return_mean_100,env_steps,note,wall_time_s\n";
  for (size_t i = 0; i < 12; ++i)
    text += fmt::format("x{},{:.17g},{:.17g},7,{:.17g}\n", i, m.returns[i],
                        m.env_steps[i], m.wall_time_s[i]);
  temp_folder dir("plot");
  auto run = make_run(dir, "r", "", text);
  auto out = dir.path / "c.svg";
  auto written = write_curve_svg(run.string(), out.string());
  REQUIRE_MESSAGE(written, written.err().message);
  auto svg = read_text(out);
  check_panel(svg, "env_steps", m.env_steps, m.returns);
  check_panel(svg, "wall_time_s", m.wall_time_s, m.returns);
}

TEST_CASE("a missing curve column is an error naming the column and the header line") {
  temp_folder dir("plot");
  auto run = make_run(dir, "r", "", "wall_time_s,env_steps,updates\n1,2,3\n");
  auto out = dir.path / "c.svg";
  auto written = write_curve_svg(run.string(), out.string());
  REQUIRE_FALSE(written);
  CHECK(written.err().message.find("metrics.csv:1") != std::string::npos);
  CHECK(written.err().message.find("'return_mean_100'") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("a cell that is not a number is an error naming FILE:LINE, column and value") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  fake_metrics m(seed, 9, 0, 500, 0);
  auto csv = m.csv();
  // Spoil the env_steps cell of data row k (file line k + 2).
  const size_t k = seed % 9;
  std::stringstream in(csv);
  std::string line, spoiled;
  for (size_t i = 0; std::getline(in, line); ++i) {
    if (i == k + 1) {
      auto first = line.find(',');
      line = line.substr(0, first + 1) + "12x" + line.substr(line.find(',', first + 1));
    }
    spoiled += line + "\n";
  }
  temp_folder dir("plot");
  auto run = make_run(dir, "r", "", spoiled);
  auto written = write_curve_svg(run.string(), (dir.path / "c.svg").string());
  REQUIRE_FALSE(written);
  CAPTURE(written.err().message);
  CHECK(written.err().message.find(fmt::format("metrics.csv:{}:", k + 2)) !=
        std::string::npos);
  CHECK(written.err().message.find("'env_steps'") != std::string::npos);
  CHECK(written.err().message.find("'12x'") != std::string::npos);
}

TEST_CASE("a row with more or fewer cells than the header is an error naming its line") {
  temp_folder dir("plot");
  auto run =
    make_run(dir, "r", "", "wall_time_s,env_steps,return_mean_100\n1,2,3\n2,3\n");
  auto written = write_curve_svg(run.string(), (dir.path / "c.svg").string());
  REQUIRE_FALSE(written);
  CHECK(written.err().message.find("metrics.csv:3:") != std::string::npos);
}

TEST_CASE("an unterminated last row, one being written, is left out") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  fake_metrics m(seed, 8, 0, 500, 0);
  auto csv = m.csv();
  csv += "99.5,1e9,1,1,12"; // cut mid-row: no newline yet
  temp_folder dir("plot");
  auto run = make_run(dir, "r", "", csv);
  auto curve = read_run_curve(run.string());
  REQUIRE_MESSAGE(curve, curve.err().message);
  CHECK(curve->env_steps.size() == 8);
  CHECK(curve->env_steps.back() == m.env_steps.back());
}

TEST_CASE("the svg is replaced whole and no temporary file is left behind") {
  temp_folder dir("plot");
  fake_metrics m(fresh_seed(), 6, 0, 500, 0);
  auto run = make_run(dir, "r", "", m.csv());
  auto out = run / "curve.svg";
  std::ofstream(out) << "old";
  REQUIRE(write_curve_svg(run.string(), out.string()));
  CHECK(read_text(out).find("</svg>") != std::string::npos);
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(run))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"curve.svg", "metrics.csv"});
  // An unwritable destination fails as an I/O error and writes nothing.
  auto bad = dir.path / "no-such-folder" / "c.svg";
  auto written = write_curve_svg(run.string(), bad.string());
  REQUIRE_FALSE(written);
  CHECK(written.err().code == troupe::errc::io_error);
}

TEST_CASE("troupe plot writes RUN_DIR/curve.svg and overlays several runs with --out") {
  temp_folder dir("plot");
  const auto seed = fresh_seed();
  CAPTURE(seed);
  fake_metrics a(seed, 20, 0, 500, 0), b(seed + 1, 30, 0, 500, 0.1);
  auto run_a =
    make_run(dir, "a-1", config_toml("a", "CartPole-v1", "ppo", "sync"), a.csv());
  auto run_b =
    make_run(dir, "b-2", config_toml("b", "CartPole-v1", "ppo", "async"), b.csv());

  auto one = run_troupe(fmt::format("plot '{}'", run_a.string()), dir);
  CHECK_MESSAGE(one.status == 0, one.err);
  CHECK(fs::exists(run_a / "curve.svg"));

  auto missing_out =
    run_troupe(fmt::format("plot '{}' '{}'", run_a.string(), run_b.string()), dir);
  CHECK(missing_out.status == 2);
  CHECK(missing_out.err.find("--out") != std::string::npos);

  auto both = run_troupe(
    fmt::format("plot '{}' '{}' --out both.svg", run_a.string(), run_b.string()), dir);
  REQUIRE_MESSAGE(both.status == 0, both.err);
  auto svg = read_text(dir.path / "both.svg");
  for (const char* id : {"env_steps", "wall_time_s"}) {
    auto lines = elements(panel(svg, id), "polyline");
    REQUIRE(lines.size() == 2);
    CHECK(attribute(lines[0], "stroke") != attribute(lines[1], "stroke"));
  }
  CHECK(svg.find("a: ppo (sync) on CartPole-v1") != std::string::npos);
  CHECK(svg.find("b: ppo (async) on CartPole-v1") != std::string::npos);
  // The modes differ, the environment is shared.
  CHECK(svg.find("<title>2 runs on CartPole-v1</title>") != std::string::npos);
}

TEST_CASE("troupe plot on a folder without metrics exits 2 naming the file") {
  temp_folder dir("plot");
  fs::create_directories(dir.path / "empty");
  auto r = run_troupe("plot empty", dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("metrics.csv") != std::string::npos);
  auto none = run_troupe("plot does-not-exist", dir);
  CHECK(none.status == 2);
  CHECK(none.err.find("does-not-exist") != std::string::npos);
}

namespace {

// Reference of run_bands' value of one run at x, by a plain scan: the
// return of the last finite row whose x is at most `x`; NaN before the
// first finite row and past the last one.
double reference_value(const fake_metrics& m, const std::vector<double>& xs, double x) {
  double value = std::numeric_limits<double>::quiet_NaN();
  double last_x = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!std::isfinite(xs[i]) || !std::isfinite(m.returns[i]))
      continue;
    last_x = xs[i];
    if (xs[i] <= x)
      value = m.returns[i];
  }
  return x > last_x ? std::numeric_limits<double>::quiet_NaN() : value;
}

// Type-7 quantile of unsorted values, computed in long double.
double reference_quantile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const long double h = static_cast<long double>(v.size() - 1) * p;
  const auto lo = static_cast<size_t>(h);
  if (lo + 1 >= v.size())
    return v.back();
  return static_cast<double>(v[lo] +
                             (h - static_cast<long double>(lo)) * (v[lo + 1] - v[lo]));
}

} // namespace

TEST_CASE("run_bands: the median and quartiles of the runs' step curves at each grid "
          "point, left out where fewer than half of the runs have a value") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 2 + gen() % 6;
  CAPTURE(n);
  std::vector<fake_metrics> ms;
  std::vector<run_curve> runs(n);
  for (size_t r = 0; r < n; ++r) {
    // Runs of different lengths: some end early, so the last grid points
    // have fewer values.
    ms.emplace_back(seed + r, 3 + gen() % 60, -100, 500, 0.25);
    runs[r].name = "group";
    runs[r].env_steps = ms[r].env_steps;
    runs[r].wall_time_s = ms[r].wall_time_s;
    runs[r].return_mean_100 = ms[r].returns;
  }
  std::vector<const run_curve*> group;
  for (auto& r : runs)
    group.push_back(&r);
  for (auto xs_of : {&run_curve::env_steps, &run_curve::wall_time_s}) {
    const size_t points = 2 + gen() % 300;
    auto b = run_bands(group, xs_of, points);
    // The grid, from the smallest first to the largest last finite x.
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (size_t r = 0; r < n; ++r)
      for (size_t i = 0; i < ms[r].returns.size(); ++i)
        if (std::isfinite(ms[r].returns[i])) {
          lo = std::min(lo, (runs[r].*xs_of)[i]);
          hi = std::max(hi, (runs[r].*xs_of)[i]);
        }
    REQUIRE(b.x.size() == b.median.size());
    REQUIRE(b.x.size() == b.q25.size());
    REQUIRE(b.x.size() == b.q75.size());
    REQUIRE(b.x.size() == b.index.size());
    size_t at = 0;
    for (size_t k = 0; k < points; ++k) {
      const double x =
        lo + (hi - lo) * static_cast<double>(k) / static_cast<double>(points - 1);
      std::vector<double> values;
      for (size_t r = 0; r < n; ++r) {
        const double v = reference_value(ms[r], runs[r].*xs_of, x);
        if (std::isfinite(v))
          values.push_back(v);
      }
      CAPTURE(k);
      if (values.empty() || values.size() < (n + 1) / 2) {
        CHECK((at == b.index.size() || b.index[at] != k));
        continue;
      }
      REQUIRE(at < b.index.size());
      REQUIRE(b.index[at] == k);
      CHECK(b.x[at] == doctest::Approx(x).epsilon(1e-12));
      CHECK(b.q25[at] ==
            doctest::Approx(reference_quantile(values, 0.25)).epsilon(1e-12));
      CHECK(b.median[at] ==
            doctest::Approx(reference_quantile(values, 0.5)).epsilon(1e-12));
      CHECK(b.q75[at] ==
            doctest::Approx(reference_quantile(values, 0.75)).epsilon(1e-12));
      ++at;
    }
    CHECK(at == b.x.size());
  }
}

TEST_CASE("plot --bands draws one median and band per run.name, placed by the returns") {
  const auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  temp_folder dir("plot");
  // Group "alpha": three runs of constant returns a < b < c; group "beta":
  // two of d < e. Same steps and times for all.
  const double a = static_cast<double>(gen() % 100);
  const double b = a + 50 + static_cast<double>(gen() % 100);
  const double c = b + 50 + static_cast<double>(gen() % 100);
  const double d = static_cast<double>(gen() % 200);
  const double e = d + 50 + static_cast<double>(gen() % 200);
  auto constant = [](double value) {
    std::string text = std::string(metrics_header) + "\n";
    for (int i = 1; i <= 50; ++i)
      text += fmt::format("{},{},{},1,{},1,1,1,1,1,1,1,1,1,1,0.001\n", 0.1 * i, 1000 * i,
                          i, value);
    return text;
  };
  std::vector<std::string> dirs;
  int k = 0;
  for (auto [name, value] : std::vector<std::pair<std::string, double>>{
         {"alpha", a}, {"beta", d}, {"alpha", b}, {"alpha", c}, {"beta", e}})
    dirs.push_back(make_run(dir, fmt::format("{}-{}", name, k++),
                            config_toml(name, "CartPole-v1", "ppo", "sync"),
                            constant(value))
                     .string());
  auto out = dir.path / "bands.svg";
  auto written = write_curves_svg(dirs, out.string(), true);
  REQUIRE_MESSAGE(written, written.err().message);
  const auto svg = read_text(out);
  CHECK(svg.find("5 runs: ppo (sync) on CartPole-v1 in 2 groups: median and quartiles") !=
        std::string::npos);
  CHECK(svg.find("alpha: ppo (sync) on CartPole-v1: median of 3 runs") !=
        std::string::npos);
  CHECK(svg.find("beta: ppo (sync) on CartPole-v1: median of 2 runs") !=
        std::string::npos);
  for (const char* id : {"env_steps", "wall_time_s"}) {
    CAPTURE(id);
    const auto group = panel(svg, id);
    CHECK(elements(group, "polyline").size() == 2); // the medians only
    // The pixel rows of a group's median and of its band's upper and lower
    // edges; y = bottom - (v - lo) * scale, so ratios of differences are
    // ratios of returns.
    auto rows = [&](const std::string& tag, size_t g) {
      std::vector<double> ys;
      for (auto& el : elements(group, tag))
        if (attribute(el, "data-group") == std::to_string(g) &&
            attribute(el, "class") == (tag == "polygon" ? "band" : "median"))
          for (auto& p : polyline_points(el))
            ys.push_back(p.y);
      std::sort(ys.begin(), ys.end());
      ys.erase(std::unique(ys.begin(), ys.end()), ys.end());
      return ys;
    };
    for (size_t g = 0; g < 2; ++g) {
      CAPTURE(g);
      auto med = rows("polyline", g);
      auto band = rows("polygon", g);
      REQUIRE(med.size() == 1);
      REQUIRE(band.size() == 2); // the third quartile above (smaller y), the first below
      const double up = med[0] - band[0], down = band[1] - med[0];
      REQUIRE(up > 0);
      REQUIRE(down > 0);
      // alpha: quartiles a + (b-a)/2 and b + (c-b)/2 around b; beta:
      // d + (e-d)/4 and d + 3(e-d)/4 around (d+e)/2.
      const double expected = g == 0 ? (b - a) / (c - b) : 1.0;
      CHECK(down / up == doctest::Approx(expected).epsilon(0.01));
    }
  }
  // From the command line, too.
  auto r = run_troupe(fmt::format("plot '{}' '{}' --bands --out '{}'", dirs[0], dirs[1],
                                  (dir.path / "cli.svg").string()),
                      dir);
  CAPTURE(r.err);
  CHECK(r.status == 0);
  CHECK(read_text(dir.path / "cli.svg").find("class=\"band\"") != std::string::npos);
}
