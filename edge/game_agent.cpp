#include "edge/game_agent.hpp"

#include "actors/stats_keeper.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>

#include <fmt/format.h>

#include "base/latest_value.hpp"
#include "base/mutex.hpp"
#include "base/rng.hpp"
#include "learners/mlp.hpp"
#include "learners/rollout.hpp"

namespace troupe::edge {

namespace {

using actors::game_segment;
using actors::policy_snapshot;
using actors::policy_store;
using actors::segment_queue;

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
  game_segment* seg = nullptr;
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

} // namespace

struct game_agent::impl {
  explicit impl(game_agent_options o) : opts(std::move(o)) {}

  game_agent_options opts;
  std::shared_ptr<policy_store> store;
  learners::model_spec spec;
  size_t od = 0, ad = 0;
  bool discrete = false;
  std::shared_ptr<slot_array> slots;
  std::shared_ptr<segment_queue> queue; // complete segments, for the feeders
  std::atomic<bool> is_closed{false};
  base::mutex returns_mtx;
  std::array<double, 100> recent TROUPE_GUARDED_BY(returns_mtx) = {};
  size_t recent_count TROUPE_GUARDED_BY(returns_mtx) = 0;
  size_t recent_next TROUPE_GUARDED_BY(returns_mtx) = 0;

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
    game_segment& g = *s.seg;
    const size_t row = g.rows;
    std::copy(raw, raw + od, &g.raw[row * od]);
    std::copy(seen, seen + od, &g.obs[row * od]);
    g.stats_version = std::min(g.stats_version, stats_version);
    return row;
  }

  // Queues the slot's complete segment (or drops it) and gives the slot a
  // fresh one.
  void finish(slot_state& s) {
    game_segment* g = s.seg;
    if (queue->push(g)) {
      s.seg = queue->fresh();
      s.segments.add();
    } else {
      s.dropped.add(g->transitions);
      s.dropped_segments.add();
      g->reset();
    }
  }

  // Samples the action of `row` of the slot's segment from `head` (logits or
  // means of one observation) with the slot's generator.
  void sample(slot_state& s, const learners::actor_critic& model, const float* head,
              size_t row, float* action_out) {
    game_segment& g = *s.seg;
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
  auto p = std::make_unique<impl>(std::move(opts));
  p->store = std::move(store);
  p->spec = spec;
  p->od = od;
  p->discrete = spec.action == learners::action_kind::discrete;
  p->ad = p->discrete ? 1 : static_cast<size_t>(spec.act_dim);
  actors::segment_queue_options q;
  q.env_id = p->opts.env_id;
  q.steps = p->opts.steps_per_segment;
  q.obs_dim = p->od;
  q.action_dim = p->ad;
  q.normalized = !views.empty();
  q.capacity = p->opts.queue_capacity;
  q.writers = p->opts.slots;
  q.block_when_full = p->opts.block_when_full;
  q.block_timeout = p->opts.block_timeout;
  p->queue = std::make_shared<segment_queue>(std::move(q));
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
    s->seg = p->queue->fresh();
    p->slots->slots.push_back(std::move(s));
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
  game_segment& g = *s.seg;
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
  game_segment& h = *s.seg; // a new segment when the episode ended on the last row
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
  game_segment& g = *s.seg;
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
  m.queue->close();
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

const std::shared_ptr<segment_queue>& game_agent::queue() const noexcept {
  return impl_->queue;
}

result<std::vector<std::shared_ptr<learners::stats_view>>>
subscribe_agent_views(caf::actor_system& sys, const caf::actor& keeper,
                      const std::string& stream, size_t dim, size_t slots) {
  std::vector<std::shared_ptr<learners::stats_view>> out;
  for (size_t i = 0; i < slots; ++i) {
    auto v = actors::subscribe_view(sys, keeper, stream, dim);
    if (!v)
      return v.err();
    out.push_back(std::move(*v));
  }
  return out;
}

} // namespace troupe::edge
