#include "learners/stats_view.hpp"

#include <algorithm>
#include <utility>

namespace troupe::learners {

namespace {

// The snapshot every buffer starts with: version 0, mean 0, variance 1.
stats_snapshot identity_snapshot(size_t dim, const std::string& stream) {
  stats_snapshot s;
  s.stream = stream;
  s.mean.assign(dim, 0.0);
  s.var.assign(dim, 1.0);
  return s;
}

} // namespace

stats_view::stats_view(size_t dim, std::string stream)
  : dim_(dim), stream_(std::move(stream)), buffer_(identity_snapshot(dim_, stream_)) {}

template <class Fill>
void stats_view::swap_in(uint64_t version, Fill&& fill) {
  buffer_.publish_with(
    [&](stats_snapshot& back) {
      if (version < published_version_.load(std::memory_order_relaxed))
        return false;
      fill(back);
      return true;
    },
    [&] { published_version_.store(version, std::memory_order_release); });
}

status stats_view::publish(const stats_snapshot& snapshot) {
  if (snapshot.mean.size() != dim_ || snapshot.var.size() != dim_)
    return make_error(
      errc::dimension_mismatch,
      "stats view '{}': a snapshot of stream '{}' (version {}) has {} means "
      "and {} variances, the view's dimension is {}",
      stream_, snapshot.stream, snapshot.version, snapshot.mean.size(),
      snapshot.var.size(), dim_);
  swap_in(snapshot.version, [&](stats_snapshot& b) {
    b.stream = snapshot.stream;
    b.version = snapshot.version;
    b.count = snapshot.count;
    b.mean.assign(snapshot.mean.begin(), snapshot.mean.end());
    b.var.assign(snapshot.var.begin(), snapshot.var.end());
  });
  return ok_status();
}

status stats_view::publish(uint64_t version, uint64_t count, const double* mean,
                           const double* var, size_t dim) {
  if (dim != dim_)
    return make_error(
      errc::dimension_mismatch,
      "stats view '{}': a snapshot (version {}) of dimension {} published "
      "to a view of dimension {}",
      stream_, version, dim, dim_);
  swap_in(version, [&](stats_snapshot& b) {
    b.version = version;
    b.count = count;
    b.mean.assign(mean, mean + dim);
    b.var.assign(var, var + dim);
  });
  return ok_status();
}

} // namespace troupe::learners
