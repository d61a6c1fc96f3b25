// Global statistics in a few lines: two workers with different batch sizes
// and different data send the moments of their batches to one statistics
// keeper; a reader normalizes with the keeper's global mean and variance
// through a view, without ever waiting for the keeper.
//
//   build/examples/global_statistics
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/stats_keeper.hpp"
#include "kernels/moments.hpp"

using namespace troupe;

int main() {
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  caf::actor_system sys{cfg};

  // One keeper, one stream of dimension 2, published after every merge.
  actors::stats_keeper_options opts;
  opts.publish_every_merges = 1;
  auto keeper = actors::spawn_stats_keeper(sys, opts);
  caf::scoped_actor self{sys};
  self
    ->request(keeper, caf::infinite, actors::declare_atom::value, std::string{"obs"},
              uint64_t{2})
    .receive([](uint64_t) {}, [](caf::error&) {});
  auto subscribed = actors::subscribe_view(sys, keeper, "obs", 2);
  if (!subscribed) {
    std::fprintf(stderr, "%s\n", subscribed.err().message.c_str());
    return 1;
  }
  auto view = *subscribed;

  // Worker A: small batches around 0; worker B: large batches around 100.
  std::mt19937_64 rng(42);
  std::normal_distribution<double> noise(0.0, 1.0);
  auto batch = [&](size_t rows, double center) {
    std::vector<float> x(rows * 2);
    for (auto& v : x)
      v = static_cast<float>(center + noise(rng));
    return x;
  };
  std::vector<float> all;
  for (int step = 0; step < 10; ++step) {
    for (auto [worker, rows, center] :
         {std::tuple{"A", size_t{16}, 0.0}, std::tuple{"B", size_t{256}, 100.0}}) {
      auto x = batch(rows, center);
      all.insert(all.end(), x.begin(), x.end());
      // Only the batch's moments (2d + 1 numbers) travel, never the data.
      auto m = kernels::compute_moments(x.data(), rows, 2);
      self->send(keeper, actors::moments_delta{"obs", worker, m.count, m.mean, m.m2});
    }
  }
  self->request(keeper, caf::infinite, actors::sync_atom::value)
    .receive([](actors::sync_atom) {}, [](caf::error&) {});
  while (view->published_version() < 20)
    std::this_thread::yield(); // the view's feeder delivers asynchronously

  // Wait-free read: the latest published snapshot.
  const auto& s = view->read();
  auto exact = kernels::compute_moments(all.data(), all.size() / 2, 2);
  std::printf("version %llu, count %llu\n", static_cast<unsigned long long>(s.version),
              static_cast<unsigned long long>(s.count));
  int status = 0;
  for (size_t j = 0; j < 2; ++j) {
    double var = exact.variance()[j];
    std::printf("dim %zu: global mean %.6f var %.6f | single pass mean %.6f var %.6f\n",
                j, s.mean[j], s.var[j], exact.mean[j], var);
    if (std::fabs(s.mean[j] - exact.mean[j]) > 1e-9 * std::fabs(exact.mean[j]) ||
        std::fabs(s.var[j] - var) > 1e-9 * var)
      status = 1;
  }
  // Averaging the two workers' variances (the usual bug) would give about 1;
  // the pooled variance is about 556, because the workers' means differ by 100
  // and B sends 16 times more samples than A.
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
  return status;
}
