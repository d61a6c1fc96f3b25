#include "actors/stats_relay.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace troupe::actors {

namespace {

// One stream as the relay holds it.
struct relayed_stream {
  bool asked = false;                             // subscribed at the keeper, or asking
  std::optional<learners::stats_snapshot> latest; // the newest snapshot seen
  std::vector<caf::actor> views;                  // the host's subscribers
  std::vector<caf::response_promise> waiting;     // subscribers before the first answer
};

struct relay_state {
  caf::actor keeper;
  std::map<std::string, relayed_stream> streams;
  static inline const char* name = "stats_relay";
};

using relay_actor = caf::stateful_actor<relay_state>;

// Keeps `s` when it is newer than what the stream has, and hands it on.
void take(relay_actor* self, learners::stats_snapshot s) {
  auto& rs = self->state.streams[s.stream];
  if (rs.latest && rs.latest->version > s.version)
    return; // an older snapshot overtaken by a newer one: the views keep the newer
  auto msg = caf::make_message(s);
  for (auto& v : rs.views)
    self->send(v, msg);
  rs.latest = std::move(s);
}

caf::behavior stats_relay(relay_actor* self, caf::actor keeper) {
  self->state.keeper = keeper;
  self->monitor(keeper);
  self->set_down_handler([self](caf::down_msg& down) {
    if (down.source == self->state.keeper.address()) {
      self->quit(down.reason);
      return;
    }
    for (auto& kv : self->state.streams) {
      auto& views = kv.second.views;
      views.erase(
        std::remove_if(views.begin(), views.end(),
                       [&](const caf::actor& a) { return a.address() == down.source; }),
        views.end());
    }
  });
  return {
    [self](subscribe_atom,
           const std::string& name) -> caf::result<learners::stats_snapshot> {
      auto& rs = self->state.streams[name];
      if (auto sender = caf::actor_cast<caf::actor>(self->current_sender());
          sender &&
          std::find(rs.views.begin(), rs.views.end(), sender) == rs.views.end()) {
        rs.views.push_back(sender);
        self->monitor(sender);
      }
      if (rs.latest)
        return *rs.latest;
      auto rp = self->make_response_promise();
      rs.waiting.push_back(rp);
      if (!rs.asked) {
        rs.asked = true;
        self->request(self->state.keeper, caf::infinite, subscribe_atom::value, name)
          .then(
            [self, name](learners::stats_snapshot& s) {
              // Every view so far is waiting for this answer: it gets it as
              // the answer only (a publication may have come first).
              auto& rs = self->state.streams[name];
              if (!rs.latest || rs.latest->version <= s.version)
                rs.latest = std::move(s);
              for (auto& w : rs.waiting)
                w.deliver(*rs.latest);
              rs.waiting.clear();
            },
            [self, name](caf::error& e) {
              // The keeper refused (no such stream): every waiting view hears
              // why, and the next subscription asks again.
              auto& rs = self->state.streams[name];
              for (auto& w : rs.waiting)
                w.deliver(e);
              rs.waiting.clear();
              rs.asked = false;
            });
      }
      return caf::delegated<learners::stats_snapshot>();
    },
    [self](snapshot_atom, const std::string& name) {
      return self->delegate(self->state.keeper, snapshot_atom::value, name);
    },
    [self](learners::stats_snapshot& s) { take(self, std::move(s)); },
  };
}

} // namespace

caf::actor spawn_stats_relay(caf::actor_system& sys, caf::actor keeper) {
  return sys.spawn(stats_relay, std::move(keeper));
}

} // namespace troupe::actors
