// A statistics view: the latest published snapshot of one statistics stream,
// readable without ever waiting.
//
// The view is a triple buffer. The writer (the feeder that receives the
// statistics keeper's snapshots) fills a back buffer and swaps it with the
// middle one in one atomic exchange; the reader swaps the middle buffer with
// its front buffer, also in one atomic exchange, only when a newer snapshot is
// there.
//
// The reader is wait-free: read() is one relaxed load and, when something new
// was published, one atomic exchange; it takes no lock, never retries and
// sends no message, so a stalled keeper makes the statistics older, never the
// reader slower. The writer is not wait-free: publish() takes a mutex (writers
// are serialized among themselves by it; the reader never touches it) and
// copies the snapshot, allocating until the buffers have grown.
//
// The reader's own field and the writer's fields sit on separate cache lines,
// so a publication does not evict the line every read() loads.
//
// One reader thread at a time: give every reader (learner, env runner) its
// own view.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/mutex.hpp"

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
    return buffers_[front_].snapshot;
  }

  /// Publishes a snapshot (copied into the back buffer under the writer
  /// mutex; no allocation once the buffers have grown to the dimension).
  /// Snapshots older than the latest published version are ignored; a
  /// snapshot whose mean or variance does not have the view's dimension is
  /// refused with errc::dimension_mismatch and nothing is published.
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
  static constexpr uint8_t fresh_bit = 0x4;
  static constexpr uint8_t index_mask = 0x3;

  // Fills the back buffer and swaps it in; the writer mutex is held.
  template <class Fill>
  void swap_in(uint64_t version, Fill&& fill);

  // 64 bytes: the cache line of the x86-64 and ARM cores we run on. (GCC
  // warns that std::hardware_destructive_interference_size may differ between
  // compiler flags, which makes it an ABI hazard in a header.)
  static constexpr size_t cache_line = 64;

  // One buffer per cache-line-aligned slot, so that the writer filling the
  // back buffer's scalars does not evict the front buffer the reader reads.
  struct alignas(cache_line) slot {
    stats_snapshot snapshot;
  };

  size_t dim_;
  std::string stream_; // name given at construction, for messages
  std::array<slot, 3> buffers_;
  // Shared by both sides: the one field they exchange through.
  alignas(cache_line) std::atomic<uint8_t> middle_{1};
  // Reader only.
  alignas(cache_line) uint8_t front_ = 0;
  // Writers only; on a line of their own, away from the reader's front_ that
  // every read() loads.
  alignas(cache_line) uint8_t back_ TROUPE_GUARDED_BY(writer_mutex_) = 2;
  kernels::mutex writer_mutex_;
  std::atomic<uint64_t> published_version_{0};
};

} // namespace troupe::learners
