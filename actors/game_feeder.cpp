#include "actors/game_feeder.hpp"
#include "actors/collect_protocol.hpp"
#include "actors/exceptions.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>

#include <boost/lockfree/policies.hpp>
#include <boost/lockfree/queue.hpp>
#include <fmt/format.h>

#include "kernels/moments.hpp"
#include "base/mutex.hpp"

namespace troupe::actors {

// -- segments -----------------------------------------------------------------

game_segment::game_segment(size_t steps, size_t od, size_t ad)
  : obs((steps + 1) * od), raw(steps * od), actions(steps * ad), logp(steps),
    rewards(steps), terminated(steps), truncated(steps), autoreset(steps) {
  episode_returns.reserve(steps);
  episode_lengths.reserve(steps);
}

void game_segment::reset() {
  rows = 0;
  transitions = 0;
  episode_returns.clear();
  episode_lengths.clear();
  policy_version = no_version;
  stats_version = no_version;
}

// -- the queue ----------------------------------------------------------------

namespace {

using lockfree_segments =
  boost::lockfree::queue<game_segment*, boost::lockfree::fixed_sized<true>>;

struct waker {
  std::atomic<bool> armed{false};
  std::function<void()> wake;
};

} // namespace

struct segment_queue::impl {
  impl(const segment_queue_options& o, size_t pool_size)
    : opts(o), ready(o.capacity + 1), free_list(pool_size + 1) {}

  const segment_queue_options& opts;
  lockfree_segments ready;     // complete segments, oldest first
  lockfree_segments free_list; // segments to fill
  base::mutex pool_mtx;
  // Owns every segment.
  std::vector<std::unique_ptr<game_segment>> pool TROUPE_GUARDED_BY(pool_mtx);
  std::atomic<size_t> queued{0}; // segments in `ready` (reserved)
  std::atomic<bool> is_closed{false};
  std::array<waker, max_wakers> wakers;
  std::atomic<size_t> waker_count{0};
  // Serializes add_waker; the wakers are read without it, up to the
  // waker_count it publishes.
  base::mutex waker_mtx;
  base::mutex space_mtx; // block_when_full: space_cv's (the counts are atomic)
  std::condition_variable space_cv;
  std::atomic<int> blocked{0};

  game_segment* new_segment() {
    auto s = std::make_unique<game_segment>(opts.steps, opts.obs_dim, opts.action_dim);
    game_segment* p = s.get();
    base::mutex_lock guard(pool_mtx);
    pool.push_back(std::move(s));
    return p;
  }

  bool reserve_space() {
    size_t q = queued.load();
    while (q < opts.capacity)
      if (queued.compare_exchange_weak(q, q + 1))
        return true;
    return false;
  }

  bool enqueue(game_segment* g) {
    bool room = reserve_space();
    if (!room && opts.block_when_full) {
      const auto deadline = std::chrono::steady_clock::now() + opts.block_timeout;
      blocked.fetch_add(1);
      base::mutex_lock lock(space_mtx);
      while (!(room = reserve_space()) && !is_closed.load())
        if (lock.wait_until(space_cv, deadline) == std::cv_status::timeout) {
          room = reserve_space();
          break;
        }
      blocked.fetch_sub(1);
    }
    if (!room)
      return false;
    if (!ready.push(g)) { // not reached: `ready` has a node per reserved place
      queued.fetch_sub(1);
      return false;
    }
    return true;
  }

  void wake_feeders() {
    // Pairs with the fence in arm_waker: either the feeder sees the segment
    // after arming, or this thread sees it armed.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const size_t n = waker_count.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      auto& w = wakers[i];
      if (w.armed.load(std::memory_order_relaxed) && w.armed.exchange(false))
        w.wake();
    }
  }
};

segment_queue::segment_queue(segment_queue_options opts) : opts_(std::move(opts)) {
  const size_t pool_size = opts_.capacity + opts_.writers + max_wakers;
  impl_ = std::make_unique<impl>(opts_, pool_size);
  for (size_t i = 0; i < pool_size; ++i)
    impl_->free_list.push(impl_->new_segment());
}

segment_queue::~segment_queue() = default;

game_segment* segment_queue::fresh() {
  game_segment* p = nullptr;
  if (impl_->free_list.pop(p))
    return p;
  // Not reached with the pool's size (capacity + writers + wakers); kept as
  // a fallback rather than an assertion.
  return impl_->new_segment();
}

bool segment_queue::push(game_segment* g) {
  if (!impl_->enqueue(g))
    return false;
  impl_->wake_feeders();
  return true;
}

bool segment_queue::take(trajectory_batch& b, size_t column, std::vector<float>& raw) {
  auto& m = *impl_;
  game_segment* g = nullptr;
  if (!m.ready.pop(g))
    return false;
  m.queued.fetch_sub(1);
  const size_t n = b.num_envs, steps = b.steps, od = opts_.obs_dim, ad = opts_.action_dim;
  for (size_t t = 0; t < steps; ++t) {
    const size_t k = t * n + column;
    std::copy(&g->obs[t * od], &g->obs[(t + 1) * od], &b.observations[k * od]);
    std::copy(&g->raw[t * od], &g->raw[(t + 1) * od], &raw[k * od]);
    std::copy(&g->actions[t * ad], &g->actions[(t + 1) * ad], &b.actions[k * ad]);
    b.behavior_logp[k] = g->logp[t];
    b.rewards[k] = g->rewards[t];
    b.terminated[k] = g->terminated[t];
    b.truncated[k] = g->truncated[t];
    b.autoreset[k] = g->autoreset[t];
  }
  std::copy(&g->obs[steps * od], &g->obs[(steps + 1) * od],
            &b.observations[(steps * n + column) * od]);
  b.episode_returns.insert(b.episode_returns.end(), g->episode_returns.begin(),
                           g->episode_returns.end());
  b.episode_lengths.insert(b.episode_lengths.end(), g->episode_lengths.begin(),
                           g->episode_lengths.end());
  b.policy_version = std::min(b.policy_version, g->policy_version);
  b.stats_version = std::min(b.stats_version, g->stats_version);
  b.normalized = opts_.normalized;
  g->reset();
  m.free_list.push(g);
  if (m.blocked.load() > 0) {
    base::mutex_lock lock(m.space_mtx);
    m.space_cv.notify_all();
  }
  return true;
}

size_t segment_queue::add_waker(std::function<void()> wake) {
  auto& m = *impl_;
  base::mutex_lock guard(m.waker_mtx);
  const size_t id = m.waker_count.load();
  if (id >= max_wakers)
    return SIZE_MAX;
  m.wakers[id].wake = std::move(wake);
  m.waker_count.store(id + 1, std::memory_order_release);
  return id;
}

void segment_queue::arm_waker(size_t id) noexcept {
  if (id >= max_wakers)
    return;
  impl_->wakers[id].armed.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void segment_queue::disarm_waker(size_t id) noexcept {
  if (id < max_wakers)
    impl_->wakers[id].armed.store(false);
}

void segment_queue::close() {
  auto& m = *impl_;
  m.is_closed.store(true, std::memory_order_release);
  base::mutex_lock lock(m.space_mtx);
  m.space_cv.notify_all();
}

// -- the feeder ---------------------------------------------------------------

namespace {

using wake_atom = caf::atom_constant<caf::atom("gamewake")>;

struct feeder_state {
  game_feeder_options opts;
  std::shared_ptr<segment_queue> queue;
  caf::actor consumer;
  caf::actor keeper;
  size_t waker = SIZE_MAX;
  env_runner_status status;
  trajectory_batch batch; // being assembled
  size_t columns = 0;     // segments in it
  std::vector<float> raw; // its raw observations, for the moments
  kernels::moments moments;
  collect_request request;
  static inline const char* name = "game_feeder";
};

using feeder_actor = caf::stateful_actor<feeder_state>;

// A feeder's part of a checkpoint: nothing to restore (the game owns its
// environments), its counters only.
env_runner_state saved_state(const feeder_state& st) {
  env_runner_state out;
  out.runner = st.opts.name;
  out.env_id = st.queue->options().env_id;
  out.status = st.status;
  return out;
}

void start_batch(feeder_state& st) {
  const auto& q = st.queue->options();
  const size_t n = st.opts.num_envs, steps = q.steps;
  const size_t od = q.obs_dim, ad = q.action_dim;
  auto& b = st.batch;
  b = shaped_batch(st.opts.name, q.env_id, st.status.batches, n, steps, od, ad);
  b.policy_version = game_segment::no_version;
  b.stats_version = game_segment::no_version;
  b.behavior_recorded = true;
  st.raw.resize(steps * n * od);
  st.columns = 0;
}

// Sends the assembled batch (and its moments) on.
void send_batch(feeder_actor* self) {
  auto& st = self->state;
  auto& b = st.batch;
  if (b.policy_version == game_segment::no_version)
    b.policy_version = 0;
  if (b.stats_version == game_segment::no_version)
    b.stats_version = 0;
  const size_t rows = b.steps * b.num_envs;
  uint64_t bad = 0;
  for (float x : st.raw)
    bad += !std::isfinite(x);
  for (float x : b.rewards)
    bad += !std::isfinite(x);
  if (bad > 0) {
    write_log(st.opts.log,
              fmt::format("game feeder '{}': {}: {} non-finite observation or reward "
                          "value(s) in batch {}; its moments were not sent to the keeper",
                          st.opts.name, b.env_id, bad, b.sequence));
  } else if (st.keeper) {
    kernels::compute_moments_into(st.raw.data(), rows, b.obs_dim, st.moments);
    send_moments(self, st.keeper, st.opts.stats_stream, st.opts.name, st.moments);
    st.status.deltas_sent += 1;
  }
  count_batch(st.status, b, bad);
  self->send(st.consumer, std::move(b));
  b = trajectory_batch{}; // fill() starts the next one
  st.columns = 0;
}

// Assembles and sends batches while a request is open and segments are
// queued; arms the waker when it runs out.
void fill(feeder_actor* self) {
  auto& st = self->state;
  auto& q = *st.queue;
  while (st.request.is_open()) {
    if (st.columns == 0 && st.batch.observations.empty())
      start_batch(st);
    while (st.columns < st.opts.num_envs) {
      if (q.take(st.batch, st.columns, st.raw)) {
        ++st.columns;
        continue;
      }
      q.arm_waker(st.waker);
      if (!q.take(st.batch, st.columns, st.raw))
        return; // woken by the game's next queued segment
      ++st.columns;
    }
    send_batch(self);
    st.request.sent();
  }
}

caf::behavior game_feeder(feeder_actor* self, game_feeder_options opts,
                          std::shared_ptr<segment_queue> queue, caf::actor consumer,
                          caf::actor keeper) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.queue = std::move(queue);
  st.consumer = std::move(consumer);
  st.keeper = std::move(keeper);
  st.status.runner = st.opts.name;
  st.status.env_id = st.queue->options().env_id;
  convert_exceptions(self, fmt::format("game feeder '{}'", st.opts.name), st.opts.log,
                     [self](const caf::error& e) { self->state.request.fail(e); });
  if (st.opts.num_envs == 0) {
    self->quit(to_caf_error(make_error(errc::invalid_argument,
                                       "game feeder '{}': num_envs must be >= 1, got 0",
                                       st.opts.name)));
    return {};
  }
  caf::actor_addr me = self->address();
  st.waker = st.queue->add_waker([me] {
    if (auto who = caf::actor_cast<caf::actor>(me))
      caf::anon_send(who, wake_atom::value);
  });
  if (st.waker == SIZE_MAX) {
    self->quit(to_caf_error(make_error(
      errc::unavailable, "game feeder '{}': the agent has no room for another feeder",
      st.opts.name)));
    return {};
  }
  self->attach_functor([queue = st.queue, id = st.waker] { queue->disarm_waker(id); });
  if (st.keeper)
    declare_stream(self, st.keeper, fmt::format("game feeder '{}'", st.opts.name),
                   st.opts.stats_stream, st.opts.log, st.opts.stats_stream,
                   static_cast<uint64_t>(st.queue->options().obs_dim));
  return {
    [self](collect_atom, uint64_t batches) -> caf::result<uint64_t> {
      auto& s = self->state;
      return s.request.open(self, batches, fmt::format("game feeder '{}'", s.opts.name),
                            [self] { fill(self); });
    },
    [self](wake_atom) { fill(self); },
    [self](status_atom) { return self->state.status; },
    [self](state_atom) { return saved_state(self->state); },
    // Nothing to hold either: the game steps its environments.
    [self](hold_atom, uint64_t) { return saved_state(self->state); },
    [](release_atom) {},
  };
}

} // namespace

caf::actor spawn_game_feeder(caf::actor_system& sys, game_feeder_options opts,
                             std::shared_ptr<segment_queue> queue, caf::actor consumer,
                             caf::actor keeper) {
  return sys.spawn(game_feeder, std::move(opts), std::move(queue), std::move(consumer),
                   std::move(keeper));
}

} // namespace troupe::actors
