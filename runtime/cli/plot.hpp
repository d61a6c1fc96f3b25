// Learning curves of run folders as self-contained SVG files: mean return
// (return_mean_100 of metrics.csv) against environment steps and against wall
// time, side by side, titled with the run name, the algorithm (and mode) and
// the environment read from the run's config.toml. docs/evaluation.md
// describes the layout.
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
  std::string dir;        ///< the run folder as given
  std::string folder;     ///< its last path component, e.g. "cartpole-20260101-120000"
  std::string name;       ///< run.name (the folder name when config.toml lacks it)
  std::string env_id;     ///< env.id ("unknown" when absent)
  std::string algo;       ///< algo.name ("unknown" when absent)
  std::string mode;       ///< algo.mode (empty when absent)
  std::vector<double> wall_time_s;     ///< one per metrics row, NaN where missing
  std::vector<double> env_steps;       ///< one per metrics row, NaN where missing
  std::vector<double> return_mean_100; ///< one per metrics row, NaN where missing
};

/// Reads `run_dir`/metrics.csv and, tolerantly, `run_dir`/config.toml. The
/// header names the columns (any order, extra columns ignored); a missing
/// column, a row whose cell count differs from the header's or a cell of a
/// curve column that is not a number is an error naming FILE:LINE. Empty and
/// "nan" cells read as NaN. An unterminated last line (a row being written)
/// is left out.
result<run_curve> read_run_curve(const std::string& run_dir);

/// The SVG document for one or more runs (overlaid, with a legend when
/// several). Points with a non-finite coordinate are skipped; runs without
/// a finite point draw "no data yet". A curve of more than 4 points per pixel
/// column keeps, per column, the first, last, lowest and highest points.
/// With `bands`, runs of the same run.name (the seeds of one config) are
/// one group, drawn as its median curve over a shaded band from the first
/// to the third quartile (see run_bands) instead of one line per run.
std::string render_curves_svg(const std::vector<run_curve>& runs, bool bands = false);

/// The runs of one group summarized on a common x grid.
struct band_series {
  std::vector<double> x;      ///< grid points, increasing
  std::vector<double> q25;    ///< first quartile of the runs' values there
  std::vector<double> median; ///< their median
  std::vector<double> q75;    ///< their third quartile
  std::vector<size_t> index;  ///< each point's place on the grid (gaps: points left out)
};

/// The band of `runs` against `xs_of` (env steps or wall time): `points`
/// grid points evenly spaced from the smallest first x to the largest last
/// x of the runs' finite points. A run's value at x is its return at its
/// last finite row with an x not above it (its curve as a step function),
/// and it has none before its first finite row or past its last row.
/// Quartiles interpolate linearly between order statistics (type 7); a
/// grid point where fewer than half of the runs (rounded up) have a value
/// is left out.
band_series run_bands(const std::vector<const run_curve*>& runs,
                      std::vector<double> run_curve::*xs_of, size_t points);

/// Writes the learning curves of `run_dir` to `out_path` (a temporary file
/// renamed into place, so the file is complete or absent).
status write_curve_svg(const std::string& run_dir, const std::string& out_path);

/// Writes the learning curves of several runs, overlaid (or, with `bands`,
/// as one band per run.name), to `out_path`.
status write_curves_svg(const std::vector<std::string>& run_dirs,
                        const std::string& out_path, bool bands = false);

} // namespace troupe::runtime
