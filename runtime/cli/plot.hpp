// Learning curves of run folders as self-contained SVG files, mean return
// against environment steps and against wall time (layout, bands and
// thinning: docs/evaluation.md).
#pragma once

#include <string>
#include <vector>

#include "base/error.hpp"

namespace troupe::runtime {

/// The columns of metrics.csv a learning curve needs.
inline constexpr const char* curve_columns[] = {"wall_time_s", "env_steps",
                                                "return_mean_100"};

/// What a plot needs of one run folder.
struct run_curve {
  std::string dir;    ///< the run folder as given
  std::string folder; ///< its last path component, e.g. "cartpole-20260101-120000"
  std::string name;   ///< run.name (the folder name when config.toml lacks it)
  std::string env_id; ///< env.id ("unknown" when absent)
  std::string algo;   ///< algo.name ("unknown" when absent)
  std::string mode;   ///< algo.mode (empty when absent)
  std::vector<double> wall_time_s;     ///< one per metrics row, NaN where missing
  std::vector<double> env_steps;       ///< one per metrics row, NaN where missing
  std::vector<double> return_mean_100; ///< one per metrics row, NaN where missing
};

/// Reads `run_dir`/metrics.csv strictly and `run_dir`/config.toml
/// tolerantly, every error naming FILE:LINE.
result<run_curve> read_run_curve(const std::string& run_dir);

/// The SVG document for one or more runs, overlaid with a legend or, with
/// `bands`, as one median-and-quartiles band per run.name.
std::string render_curves_svg(const std::vector<run_curve>& runs, bool bands = false);

/// The runs of one group summarized on a common x grid.
struct band_series {
  std::vector<double> x;      ///< grid points, increasing
  std::vector<double> q25;    ///< first quartile of the runs' values there
  std::vector<double> median; ///< their median
  std::vector<double> q75;    ///< their third quartile
  std::vector<size_t> index;  ///< each point's place on the grid (gaps: points left out)
};

/// The band of `runs` against `xs_of` (env steps or wall time) on `points`
/// evenly spaced grid points, each run a step function of its finite rows.
band_series run_bands(const std::vector<const run_curve*>& runs,
                      std::vector<double> run_curve::*xs_of, size_t points);

/// Writes the learning curves of `run_dir` to `out_path`, complete or absent.
status write_curve_svg(const std::string& run_dir, const std::string& out_path);

/// Writes the learning curves of several runs, overlaid (or, with `bands`,
/// as one band per run.name), to `out_path`.
status write_curves_svg(const std::vector<std::string>& run_dirs,
                        const std::string& out_path, bool bands = false);

} // namespace troupe::runtime
