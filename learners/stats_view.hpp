// A statistics view: the latest published snapshot of one statistics stream,
// read wait-free from a triple buffer (base::latest_value) by one reader
// thread at a time, so every reader gets its own view (docs/statistics.md).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/latest_value.hpp"

namespace troupe::learners {

/// An immutable-once-published view of one statistics stream.
struct stats_snapshot {
  std::string stream;       ///< name of the stream, e.g. "obs"
  uint64_t version = 0;     ///< number of merges the snapshot includes
  uint64_t count = 0;       ///< number of samples merged (cumulative mode)
  std::vector<double> mean; ///< per-dimension mean
  std::vector<double> var;  ///< per-dimension population variance
};

/// Latest-value buffer between one statistics publisher and one reader.
class stats_view {
public:
  /// A view of dimension `dim` whose initial snapshot (version 0) has mean 0
  /// and variance 1, so normalizing with it is the identity.
  explicit stats_view(size_t dim, std::string stream = {});

  stats_view(const stats_view&) = delete;
  stats_view& operator=(const stats_view&) = delete;

  /// The latest snapshot, wait-free, valid and unchanged until this reader's
  /// next read() (never call from two threads at once).
  const stats_snapshot& read() noexcept { return buffer_.read(); }

  /// Publishes a snapshot unless it is older than the latest, copying it
  /// under the writer mutex without allocating once grown, or refuses one of
  /// another dimension with errc::dimension_mismatch.
  status publish(const stats_snapshot& snapshot);

  /// Publishes from raw parts, for publishers that do not hold a snapshot;
  /// `dim` must equal the view's dimension.
  status publish(uint64_t version, uint64_t count, const double* mean, const double* var,
                 size_t dim);

  /// Dimension given at construction.
  size_t dim() const noexcept { return dim_; }

  /// Version of the latest published snapshot (writer side; for tests and
  /// metrics).
  uint64_t published_version() const noexcept {
    return published_version_.load(std::memory_order_acquire);
  }

private:
  // Publishes what `fill` writes into the back buffer unless `version` is
  // older than the latest published one.
  template <class Fill>
  void swap_in(uint64_t version, Fill&& fill);

  size_t dim_;
  std::string stream_; // name given at construction, for messages
  base::latest_value<stats_snapshot> buffer_;
  std::atomic<uint64_t> published_version_{0};
};

} // namespace troupe::learners
