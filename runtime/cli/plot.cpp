#include "runtime/cli/plot.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "runtime/toml.hpp"

namespace troupe::runtime {

namespace fs = std::filesystem;

namespace {

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();

// -- reading the run folder ----------------------------------------------------

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r'))
    ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r'))
    --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    cells.push_back(trim(line.substr(start, comma - start)));
    if (comma == std::string::npos)
      return cells;
    start = comma + 1;
  }
}

// A cell of a curve column: a number, or NaN for an empty or "nan" cell.
bool parse_cell(const std::string& cell, double& out) {
  if (cell.empty()) {
    out = not_a_number;
    return true;
  }
  std::string lower(cell);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "nan" || lower == "-nan" || lower == "+nan") {
    out = not_a_number;
    return true;
  }
  const char* begin = cell.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  if (end == begin || *end != '\0')
    return false;
  // A value beyond float64's range is as unplottable as infinity.
  out = errno == ERANGE && std::isinf(v) ? std::numeric_limits<double>::infinity() : v;
  return true;
}

// Reads run.name, env.id, algo.name and algo.mode; anything missing keeps its
// fallback, since a plot is still useful without labels.
void read_labels(const fs::path& dir, run_curve& run) {
  run.name = run.folder;
  run.env_id = "unknown";
  run.algo = "unknown";
  auto path = dir / "config.toml";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return;
  toml::table doc;
  try {
    doc = toml::parse_file(path.string());
  } catch (const toml::parse_error&) {
    return;
  }
  auto take = [&](const char* section, const char* key, std::string& into) {
    if (auto v = doc[section][key].value<std::string>(); v && !v->empty())
      into = *v;
  };
  take("run", "name", run.name);
  take("env", "id", run.env_id);
  take("algo", "name", run.algo);
  take("algo", "mode", run.mode);
}

status read_metrics(const fs::path& path, run_curve& run) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(errc::not_found, "{}: cannot open it (is {} a run folder?)", file,
                      run.dir);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  // A last line without its newline is a row still being written (or cut by
  // a kill); a lone header line is complete as it is.
  if (lines.size() > 1 && !text.empty() && text.back() != '\n')
    lines.pop_back();

  size_t header_line = 0;
  while (header_line < lines.size() && trim(lines[header_line]).empty())
    ++header_line;
  if (header_line == lines.size())
    return make_error(errc::bad_input, "{}: empty file; expected a header row naming {}",
                      file, fmt::join(curve_columns, ", "));
  const auto header = split_cells(lines[header_line]);
  size_t column[3] = {};
  for (size_t c = 0; c < 3; ++c) {
    auto it = std::find(header.begin(), header.end(), curve_columns[c]);
    if (it == header.end())
      return make_error(
        errc::bad_input,
        "{}:{}: the header has no column '{}' (a learning curve needs {})", file,
        header_line + 1, curve_columns[c], fmt::join(curve_columns, ", "));
    column[c] = static_cast<size_t>(it - header.begin());
  }

  std::vector<double>* series[3] = {&run.wall_time_s, &run.env_steps,
                                    &run.return_mean_100};
  for (size_t i = header_line + 1; i < lines.size(); ++i) {
    if (trim(lines[i]).empty())
      continue;
    const auto cells = split_cells(lines[i]);
    if (cells.size() != header.size())
      return make_error(errc::bad_input, "{}:{}: {} cells, but the header has {}", file,
                        i + 1, cells.size(), header.size());
    for (size_t c = 0; c < 3; ++c) {
      double v = 0;
      if (!parse_cell(cells[column[c]], v))
        return make_error(errc::bad_input, "{}:{}: column '{}' holds '{}', not a number",
                          file, i + 1, curve_columns[c], cells[column[c]]);
      series[c]->push_back(v);
    }
  }
  return ok_status();
}

// -- drawing -------------------------------------------------------------------

std::string escape_xml(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      // Control characters are not allowed in XML 1.0 text.
      if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n')
        out += c;
      else
        out += ' ';
    }
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target`
// intervals over `span`.
double nice_step(double span, int target) {
  double raw = span / target;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / magnitude;
  double factor = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
  return factor * magnitude;
}

// An axis range: [lo, hi] in data units, widened to whole tick steps.
struct axis {
  double lo = 0;
  double hi = 1;
  double step = 0.2;
};

// With `snap`, the ends widen to whole tick steps (returns); without, the
// axis ends at the data (steps and time, whose last row is the run's end).
axis make_axis(double data_lo, double data_hi, bool snap) {
  if (!(data_hi > data_lo)) {
    double pad = std::max(1.0, std::abs(data_lo) * 0.1);
    data_lo -= pad;
    data_hi += pad;
  }
  axis a;
  a.step = nice_step(data_hi - data_lo, 5);
  a.lo = snap ? std::floor(data_lo / a.step) * a.step : data_lo;
  a.hi = snap ? std::ceil(data_hi / a.step) * a.step : data_hi;
  return a;
}

// The tick values of an axis: the multiples of its step inside [lo, hi].
std::vector<double> tick_values(const axis& a) {
  // By integer index, with a little slack, so that rounding never drops an end.
  const auto first = static_cast<long long>(std::ceil(a.lo / a.step - 1e-9));
  const auto last = static_cast<long long>(std::floor(a.hi / a.step + 1e-9));
  std::vector<double> out;
  for (long long k = first; k <= last; ++k)
    out.push_back(static_cast<double>(k) * a.step);
  return out;
}

// A tick label: thousands as "k" and millions as "M", with as many decimals
// as the step needs.
std::string tick_label(double v, double step, double largest) {
  double scale = 1;
  const char* suffix = "";
  if (largest >= 1e6) {
    scale = 1e6;
    suffix = "M";
  } else if (largest >= 1e4) {
    scale = 1e3;
    suffix = "k";
  }
  double scaled_step = step / scale;
  int decimals =
    scaled_step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(scaled_step) - 1e-9));
  double scaled = v / scale;
  if (std::abs(scaled) < scaled_step * 1e-6)
    scaled = 0; // no "-0"
  return fmt::format("{:.{}f}{}", scaled, decimals, v == 0 ? "" : suffix);
}

// Colors of the overlaid runs (Tableau 10), cycled.
constexpr const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

constexpr double width = 1000;
constexpr double panel_width = 430; // plot area of one panel
constexpr double panel_height = 300;
constexpr double panel_top = 70;
constexpr double panel_left[2] = {80, 560};

struct panel_def {
  const char* id;      // data-panel attribute
  const char* x_label; // axis title
  std::vector<double> run_curve::*x;
};

const panel_def panels[2] = {
  {"env_steps", "env steps", &run_curve::env_steps},
  {"wall_time_s", "wall time (s)", &run_curve::wall_time_s},
};

std::string run_label(const run_curve& run) {
  std::string algo =
    run.mode.empty() ? run.algo : fmt::format("{} ({})", run.algo, run.mode);
  return fmt::format("{}: {} on {}", run.name, algo, run.env_id);
}

// "N runs", with the algorithm and the environment when every run shares them.
std::string overlay_title(const std::vector<run_curve>& runs) {
  auto shared = [&](auto field) {
    for (auto& run : runs)
      if (field(run) != field(runs[0]))
        return std::string{};
    return field(runs[0]);
  };
  auto algo = shared([](const run_curve& r) {
    return r.mode.empty() ? r.algo : fmt::format("{} ({})", r.algo, r.mode);
  });
  auto env = shared([](const run_curve& r) { return r.env_id; });
  std::string title = fmt::format("{} runs", runs.size());
  if (!algo.empty())
    title += ": " + algo;
  if (!env.empty())
    title += " on " + env;
  return title;
}

bool finite_point(const run_curve& run, const std::vector<double>& xs, size_t i) {
  return std::isfinite(xs[i]) && std::isfinite(run.return_mean_100[i]);
}

// Above this many points a curve is thinned (about 4 per pixel column).
constexpr size_t max_points_per_curve = 4 * static_cast<size_t>(panel_width);

// Keeps, of each run of consecutive rows that fall in one pixel column, the
// first, the last and those with the smallest and largest return, in row
// order: the drawn line looks the same, and the file stays small for runs
// with many rows.
template <class PixelX>
std::vector<size_t> thin_rows(const std::vector<size_t>& rows, PixelX&& pixel_x,
                              const std::vector<double>& ys) {
  std::vector<size_t> kept;
  size_t begin = 0;
  while (begin < rows.size()) {
    const double column = std::floor(pixel_x(rows[begin]));
    size_t end = begin + 1;
    while (end < rows.size() && std::floor(pixel_x(rows[end])) == column)
      ++end;
    size_t lo = begin, hi = begin;
    for (size_t k = begin; k < end; ++k) {
      if (ys[rows[k]] < ys[rows[lo]])
        lo = k;
      if (ys[rows[k]] > ys[rows[hi]])
        hi = k;
    }
    size_t picks[4] = {begin, std::min(lo, hi), std::max(lo, hi), end - 1};
    for (size_t k : picks)
      if (kept.empty() || kept.back() != rows[k])
        kept.push_back(rows[k]);
    begin = end;
  }
  return kept;
}

// Grid points of a band.
constexpr size_t band_points = 200;

double quantile(const std::vector<double>& sorted, double p) {
  const double h = (static_cast<double>(sorted.size()) - 1) * p;
  const auto lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= sorted.size())
    return sorted.back();
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[lo + 1] - sorted[lo]);
}

// The groups of runs that share run.name, in order of first appearance.
std::vector<std::vector<const run_curve*>> groups_of(const std::vector<run_curve>& runs) {
  std::vector<std::vector<const run_curve*>> groups;
  std::vector<std::string> names;
  for (auto& run : runs) {
    auto at = std::find(names.begin(), names.end(), run.name);
    if (at == names.end()) {
      names.push_back(run.name);
      groups.push_back({&run});
    } else {
      groups[static_cast<size_t>(at - names.begin())].push_back(&run);
    }
  }
  return groups;
}

// Draws one group's band and median in one panel, as contiguous segments.
void draw_band(std::string& svg, const band_series& b, size_t group, const char* color,
               const std::function<double(double)>& px,
               const std::function<double(double)>& py) {
  // A segment ends where the grid skips a point (too few runs there).
  size_t begin = 0;
  while (begin < b.x.size()) {
    size_t end = begin + 1;
    while (end < b.x.size() && b.index[end] == b.index[end - 1] + 1)
      ++end;
    std::string area, line;
    for (size_t i = begin; i < end; ++i) {
      area +=
        fmt::format("{}{:.2f},{:.2f}", area.empty() ? "" : " ", px(b.x[i]), py(b.q75[i]));
      line += fmt::format("{}{:.2f},{:.2f}", line.empty() ? "" : " ", px(b.x[i]),
                          py(b.median[i]));
    }
    for (size_t i = end; i-- > begin;)
      area += fmt::format(" {:.2f},{:.2f}", px(b.x[i]), py(b.q25[i]));
    svg += fmt::format("<polygon class=\"band\" data-group=\"{}\" fill=\"{}\" "
                       "fill-opacity=\"0.2\" stroke=\"none\" points=\"{}\"/>\n",
                       group, color, area);
    svg += fmt::format("<polyline class=\"median\" data-group=\"{}\" fill=\"none\" "
                       "stroke=\"{}\" stroke-width=\"2\" stroke-linejoin=\"round\" "
                       "points=\"{}\"/>\n",
                       group, color, line);
    begin = end;
  }
}

void draw_panel(std::string& svg, const panel_def& panel, double left,
                const std::vector<run_curve>& runs, bool bands) {
  double x_hi = 0, y_lo = std::numeric_limits<double>::infinity(), y_hi = -y_lo;
  double x_lo = 0; // steps and time start at 0; negative data widens it
  size_t points = 0;
  std::vector<band_series> group_bands;
  if (bands) {
    for (auto& group : groups_of(runs)) {
      group_bands.push_back(run_bands(group, panel.x, band_points));
      const auto& b = group_bands.back();
      for (size_t i = 0; i < b.x.size(); ++i) {
        ++points;
        x_lo = std::min(x_lo, b.x[i]);
        x_hi = std::max(x_hi, b.x[i]);
        y_lo = std::min(y_lo, b.q25[i]);
        y_hi = std::max(y_hi, b.q75[i]);
      }
    }
  } else {
    for (auto& run : runs) {
      const auto& xs = run.*panel.x;
      for (size_t i = 0; i < xs.size(); ++i) {
        if (!finite_point(run, xs, i))
          continue;
        ++points;
        x_lo = std::min(x_lo, xs[i]);
        x_hi = std::max(x_hi, xs[i]);
        y_lo = std::min(y_lo, run.return_mean_100[i]);
        y_hi = std::max(y_hi, run.return_mean_100[i]);
      }
    }
  }
  const double top = panel_top, bottom = panel_top + panel_height;
  const double right = left + panel_width;
  svg += fmt::format("<g class=\"panel\" data-panel=\"{}\">\n", panel.id);
  svg += fmt::format("<rect class=\"plot-area\" x=\"{}\" y=\"{}\" width=\"{}\" "
                     "height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n",
                     left, top, panel_width, panel_height);
  svg += fmt::format("<text class=\"x-label\" x=\"{}\" y=\"{}\" "
                     "text-anchor=\"middle\">{}</text>\n",
                     left + panel_width / 2, bottom + 40, panel.x_label);
  svg += fmt::format("<text class=\"y-label\" x=\"{0}\" y=\"{1}\" text-anchor=\"middle\" "
                     "transform=\"rotate(-90 {0} {1})\">mean return (last 100 "
                     "episodes)</text>\n",
                     left - 58, top + panel_height / 2);
  if (points == 0) {
    svg += fmt::format("<text class=\"no-data\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" "
                       "fill=\"#888\" font-size=\"16\">no data yet</text>\n</g>\n",
                       left + panel_width / 2, top + panel_height / 2);
    return;
  }
  const axis ax = make_axis(x_lo, x_hi, false);
  const axis ay = make_axis(y_lo, y_hi, true);
  auto px = [&](double x) { return left + (x - ax.lo) / (ax.hi - ax.lo) * panel_width; };
  auto py = [&](double y) {
    return bottom - (y - ay.lo) / (ay.hi - ay.lo) * panel_height;
  };

  const double x_largest = std::max(std::abs(ax.lo), std::abs(ax.hi));
  const double y_largest = std::max(std::abs(ay.lo), std::abs(ay.hi));
  for (double v : tick_values(ax)) {
    double x = px(v);
    svg += fmt::format("<line class=\"grid\" x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" "
                       "y2=\"{2}\" stroke=\"#e5e5e5\"/>\n",
                       x, top, bottom);
    svg += fmt::format("<line class=\"tick\" x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" "
                       "y2=\"{2}\" stroke=\"#444\"/>\n",
                       x, bottom, bottom + 5);
    svg += fmt::format("<text class=\"x-tick\" x=\"{:.2f}\" y=\"{}\" "
                       "text-anchor=\"middle\">{}</text>\n",
                       x, bottom + 19, tick_label(v, ax.step, x_largest));
  }
  for (double v : tick_values(ay)) {
    double y = py(v);
    svg += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1:.2f}\" x2=\"{2}\" "
                       "y2=\"{1:.2f}\" stroke=\"#e5e5e5\"/>\n",
                       left, y, right);
    svg += fmt::format("<line class=\"tick\" x1=\"{0}\" y1=\"{1:.2f}\" x2=\"{2}\" "
                       "y2=\"{1:.2f}\" stroke=\"#444\"/>\n",
                       left - 5, y, left);
    svg += fmt::format("<text class=\"y-tick\" x=\"{}\" y=\"{:.2f}\" "
                       "text-anchor=\"end\">{}</text>\n",
                       left - 8, y + 4, tick_label(v, ay.step, y_largest));
  }
  if (bands) {
    for (size_t g = 0; g < group_bands.size(); ++g)
      draw_band(svg, group_bands[g], g, palette[g % std::size(palette)], px, py);
    svg += "</g>\n";
    return;
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    const auto& xs = run.*panel.x;
    std::vector<size_t> rows;
    for (size_t i = 0; i < xs.size(); ++i)
      if (finite_point(run, xs, i))
        rows.push_back(i);
    if (rows.size() > max_points_per_curve)
      rows = thin_rows(
        rows, [&](size_t i) { return px(xs[i]); }, run.return_mean_100);
    std::string coords;
    for (size_t i : rows) {
      if (!coords.empty())
        coords += ' ';
      coords += fmt::format("{:.2f},{:.2f}", px(xs[i]), py(run.return_mean_100[i]));
    }
    if (coords.empty())
      continue;
    svg += fmt::format("<polyline class=\"curve\" data-run=\"{}\" fill=\"none\" "
                       "stroke=\"{}\" stroke-width=\"1.5\" "
                       "stroke-linejoin=\"round\" points=\"{}\"/>\n",
                       r, palette[r % std::size(palette)], coords);
  }
  svg += "</g>\n";
}

// The last row with a finite return, for the subtitle.
std::string summary(const run_curve& run) {
  for (size_t i = run.return_mean_100.size(); i-- > 0;) {
    if (!std::isfinite(run.return_mean_100[i]))
      continue;
    std::string at;
    if (std::isfinite(run.env_steps[i]))
      at += fmt::format(" at {:.0f} env steps", run.env_steps[i]);
    if (std::isfinite(run.wall_time_s[i]))
      at += fmt::format(", {:.1f} s", run.wall_time_s[i]);
    return fmt::format("{}: last mean return {:.1f}{}", run.folder,
                       run.return_mean_100[i], at);
  }
  return fmt::format("{}: no episode finished yet", run.folder);
}

status write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return make_error(errc::io_error, "{}: cannot write it: {}", tmp,
                        std::strerror(errno));
    out << text;
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return make_error(errc::io_error, "{}: write failed: {}", tmp,
                        std::strerror(errno));
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int why = errno;
    std::error_code ec;
    fs::remove(tmp, ec);
    return make_error(errc::io_error, "{}: cannot rename {} over it: {}", path, tmp,
                      std::strerror(why));
  }
  return ok_status();
}

} // namespace

result<run_curve> read_run_curve(const std::string& run_dir) {
  std::error_code ec;
  fs::path dir(run_dir);
  if (!fs::is_directory(dir, ec))
    return make_error(errc::not_found, "{}: not a folder (expected a run folder)",
                      run_dir);
  run_curve run;
  run.dir = run_dir;
  auto normal = dir.lexically_normal();
  run.folder =
    (normal.has_filename() ? normal.filename() : normal.parent_path().filename())
      .string();
  read_labels(dir, run);
  if (auto read = read_metrics(dir / "metrics.csv", run); !read)
    return read.err();
  return run;
}

band_series run_bands(const std::vector<const run_curve*>& runs,
                      std::vector<double> run_curve::*xs_of, size_t points) {
  band_series out;
  // Each run's finite points, in row order (x grows with the rows).
  struct curve {
    std::vector<double> x, y;
  };
  std::vector<curve> curves;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (auto* run : runs) {
    curve c;
    const auto& xs = run->*xs_of;
    for (size_t i = 0; i < xs.size(); ++i)
      if (finite_point(*run, xs, i) && (c.x.empty() || xs[i] >= c.x.back())) {
        c.x.push_back(xs[i]);
        c.y.push_back(run->return_mean_100[i]);
      }
    if (c.x.empty())
      continue;
    lo = std::min(lo, c.x.front());
    hi = std::max(hi, c.x.back());
    curves.push_back(std::move(c));
  }
  if (curves.empty() || points == 0)
    return out;
  const size_t needed = (runs.size() + 1) / 2;
  std::vector<double> values;
  for (size_t k = 0; k < points; ++k) {
    const double x = points == 1 ? hi
                                 : lo + (hi - lo) * static_cast<double>(k) /
                                          static_cast<double>(points - 1);
    values.clear();
    for (auto& c : curves) {
      if (x > c.x.back())
        continue; // the run ended before x
      auto after = std::upper_bound(c.x.begin(), c.x.end(), x);
      if (after == c.x.begin())
        continue; // before its first point
      values.push_back(c.y[static_cast<size_t>(after - c.x.begin()) - 1]);
    }
    if (values.empty() || values.size() < needed)
      continue;
    std::sort(values.begin(), values.end());
    out.x.push_back(x);
    out.q25.push_back(quantile(values, 0.25));
    out.median.push_back(quantile(values, 0.5));
    out.q75.push_back(quantile(values, 0.75));
    out.index.push_back(k);
  }
  return out;
}

std::string render_curves_svg(const std::vector<run_curve>& runs, bool bands) {
  const auto groups = groups_of(runs);
  const size_t entries = bands ? groups.size() : runs.size();
  const bool legend = bands || runs.size() > 1;
  const double legend_rows = legend ? static_cast<double>(entries) : 0;
  const double height = panel_top + panel_height + 60 + legend_rows * 18;
  std::string title;
  if (runs.size() == 1 && !bands)
    title = run_label(runs[0]);
  else
    title = overlay_title(runs);
  if (bands)
    title += fmt::format(" in {} group{}: median and quartiles", groups.size(),
                         groups.size() == 1 ? "" : "s");

  std::string svg;
  svg += fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
                     "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" "
                     "font-size=\"12\">\n",
                     width, height);
  svg += fmt::format("<title>{}</title>\n", escape_xml(title));
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += fmt::format("<text class=\"title\" x=\"{}\" y=\"26\" text-anchor=\"middle\" "
                     "font-size=\"17\">{}</text>\n",
                     width / 2, escape_xml(title));
  if (runs.size() == 1 && !bands)
    svg +=
      fmt::format("<text class=\"subtitle\" x=\"{}\" y=\"46\" text-anchor=\"middle\" "
                  "fill=\"#555\">{}</text>\n",
                  width / 2, escape_xml(summary(runs[0])));
  for (size_t p = 0; p < 2; ++p)
    draw_panel(svg, panels[p], panel_left[p], runs, bands);
  if (legend) {
    double y = panel_top + panel_height + 62;
    for (size_t r = 0; r < entries; ++r, y += 18) {
      const char* color = palette[r % std::size(palette)];
      const std::string text =
        bands ? fmt::format("{}: median of {} run{}, band from the first to the third "
                            "quartile",
                            run_label(*groups[r][0]), groups[r].size(),
                            groups[r].size() == 1 ? "" : "s")
              : fmt::format("{} ({})", run_label(runs[r]), runs[r].folder);
      svg +=
        fmt::format("<g class=\"legend\" data-{}=\"{}\"><line x1=\"{}\" y1=\"{}\" "
                    "x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"/>"
                    "<text x=\"{}\" y=\"{}\">{}</text></g>\n",
                    bands ? "group" : "run", r, panel_left[0], y - 4, panel_left[0] + 24,
                    y - 4, color, panel_left[0] + 32, y, escape_xml(text));
    }
  }
  svg += "</svg>\n";
  return svg;
}

status write_curves_svg(const std::vector<std::string>& run_dirs,
                        const std::string& out_path, bool bands) {
  if (run_dirs.empty())
    return make_error(errc::invalid_argument, "no run folder to plot");
  std::vector<run_curve> runs;
  for (auto& dir : run_dirs) {
    auto run = read_run_curve(dir);
    if (!run)
      return run.err();
    runs.push_back(std::move(*run));
  }
  return write_file_atomically(out_path, render_curves_svg(runs, bands));
}

status write_curve_svg(const std::string& run_dir, const std::string& out_path) {
  return write_curves_svg({run_dir}, out_path);
}

} // namespace troupe::runtime
