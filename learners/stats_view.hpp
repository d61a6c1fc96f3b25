// A statistics view: the latest published snapshot of one statistics stream,
// readable without ever waiting.
//
// The view is a triple buffer. The writer (the feeder that receives the
// statistics keeper's snapshots) fills a back buffer and swaps it with the
// middle one in one atomic exchange; the reader swaps the middle buffer with
// its front buffer, also in one atomic exchange, only when a newer snapshot is
// there. Both sides are wait-free: no lock, no retry loop, no message. A
// stalled keeper makes the statistics older, never the reader slower.
//
// One reader thread at a time: give every reader (learner, env runner) its
// own view. Writers are serialized among themselves by a mutex the reader
// never touches.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

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

  /// The latest snapshot. Wait-free; the reference stays valid and unchanged
  /// until this reader's next read(). Never call from two threads at once.
  const stats_snapshot& read() noexcept {
    if (middle_.load(std::memory_order_relaxed) & fresh_bit) {
      auto prev = middle_.exchange(front_, std::memory_order_acq_rel);
      front_ = prev & index_mask;
    }
    return buffers_[front_];
  }

  /// Publishes a snapshot (copied into the back buffer; no allocation once
  /// the buffers have grown to the dimension). Snapshots older than the
  /// latest published version are ignored.
  void publish(const stats_snapshot& snapshot);

  /// Publishes from raw parts, for publishers that do not hold a snapshot.
  void publish(uint64_t version, uint64_t count, const double* mean,
               const double* var, size_t dim);

  /// Dimension given at construction.
  size_t dim() const noexcept { return dim_; }

  /// Version of the latest published snapshot (writer side; for tests and
  /// metrics).
  uint64_t published_version() const noexcept {
    return published_version_.load(std::memory_order_acquire);
  }

private:
  static constexpr uint8_t fresh_bit = 0x4;
  static constexpr uint8_t index_mask = 0x3;

  // Fills the back buffer and swaps it in; the writer mutex is held.
  template <class Fill>
  void swap_in(uint64_t version, Fill&& fill);

  size_t dim_;
  std::array<stats_snapshot, 3> buffers_;
  alignas(64) std::atomic<uint8_t> middle_{1};
  alignas(64) uint8_t front_ = 0; // reader only
  uint8_t back_ = 2;              // writers only, under writer_mutex_
  std::mutex writer_mutex_;
  std::atomic<uint64_t> published_version_{0};
};

} // namespace troupe::learners
