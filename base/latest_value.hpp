// A latest-value slot between publishers and one reader thread: the one
// triple buffer of the project, wait-free for the reader (docs/design-notes.md,
// "kernels/").
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>

#include "base/mutex.hpp"

namespace troupe::base {

/// Latest-value buffer: publishers write, one reader reads the newest value.
template <class T>
class latest_value {
public:
  /// A slot whose value is `initial` until the first publish.
  explicit latest_value(const T& initial = T{}) {
    for (auto& b : buffers_)
      b.value = initial;
  }

  latest_value(const latest_value&) = delete;
  latest_value& operator=(const latest_value&) = delete;

  /// The newest value, wait-free, valid and unchanged until this reader's
  /// next read() (never call from two threads at once).
  const T& read() noexcept {
    if (middle_.load(std::memory_order_relaxed) & fresh_bit) {
      auto prev = middle_.exchange(front_, std::memory_order_acq_rel);
      front_ = prev & index_mask;
    }
    return buffers_[front_].value;
  }

  /// Publishes `value` (assigned into the back buffer under the writer mutex,
  /// releasing what that buffer held on the writer's thread).
  template <class U>
  void publish(U&& value) {
    publish_with([&](T& back) {
      back = std::forward<U>(value);
      return true;
    });
  }

  /// Publishes by filling the back buffer (an older value, whose storage is
  /// reused) with `fill(T&)` under the writer mutex, then `after()` when
  /// `fill` returned true, and returns whether it published.
  template <class Fill, class After>
  bool publish_with(Fill&& fill, After&& after) {
    mutex_lock guard(writer_mutex_);
    if (!fill(buffers_[back_].value))
      return false;
    auto prev = middle_.exchange(static_cast<uint8_t>(back_ | fresh_bit),
                                 std::memory_order_acq_rel);
    back_ = prev & index_mask;
    after();
    return true;
  }

  /// publish_with with nothing after.
  template <class Fill>
  bool publish_with(Fill&& fill) {
    return publish_with(std::forward<Fill>(fill), [] {});
  }

private:
  static constexpr uint8_t fresh_bit = 0x4;
  static constexpr uint8_t index_mask = 0x3;
  // 64 bytes: the cache line of the x86-64 and ARM cores we run on.
  static constexpr size_t cache_line = 64;

  struct alignas(cache_line) slot {
    T value;
  };

  std::array<slot, 3> buffers_;
  alignas(cache_line) std::atomic<uint8_t> middle_{1};                    // shared
  alignas(cache_line) uint8_t front_ = 0;                                 // reader only
  alignas(cache_line) uint8_t back_ TROUPE_GUARDED_BY(writer_mutex_) = 2; // writers only
  mutex writer_mutex_;
};

} // namespace troupe::base
