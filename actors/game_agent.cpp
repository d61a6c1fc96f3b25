#include "actors/game_agent.hpp"
#include "actors/exceptions.hpp"
#include "actors/stats_keeper.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <limits>

#include <boost/lockfree/policies.hpp>
#include <boost/lockfree/queue.hpp>
#include <fmt/format.h>

#include "base/latest_value.hpp"
#include "kernels/moments.hpp"
#include "base/mutex.hpp"
#include "base/rng.hpp"
#include "learners/mlp.hpp"
#include "learners/rollout.hpp"

namespace troupe::actors {

namespace {

constexpr uint64_t no_version = std::numeric_limits<uint64_t>::max();

// T rows of one slot, laid out as one column of a trajectory_batch.
struct segment {
  segment(size_t steps, size_t od, size_t ad)
    : obs((steps + 1) * od), raw(steps * od), actions(steps * ad), logp(steps),
      rewards(steps), terminated(steps), truncated(steps), autoreset(steps) {
    episode_returns.reserve(steps);
    episode_lengths.reserve(steps);
  }
  void reset() {
    rows = 0;
    transitions = 0;
    episode_returns.clear();
    episode_lengths.clear();
    policy_version = no_version;
    stats_version = no_version;
  }
  size_t rows = 0;        // complete rows
  size_t transitions = 0; // rows that are transitions (not resets)
  std::vector<float> obs; // [(T + 1) x od] as the policy saw them
  std::vector<float> raw; // [T x od] as the game gave them
  std::vector<float> actions, logp, rewards;
  std::vector<uint8_t> terminated, truncated, autoreset;
  std::vector<double> episode_returns;
  std::vector<uint64_t> episode_lengths;
  uint64_t policy_version = no_version; // oldest used by a row
  uint64_t stats_version = no_version;
};

// Written by the slot's thread only; read by counters() from any thread.
struct counter {
  std::atomic<uint64_t> value{0};
  void add(uint64_t k = 1) noexcept {
    value.store(value.load(std::memory_order_relaxed) + k, std::memory_order_relaxed);
  }
  uint64_t get() const noexcept { return value.load(std::memory_order_relaxed); }
};

// One slot's state, on cache lines of its own.
struct alignas(64) slot_state {
  explicit slot_state(std::shared_ptr<const policy_snapshot> initial) : policy(initial) {}
  base::latest_value<std::shared_ptr<const policy_snapshot>> policy;
  std::shared_ptr<learners::stats_view> view;
  base::rng gen;
  segment* seg = nullptr;
  bool acted = false; // act done, report pending
  size_t row = 0;     // the row act began
  double episode_return = 0;
  uint64_t episode_length = 0;
  std::vector<float> seen;     // normalized observations (act_batch: count rows)
  std::vector<float> last_raw; // the observation the pending act acted on
  std::vector<double> exps;    // categorical sampling scratch
  learners::network_cache<float> cache;
  counter env_steps, transitions, segments, dropped, dropped_segments, episodes;
  counter abandoned, abandoned_episodes;
};

// The slots, shared with the policy store's listener (which may outlive the
// agent: it then finds them gone and unsubscribes).
struct slot_array {
  std::vector<std::unique_ptr<slot_state>> slots;
  std::atomic<uint64_t> version{0};
};

using segment_queue =
  boost::lockfree::queue<segment*, boost::lockfree::fixed_sized<true>>;

constexpr size_t max_wakers = 64;

struct waker {
  std::atomic<bool> armed{false};
  std::function<void()> wake;
};

} // namespace

struct game_agent::impl {
  impl(game_agent_options o, size_t pool_size)
    : opts(std::move(o)), ready(opts.queue_capacity + 1), free_list(pool_size + 1) {}

  game_agent_options opts;
  std::shared_ptr<policy_store> store;
  learners::model_spec spec;
  size_t od = 0, ad = 0;
  bool discrete = false;
  bool normalized = false;
  std::shared_ptr<slot_array> slots;
  segment_queue ready;     // complete segments, oldest first
  segment_queue free_list; // segments to fill
  base::mutex pool_mtx;
  // Owns every segment.
  std::vector<std::unique_ptr<segment>> pool TROUPE_GUARDED_BY(pool_mtx);
  std::atomic<size_t> queued{0};              // segments in `ready` (reserved)
  std::atomic<bool> is_closed{false};
  std::array<waker, max_wakers> wakers;
  std::atomic<size_t> waker_count{0};
  // Serializes add_waker; the wakers are read without it, up to the
  // waker_count it publishes.
  base::mutex waker_mtx;
  base::mutex space_mtx; // block_when_full: space_cv's (the counts are atomic)
  std::condition_variable space_cv;
  std::atomic<int> blocked{0};
  base::mutex returns_mtx;
  std::array<double, 100> recent TROUPE_GUARDED_BY(returns_mtx) = {};
  size_t recent_count TROUPE_GUARDED_BY(returns_mtx) = 0;
  size_t recent_next TROUPE_GUARDED_BY(returns_mtx) = 0;

  segment* new_segment() {
    auto s = std::make_unique<segment>(opts.steps_per_segment, od, ad);
    segment* p = s.get();
    base::mutex_lock guard(pool_mtx);
    pool.push_back(std::move(s));
    return p;
  }

  segment* fresh_segment() {
    segment* p = nullptr;
    if (free_list.pop(p))
      return p;
    // Not reached with the pool's size (capacity + slots + feeders); kept
    // as a fallback rather than an assertion.
    return new_segment();
  }

  error fail(errc code, const char* call, size_t slot, const std::string& why) const {
    return error{
      code, fmt::format("game agent '{}': {}(slot {}): {}", opts.name, call, slot, why)};
  }

  status check_slot(const char* call, size_t slot) const {
    if (is_closed.load(std::memory_order_acquire))
      return fail(errc::unavailable, call, slot, "the agent is closed");
    if (slot >= slots->slots.size())
      return fail(errc::invalid_argument, call, slot,
                  fmt::format("slot must be < {} (the agent's slots), got {}",
                              slots->slots.size(), slot));
    return ok_status();
  }

  status check_finite(const char* call, size_t slot, const char* what, const float* x,
                      size_t offset = 0) const {
    for (size_t k = 0; k < od; ++k)
      if (!std::isfinite(x[k]))
        return fail(errc::non_finite, call, slot,
                    fmt::format("{}[{}] must be finite, got {}", what, offset + k, x[k]));
    return ok_status();
  }

  void normalize(slot_state& s, const float* raw, float* out, uint64_t& version) {
    if (!s.view) {
      std::copy(raw, raw + od, out);
      version = 0;
      return;
    }
    const auto& snap = s.view->read();
    version = snap.version;
    const double clip = opts.obs_clip > 0 ? opts.obs_clip : INFINITY;
    learners::normalize_observations(raw, 1, od, snap.mean.data(), snap.var.data(),
                                     opts.obs_epsilon, clip, out);
  }

  // Starts a row of the slot's segment with observation `raw` (normalized:
  // `seen`); a full segment is completed with it first. Returns the row.
  size_t begin_row(slot_state& s, const float* raw, const float* seen,
                   uint64_t stats_version) {
    const size_t steps = opts.steps_per_segment;
    if (s.seg->rows == steps) {
      std::copy(seen, seen + od, &s.seg->obs[steps * od]);
      finish(s);
    }
    segment& g = *s.seg;
    const size_t row = g.rows;
    std::copy(raw, raw + od, &g.raw[row * od]);
    std::copy(seen, seen + od, &g.obs[row * od]);
    g.stats_version = std::min(g.stats_version, stats_version);
    return row;
  }

  // Queues the slot's complete segment (or drops it) and gives the slot a
  // fresh one.
  void finish(slot_state& s) {
    segment* g = s.seg;
    if (enqueue(g)) {
      s.seg = fresh_segment();
      s.segments.add();
      wake_feeders();
    } else {
      s.dropped.add(g->transitions);
      s.dropped_segments.add();
      g->reset();
    }
  }

  bool reserve_space() {
    size_t q = queued.load();
    while (q < opts.queue_capacity)
      if (queued.compare_exchange_weak(q, q + 1))
        return true;
    return false;
  }

  bool enqueue(segment* g) {
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

  // Samples the action of `row` of the slot's segment from `head` (logits or
  // means of one observation) with the slot's generator.
  void sample(slot_state& s, const learners::actor_critic& model, const float* head,
              size_t row, float* action_out) {
    segment& g = *s.seg;
    float* a = &g.actions[row * ad];
    if (discrete)
      learners::sample_categorical(head, 1, static_cast<size_t>(spec.n), s.gen, a,
                                   &g.logp[row], s.exps);
    else
      learners::sample_gaussian(head, model.params() + model.layout().log_std, 1, ad,
                                s.gen, a, &g.logp[row]);
    std::copy(a, a + ad, action_out);
  }

  void note_return(double r) {
    base::mutex_lock guard(returns_mtx);
    recent[recent_next] = r;
    recent_next = (recent_next + 1) % recent.size();
    recent_count = std::min(recent_count + 1, recent.size());
  }
};

result<std::shared_ptr<game_agent>>
game_agent::create(game_agent_options opts, std::shared_ptr<policy_store> store,
                   std::vector<std::shared_ptr<learners::stats_view>> views) {
  auto bad = [&](const std::string& why) {
    return error{errc::invalid_argument,
                 fmt::format("game agent '{}': {}", opts.name, why)};
  };
  if (!store)
    return bad("a policy store is required");
  if (opts.slots == 0)
    return bad("slots must be >= 1, got 0");
  if (opts.steps_per_segment == 0)
    return bad("steps_per_segment must be >= 1, got 0");
  if (opts.queue_capacity == 0 || opts.queue_capacity > 60000)
    return bad(
      fmt::format("queue_capacity must be in [1, 60000], got {}", opts.queue_capacity));
  if (!views.empty() && views.size() != opts.slots)
    return bad(fmt::format("views must hold one view per slot ({}) or none, got {}",
                           opts.slots, views.size()));
  auto latest = store->latest();
  const auto& spec = latest->model.spec();
  if (spec.obs_norm)
    return bad("the policy's model normalizes observations itself (obs_norm); the "
               "agent hands it normalized observations");
  const size_t od = static_cast<size_t>(spec.obs_dim);
  for (size_t i = 0; i < views.size(); ++i) {
    if (!views[i])
      return bad(fmt::format("views[{}] is null", i));
    if (views[i]->dim() != od)
      return bad(fmt::format("views[{}] has dimension {}, the observations have {}", i,
                             views[i]->dim(), od));
  }
  const size_t pool_size = opts.queue_capacity + opts.slots + max_wakers;
  auto p = std::make_unique<impl>(std::move(opts), pool_size);
  p->store = std::move(store);
  p->spec = spec;
  p->od = od;
  p->discrete = spec.action == learners::action_kind::discrete;
  p->ad = p->discrete ? 1 : static_cast<size_t>(spec.act_dim);
  p->normalized = !views.empty();
  p->slots = std::make_shared<slot_array>();
  p->slots->version.store(latest->version);
  for (size_t i = 0; i < p->opts.slots; ++i) {
    auto s = std::make_unique<slot_state>(latest);
    if (!views.empty())
      s->view = views[i];
    s->gen.seed_with(p->opts.seed + i);
    s->seen.resize(od);
    s->last_raw.resize(od);
    s->exps.resize(p->discrete ? static_cast<size_t>(spec.n) : 0);
    p->slots->slots.push_back(std::move(s));
  }
  for (size_t i = 0; i < pool_size; ++i) {
    segment* g = p->new_segment();
    if (i < p->opts.slots)
      p->slots->slots[i]->seg = g;
    else
      p->free_list.push(g);
  }
  // Every version the parameter server publishes goes into each slot's
  // latest-value slot, on the publisher's thread.
  std::weak_ptr<slot_array> weak = p->slots;
  p->store->subscribe([weak](const std::shared_ptr<const policy_snapshot>& snap) {
    auto slots = weak.lock();
    if (!slots)
      return false;
    for (auto& s : slots->slots)
      s->policy.publish(snap);
    slots->version.store(snap->version, std::memory_order_relaxed);
    return true;
  });
  return std::shared_ptr<game_agent>(new game_agent(std::move(p)));
}

game_agent::game_agent(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

game_agent::~game_agent() = default;

status game_agent::act(size_t slot, const float* obs, float* action) {
  auto& m = *impl_;
  if (auto ok = m.check_slot("act", slot); !ok)
    return ok;
  if (!obs || !action)
    return m.fail(errc::invalid_argument, "act", slot,
                  fmt::format("obs and action must not be null, got obs={} action={}",
                              static_cast<const void*>(obs),
                              static_cast<const void*>(action)));
  auto& s = *m.slots->slots[slot];
  if (s.acted)
    return m.fail(errc::invalid_argument, "act", slot,
                  "act called twice without report: report the outcome of the "
                  "previous action first");
  if (auto ok = m.check_finite("act", slot, "obs", obs); !ok)
    return ok;
  const auto& policy = s.policy.read();
  uint64_t stats_version = 0;
  m.normalize(s, obs, s.seen.data(), stats_version);
  const size_t row = m.begin_row(s, obs, s.seen.data(), stats_version);
  const auto& model = policy->model;
  learners::network_forward(model.layout().actor, model.spec(), model.params(),
                            model.buffers(), s.seen.data(), 1,
                            learners::forward_mode::eval, s.cache);
  m.sample(s, model, s.cache.out.data(), row, action);
  s.seg->policy_version = std::min(s.seg->policy_version, policy->version);
  std::copy(obs, obs + m.od, s.last_raw.data());
  s.row = row;
  s.acted = true;
  s.env_steps.add();
  return ok_status();
}

status game_agent::act_batch(size_t first_slot, size_t count, const float* obs,
                             float* actions) {
  auto& m = *impl_;
  if (count == 0)
    return ok_status();
  if (auto ok = m.check_slot("act_batch", first_slot); !ok)
    return ok;
  const size_t n = m.slots->slots.size();
  if (count > n - first_slot)
    return m.fail(errc::invalid_argument, "act_batch", first_slot,
                  fmt::format("slots [{}, {}) must lie in [0, {}) (the agent's slots), "
                              "got count {}",
                              first_slot, first_slot + count, n, count));
  if (!obs || !actions)
    return m.fail(errc::invalid_argument, "act_batch", first_slot,
                  "obs and actions must not be null");
  for (size_t i = 0; i < count; ++i) {
    if (m.slots->slots[first_slot + i]->acted)
      return m.fail(errc::invalid_argument, "act_batch", first_slot + i,
                    "act called twice without report: report the outcome of the "
                    "previous action first");
    if (auto ok =
          m.check_finite("act_batch", first_slot + i, "obs", obs + i * m.od, i * m.od);
        !ok)
      return ok;
  }
  auto& lead = *m.slots->slots[first_slot];
  const auto& policy = lead.policy.read();
  lead.seen.resize(std::max(lead.seen.size(), count * m.od));
  for (size_t i = 0; i < count; ++i) {
    auto& s = *m.slots->slots[first_slot + i];
    const float* raw = obs + i * m.od;
    float* seen = &lead.seen[i * m.od];
    uint64_t stats_version = 0;
    m.normalize(s, raw, seen, stats_version);
    s.row = m.begin_row(s, raw, seen, stats_version);
  }
  const auto& model = policy->model;
  learners::network_forward(model.layout().actor, model.spec(), model.params(),
                            model.buffers(), lead.seen.data(), count,
                            learners::forward_mode::eval, lead.cache);
  const size_t width = m.discrete ? static_cast<size_t>(m.spec.n) : m.ad;
  for (size_t i = 0; i < count; ++i) {
    auto& s = *m.slots->slots[first_slot + i];
    m.sample(s, model, &lead.cache.out[i * width], s.row, actions + i * m.ad);
    s.seg->policy_version = std::min(s.seg->policy_version, policy->version);
    std::copy(obs + i * m.od, obs + (i + 1) * m.od, s.last_raw.data());
    s.acted = true;
    s.env_steps.add();
  }
  return ok_status();
}

status game_agent::report(size_t slot, double reward, bool terminated, bool truncated,
                          const float* final_obs) {
  auto& m = *impl_;
  if (auto ok = m.check_slot("report", slot); !ok)
    return ok;
  auto& s = *m.slots->slots[slot];
  if (!s.acted)
    return m.fail(errc::invalid_argument, "report", slot,
                  "report without a preceding act: call act for this slot first");
  if (!std::isfinite(reward))
    return m.fail(errc::non_finite, "report", slot,
                  fmt::format("reward must be finite, got {}", reward));
  const bool ends = terminated || truncated;
  if (ends && final_obs)
    if (auto ok = m.check_finite("report", slot, "final_obs", final_obs); !ok)
      return ok;
  segment& g = *s.seg;
  const size_t row = s.row;
  g.rewards[row] = static_cast<float>(reward);
  g.terminated[row] = terminated;
  g.truncated[row] = truncated;
  g.autoreset[row] = 0;
  g.rows = row + 1;
  g.transitions += 1;
  s.acted = false;
  s.transitions.add();
  s.episode_return += reward;
  s.episode_length += 1;
  if (!ends)
    return ok_status();
  g.episode_returns.push_back(s.episode_return);
  g.episode_lengths.push_back(s.episode_length);
  m.note_return(s.episode_return);
  s.episodes.add();
  s.episode_return = 0;
  s.episode_length = 0;
  // Next-step autoreset: a reset row whose observation is the episode's last.
  const float* last = final_obs ? final_obs : s.last_raw.data();
  uint64_t stats_version = 0;
  m.normalize(s, last, s.seen.data(), stats_version);
  const size_t reset_row = m.begin_row(s, last, s.seen.data(), stats_version);
  segment& h = *s.seg; // a new segment when the episode ended on the last row
  std::fill(&h.actions[reset_row * m.ad], &h.actions[(reset_row + 1) * m.ad], 0.0f);
  h.logp[reset_row] = 0;
  h.rewards[reset_row] = 0;
  h.terminated[reset_row] = 0;
  h.truncated[reset_row] = 0;
  h.autoreset[reset_row] = 1;
  h.rows = reset_row + 1;
  return ok_status();
}

status game_agent::abandon(size_t slot) {
  auto& m = *impl_;
  if (auto ok = m.check_slot("abandon", slot); !ok)
    return ok;
  auto& s = *m.slots->slots[slot];
  segment& g = *s.seg;
  s.abandoned.add(g.transitions);
  if (s.episode_length > 0 || s.acted)
    s.abandoned_episodes.add();
  g.reset();
  s.acted = false;
  s.episode_return = 0;
  s.episode_length = 0;
  return ok_status();
}

uint64_t game_agent::abandoned() const noexcept {
  uint64_t sum = 0;
  for (auto& s : impl_->slots->slots)
    sum += s->abandoned.get();
  return sum;
}

uint64_t game_agent::policy_version() const noexcept {
  return impl_->slots->version.load(std::memory_order_relaxed);
}

void game_agent::close() {
  auto& m = *impl_;
  m.is_closed.store(true, std::memory_order_release);
  base::mutex_lock lock(m.space_mtx);
  m.space_cv.notify_all();
}

bool game_agent::closed() const noexcept {
  return impl_->is_closed.load(std::memory_order_acquire);
}
size_t game_agent::slots() const noexcept {
  return impl_->slots->slots.size();
}
size_t game_agent::obs_dim() const noexcept {
  return impl_->od;
}
size_t game_agent::action_dim() const noexcept {
  return impl_->ad;
}
size_t game_agent::steps_per_segment() const noexcept {
  return impl_->opts.steps_per_segment;
}
const std::string& game_agent::env_id() const noexcept {
  return impl_->opts.env_id;
}

uint64_t game_agent::dropped() const noexcept {
  uint64_t sum = 0;
  for (auto& s : impl_->slots->slots)
    sum += s->dropped.get();
  return sum;
}

game_agent_counters game_agent::counters() const {
  auto& m = *impl_;
  game_agent_counters c;
  for (auto& s : m.slots->slots) {
    c.env_steps += s->env_steps.get();
    c.transitions += s->transitions.get();
    c.segments += s->segments.get();
    c.dropped += s->dropped.get();
    c.dropped_segments += s->dropped_segments.get();
    c.episodes += s->episodes.get();
    c.abandoned += s->abandoned.get();
    c.abandoned_episodes += s->abandoned_episodes.get();
  }
  c.policy_version = m.slots->version.load(std::memory_order_relaxed);
  base::mutex_lock guard(m.returns_mtx);
  if (m.recent_count > 0) {
    double sum = 0;
    for (size_t i = 0; i < m.recent_count; ++i)
      sum += m.recent[i];
    c.return_mean_100 = sum / static_cast<double>(m.recent_count);
  }
  return c;
}

bool game_agent::take_segment(trajectory_batch& b, size_t column,
                              std::vector<float>& raw) {
  auto& m = *impl_;
  segment* g = nullptr;
  if (!m.ready.pop(g))
    return false;
  m.queued.fetch_sub(1);
  const size_t n = b.num_envs, steps = b.steps, od = m.od, ad = m.ad;
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
  b.normalized = m.normalized;
  g->reset();
  m.free_list.push(g);
  if (m.blocked.load() > 0) {
    base::mutex_lock lock(m.space_mtx);
    m.space_cv.notify_all();
  }
  return true;
}

size_t game_agent::add_waker(std::function<void()> wake) {
  auto& m = *impl_;
  base::mutex_lock guard(m.waker_mtx);
  const size_t id = m.waker_count.load();
  if (id >= max_wakers)
    return SIZE_MAX;
  m.wakers[id].wake = std::move(wake);
  m.waker_count.store(id + 1, std::memory_order_release);
  return id;
}

void game_agent::arm_waker(size_t id) noexcept {
  if (id >= max_wakers)
    return;
  impl_->wakers[id].armed.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void game_agent::disarm_waker(size_t id) noexcept {
  if (id < max_wakers)
    impl_->wakers[id].armed.store(false);
}

// -- the feeder ---------------------------------------------------------------

namespace {

using wake_atom = caf::atom_constant<caf::atom("gamewake")>;

struct feeder_state {
  game_feeder_options opts;
  std::shared_ptr<game_agent> agent;
  caf::actor consumer;
  caf::actor keeper;
  size_t waker = SIZE_MAX;
  env_runner_status status;
  trajectory_batch batch; // being assembled
  size_t columns = 0;     // segments in it
  std::vector<float> raw; // its raw observations, for the moments
  kernels::moments moments;
  uint64_t remaining = 0;
  uint64_t sent_in_request = 0;
  caf::typed_response_promise<uint64_t> pending;
  bool collecting = false;
  static inline const char* name = "game_feeder";
};

using feeder_actor = caf::stateful_actor<feeder_state>;

// A feeder's part of a checkpoint: nothing to restore (the game owns its
// environments), its counters only.
env_runner_state saved_state(const feeder_state& st) {
  env_runner_state out;
  out.runner = st.opts.name;
  out.env_id = st.agent->env_id();
  out.status = st.status;
  return out;
}

void start_batch(feeder_state& st) {
  auto& a = *st.agent;
  const size_t n = st.opts.num_envs, steps = a.steps_per_segment();
  const size_t od = a.obs_dim(), ad = a.action_dim();
  auto& b = st.batch;
  b = trajectory_batch{};
  b.runner = st.opts.name;
  b.env_id = a.env_id();
  b.sequence = st.status.batches;
  b.num_envs = n;
  b.steps = steps;
  b.obs_dim = od;
  b.action_dim = ad;
  b.observations.resize((steps + 1) * n * od);
  b.actions.resize(steps * n * ad);
  b.behavior_logp.resize(steps * n);
  b.rewards.resize(steps * n);
  b.terminated.resize(steps * n);
  b.truncated.resize(steps * n);
  b.autoreset.resize(steps * n);
  b.policy_version = no_version;
  b.stats_version = no_version;
  b.behavior_recorded = true;
  st.raw.resize(steps * n * od);
  st.columns = 0;
}

// Sends the assembled batch (and its moments) on.
void send_batch(feeder_actor* self) {
  auto& st = self->state;
  auto& b = st.batch;
  if (b.policy_version == no_version)
    b.policy_version = 0;
  if (b.stats_version == no_version)
    b.stats_version = 0;
  const size_t rows = b.steps * b.num_envs;
  uint64_t bad = 0;
  for (float x : st.raw)
    bad += !std::isfinite(x);
  for (float x : b.rewards)
    bad += !std::isfinite(x);
  st.status.non_finite += bad;
  if (bad > 0) {
    write_log(st.opts.log,
              fmt::format("game feeder '{}': {}: {} non-finite observation or reward "
                          "value(s) in batch {}; its moments were not sent to the keeper",
                          st.opts.name, b.env_id, bad, b.sequence));
  } else if (st.keeper) {
    kernels::compute_moments_into(st.raw.data(), rows, b.obs_dim, st.moments);
    self->send(st.keeper,
               moments_delta{st.opts.stats_stream, st.opts.name, st.moments.count,
                             st.moments.mean, st.moments.m2});
    st.status.deltas_sent += 1;
  }
  st.status.batches += 1;
  st.status.env_steps += rows;
  st.status.episodes += b.episode_returns.size();
  self->send(st.consumer, std::move(b));
  b = trajectory_batch{}; // fill() starts the next one
  st.columns = 0;
}

// Assembles and sends batches while a request is open and segments are
// queued; arms the waker when it runs out.
void fill(feeder_actor* self) {
  auto& st = self->state;
  auto& a = *st.agent;
  while (st.collecting) {
    if (st.columns == 0 && st.batch.observations.empty())
      start_batch(st);
    while (st.columns < st.opts.num_envs) {
      if (a.take_segment(st.batch, st.columns, st.raw)) {
        ++st.columns;
        continue;
      }
      a.arm_waker(st.waker);
      if (!a.take_segment(st.batch, st.columns, st.raw))
        return; // woken by the game's next queued segment
      ++st.columns;
    }
    send_batch(self);
    ++st.sent_in_request;
    if (--st.remaining == 0) {
      st.collecting = false;
      st.pending.deliver(st.sent_in_request);
    }
  }
}

caf::behavior game_feeder(feeder_actor* self, game_feeder_options opts,
                          std::shared_ptr<game_agent> agent, caf::actor consumer,
                          caf::actor keeper) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.agent = std::move(agent);
  st.consumer = std::move(consumer);
  st.keeper = std::move(keeper);
  st.status.runner = st.opts.name;
  st.status.env_id = st.agent->env_id();
  convert_exceptions(self, fmt::format("game feeder '{}'", st.opts.name), st.opts.log,
                     [self](const caf::error& e) {
                       auto& s = self->state;
                       if (s.collecting) {
                         s.collecting = false;
                         s.pending.deliver(e);
                       }
                     });
  if (st.opts.num_envs == 0) {
    self->quit(to_caf_error(make_error(errc::invalid_argument,
                                       "game feeder '{}': num_envs must be >= 1, got 0",
                                       st.opts.name)));
    return {};
  }
  caf::actor_addr me = self->address();
  st.waker = st.agent->add_waker([me] {
    if (auto who = caf::actor_cast<caf::actor>(me))
      caf::anon_send(who, wake_atom::value);
  });
  if (st.waker == SIZE_MAX) {
    self->quit(to_caf_error(make_error(
      errc::unavailable, "game feeder '{}': the agent has no room for another feeder",
      st.opts.name)));
    return {};
  }
  self->attach_functor([agent = st.agent, id = st.waker] { agent->disarm_waker(id); });
  if (st.keeper) {
    // Declared before the first delta: messages between two actors keep their order.
    self
      ->request(st.keeper, caf::infinite, declare_atom::value, st.opts.stats_stream,
                static_cast<uint64_t>(st.agent->obs_dim()))
      .then([](uint64_t) {},
            [self](caf::error& e) {
              write_log(self->state.opts.log,
                        fmt::format("game feeder '{}': declaring stream '{}' failed: {}",
                                    self->state.opts.name, self->state.opts.stats_stream,
                                    error_message(self->system(), e)));
            });
  }
  return {
    [self](collect_atom, uint64_t batches) -> caf::result<uint64_t> {
      auto& s = self->state;
      if (s.collecting)
        return to_caf_error(make_error(
          errc::invalid_argument, "game feeder '{}' is already collecting", s.opts.name));
      if (batches == 0)
        return uint64_t{0};
      s.collecting = true;
      s.remaining = batches;
      s.sent_in_request = 0;
      s.pending = self->make_response_promise<uint64_t>();
      fill(self);
      return s.pending;
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
                             std::shared_ptr<game_agent> agent, caf::actor consumer,
                             caf::actor keeper) {
  return sys.spawn(game_feeder, std::move(opts), std::move(agent), std::move(consumer),
                   std::move(keeper));
}

result<std::vector<std::shared_ptr<learners::stats_view>>>
subscribe_agent_views(caf::actor_system& sys, const caf::actor& keeper,
                      const std::string& stream, size_t dim, size_t slots) {
  std::vector<std::shared_ptr<learners::stats_view>> out;
  for (size_t i = 0; i < slots; ++i) {
    auto v = subscribe_view(sys, keeper, stream, dim);
    if (!v)
      return v.err();
    out.push_back(std::move(*v));
  }
  return out;
}

} // namespace troupe::actors
