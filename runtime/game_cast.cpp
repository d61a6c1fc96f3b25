#include "runtime/game_cast.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace troupe::runtime {

result<std::shared_ptr<edge::game_agent>>
game_agent_source::wait(std::chrono::milliseconds timeout) {
  base::mutex_lock lock(mutex);
  const bool made = lock.wait_for(ready, timeout, [&]() TROUPE_REQUIRES(mutex) {
    return held != nullptr || !failure.empty();
  });
  if (held)
    return held;
  return make_error(
    errc::unavailable, "{}",
    made ? failure
         : fmt::format("the cast made no game agent within {} ms", timeout.count()));
}

std::shared_ptr<edge::game_agent> game_agent_source::agent() {
  base::mutex_lock lock(mutex);
  return held;
}

runner_slot_factory game_feeder_factory(std::shared_ptr<game_agent_source> g) {
  return [g](caf::actor_system& sys, const runner_slot& slot) -> caf::actor {
    std::shared_ptr<edge::game_agent> made;
    {
      base::mutex_lock lock(g->mutex);
      if (!g->held) {
        std::vector<std::shared_ptr<learners::stats_view>> views;
        if (slot.obs_norm) {
          auto subscribed =
            edge::subscribe_agent_views(sys, slot.request.keeper, "obs",
                                        static_cast<size_t>(slot.spec.obs_dim), g->slots);
          if (!subscribed) {
            g->failure = subscribed.err().message;
            g->ready.notify_all();
            return caf::actor{};
          }
          views = std::move(*subscribed);
        }
        edge::game_agent_options o;
        o.name = g->name;
        o.env_id = g->env_id;
        o.slots = g->slots;
        o.steps_per_segment = slot.steps_per_batch;
        // A capacity in transitions, as whole segments (at least one).
        if (g->queue_capacity_transitions > 0)
          o.queue_capacity = std::max<size_t>(
            1, (g->queue_capacity_transitions + slot.steps_per_batch - 1) /
                 slot.steps_per_batch);
        o.block_when_full = g->block_when_full;
        o.seed = slot.seed;
        o.obs_epsilon = slot.obs_epsilon;
        o.obs_clip = slot.obs_clip;
        auto created = edge::game_agent::create(o, slot.store, std::move(views));
        if (!created) {
          g->failure = created.err().message;
          g->ready.notify_all();
          return caf::actor{};
        }
        g->held = std::move(*created);
        if (g->on_made)
          g->on_made(g->held);
        g->ready.notify_all();
      }
      made = g->held;
    }
    actors::game_feeder_options fo;
    fo.name = slot.request.name;
    fo.num_envs = slot.envs;
    fo.log = slot.log;
    return actors::spawn_game_feeder(sys, fo, made->queue(), slot.request.consumer,
                                     slot.request.keeper);
  };
}

} // namespace troupe::runtime
