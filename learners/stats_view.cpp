#include "learners/stats_view.hpp"

#include <algorithm>

namespace troupe::learners {

stats_view::stats_view(size_t dim, std::string stream) : dim_(dim) {
  for (auto& b : buffers_) {
    b.stream = stream;
    b.mean.assign(dim, 0.0);
    b.var.assign(dim, 1.0);
  }
}

template <class Fill>
void stats_view::swap_in(uint64_t version, Fill&& fill) {
  std::lock_guard<std::mutex> guard(writer_mutex_);
  if (version < published_version_.load(std::memory_order_relaxed))
    return;
  fill(buffers_[back_]);
  auto prev = middle_.exchange(static_cast<uint8_t>(back_ | fresh_bit),
                               std::memory_order_acq_rel);
  back_ = prev & index_mask;
  published_version_.store(version, std::memory_order_release);
}

void stats_view::publish(const stats_snapshot& snapshot) {
  swap_in(snapshot.version, [&](stats_snapshot& b) {
    b.stream = snapshot.stream;
    b.version = snapshot.version;
    b.count = snapshot.count;
    b.mean.assign(snapshot.mean.begin(), snapshot.mean.end());
    b.var.assign(snapshot.var.begin(), snapshot.var.end());
  });
}

void stats_view::publish(uint64_t version, uint64_t count, const double* mean,
                         const double* var, size_t dim) {
  swap_in(version, [&](stats_snapshot& b) {
    b.version = version;
    b.count = count;
    b.mean.assign(mean, mean + dim);
    b.var.assign(var, var + dim);
  });
}

} // namespace troupe::learners
