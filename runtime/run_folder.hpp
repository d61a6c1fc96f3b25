// The run folder: <run.output_dir>/<run.name>-<UTC timestamp>/ with the
// resolved config.toml and checkpoints/, created for a new run; for a resumed
// one, the metrics files cut back to the checkpoint it continues from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "runtime/config.hpp"

namespace troupe::runtime {

/// Creates a new run folder for `cfg` (a numbered name when the timestamped
/// one exists) with checkpoints/ and config.toml; returns its path.
result<std::string> create_run_folder(const config& cfg);

/// An exclusive lock on a run folder (flock(2) on <run_dir>/.lock, which
/// holds the owner's pid), held while the object lives: one process at a time
/// writes a run's checkpoints and metrics. The kernel releases it when the
/// owner ends, however it ends.
class run_folder_lock {
public:
  /// Takes the lock, or an error naming the folder and the holder's pid
  /// when another process holds it (errc::unavailable).
  static result<run_folder_lock> take(const std::string& run_dir);
  run_folder_lock() = default;
  run_folder_lock(run_folder_lock&& o) noexcept;
  run_folder_lock& operator=(run_folder_lock&& o) noexcept;
  run_folder_lock(const run_folder_lock&) = delete;
  run_folder_lock& operator=(const run_folder_lock&) = delete;
  ~run_folder_lock();

private:
  explicit run_folder_lock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

/// Creates <run_dir>/checkpoints/ when missing.
status ensure_checkpoints_folder(const std::string& run_dir);

/// Drops the rows of <run_dir>/hosts.csv (a coordinator's) whose run
/// env_steps (its second column) are past `env_steps`, as trim_metrics does
/// for metrics.csv; nothing when there is no such file.
void trim_host_rows(const std::string& run_dir, uint64_t env_steps);

/// Drops the rows of <run_dir>/metrics.csv and metrics.jsonl written after
/// update `updates` (a killed run's last moments), so that both stay monotonic;
/// metrics.csv is rewritten under `columns` (actors::metrics_column_names of
/// the run's environment) when its header differs.
void trim_metrics(const std::string& run_dir, uint64_t updates,
                  const std::vector<std::string>& columns);

} // namespace troupe::runtime
