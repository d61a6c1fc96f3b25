#include "runtime/cluster/feed.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "actors/atoms.hpp"
#include "actors/messages.hpp"

namespace troupe::cluster {

namespace {

// How long a door waits for its supervisor's learners and for a subscriber to
// take a version, and how long a feed waits for a door's answer.
constexpr auto door_ask_timeout = std::chrono::seconds(10);
// How often a feed tries again a door it could not reach, or looks for a door
// for runners that have none.
constexpr auto feed_retry = std::chrono::seconds(1);
// How long runners wait for the doors still being connected to before they
// are handed to those connected already (so that they spread over all the
// doors when every door answers at once).
constexpr auto connect_patience = std::chrono::seconds(2);

using retry_atom = caf::atom_constant<caf::atom("feed_retry")>;
// A connection attempt's outcome: (connected_atom, name, host, port, door or
// null, why not).
using connected_atom = caf::atom_constant<caf::atom("feed_conn")>;

caf::error refused(const std::string& why) {
  return actors::to_caf_error(make_error(errc::invalid_argument, "{}", why));
}

// -- the door (a learner host) ---------------------------------------------------

struct subscriber {
  caf::actor actor;
  uint64_t sent_version = 0; // newest version it has or is being sent
  bool in_flight = false;
};

struct door_state {
  door_options opts;
  uint64_t next = 0; // round robin over the live learners
  std::map<caf::actor_addr, subscriber> subscribers;
};

// Sends the newest version to `addr` unless it has it or a push is under way.
void push_newest(caf::event_based_actor* self, std::shared_ptr<door_state> st,
                 const caf::actor_addr& addr) {
  auto it = st->subscribers.find(addr);
  if (it == st->subscribers.end() || it->second.in_flight)
    return;
  auto snap = st->opts.store->latest();
  if (!snap || snap->version <= it->second.sent_version)
    return;
  policy_push p = policy_push_of(*snap);
  it->second.in_flight = true;
  it->second.sent_version = snap->version;
  self->request(it->second.actor, door_ask_timeout, std::move(p))
    .then(
      [self, st, addr](uint64_t) { // the version the host took
        if (auto s = st->subscribers.find(addr); s != st->subscribers.end()) {
          s->second.in_flight = false;
          push_newest(self, st, addr);
        }
      },
      [st, addr](caf::error&) {
        // A subscriber that is gone: its down message follows.
        if (auto s = st->subscribers.find(addr); s != st->subscribers.end())
          s->second.in_flight = false;
      });
}

caf::behavior door(caf::event_based_actor* self, std::shared_ptr<door_state> st) {
  self->attach_functor([st] {
    st->subscribers.clear();
    st->opts.store.reset();
    st->opts.supervisor = nullptr;
  });
  self->set_down_handler(
    [st](caf::down_msg& down) { st->subscribers.erase(down.source); });
  return {
    [self, st](actors::runner_atom, const std::string& token, const std::string& name,
               caf::actor& runner, uint64_t handoff) -> caf::result<uint64_t> {
      if (!same_token(token, st->opts.token))
        return refused(fmt::format("door of host {}: guest runner '{}' refused: wrong "
                                   "token",
                                   st->opts.host, name));
      if (!runner || name.empty())
        return refused(fmt::format("door of host {}: a guest runner needs a name and "
                                   "an actor",
                                   st->opts.host));
      auto rp = self->make_response_promise<uint64_t>();
      self->request(st->opts.supervisor, door_ask_timeout, actors::learners_atom::value)
        .then(
          [st, rp, name, runner, handoff](std::vector<caf::actor>& learners) mutable {
            learners.erase(std::remove(learners.begin(), learners.end(), caf::actor{}),
                           learners.end());
            if (learners.empty()) {
              rp.deliver(
                actors::to_caf_error(make_error(errc::unavailable,
                                                "door of host {}: no live learner for "
                                                "guest runner '{}'",
                                                st->opts.host, name)));
              return;
            }
            const uint64_t i = st->next++ % learners.size();
            caf::anon_send(learners[i], actors::runner_atom::value, name, runner,
                           handoff);
            rp.deliver(i);
          },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
      return rp;
    },
    [self, st](actors::subscribe_atom, const std::string& token,
               caf::actor& taker) -> caf::result<uint64_t> {
      if (!same_token(token, st->opts.token))
        return refused(fmt::format("door of host {}: a policy subscription refused: "
                                   "wrong token",
                                   st->opts.host));
      if (!taker)
        return refused(fmt::format("door of host {}: a policy subscription needs an "
                                   "actor",
                                   st->opts.host));
      const auto addr = taker.address();
      if (st->subscribers.count(addr) == 0) {
        self->monitor(taker);
        st->subscribers[addr].actor = std::move(taker);
      }
      push_newest(self, st, addr);
      auto snap = st->opts.store->latest();
      return snap ? snap->version : uint64_t{0};
    },
    [self, st](actors::publish_atom, uint64_t) {
      std::vector<caf::actor_addr> addrs;
      for (auto& kv : st->subscribers)
        addrs.push_back(kv.first);
      for (auto& a : addrs)
        push_newest(self, st, a);
    },
  };
}

// -- the feed (an environment-only host) -----------------------------------------

struct door_slot {
  door_info info;
  caf::actor actor;                            // connected; null: not (yet, or no longer)
  bool connecting = false;                     // an attempt is under way
  std::chrono::steady_clock::time_point since; // ... since then
  bool said_unreachable = false;
};

struct guest_slot {
  caf::actor runner;
  std::string door;      // the door it was handed to; empty: none yet
  uint64_t handoffs = 0; // how often it was handed to a door (its learner
                         // follows the newest: actors/env_runner.hpp)
};

struct feed_state {
  guest_feed_options opts;
  std::map<std::string, door_slot> doors;   // by learner host name
  std::map<std::string, guest_slot> guests; // by runner name
  std::string policy_door;                  // subscribed there; empty: nowhere
  bool retry_pending = false;
  bool said_no_door = false;
  bool stopping = false; // the run ends: the learner hosts leave, nothing moves
};

void feed_log(const feed_state& st, actors::log_level level, const std::string& line) {
  actors::write_log(st.opts.log, level,
                    fmt::format("troupe: worker {}: {}", st.opts.host, line));
}

void schedule_retry(caf::event_based_actor* self, feed_state& st) {
  if (st.retry_pending)
    return;
  st.retry_pending = true;
  self->delayed_send(self, feed_retry, retry_atom::value);
}

// Starts a connection attempt to every listed door not connected yet, each on
// a thread of its own (connecting blocks, as long as TCP takes to give up on
// an address that does not answer), so that the feed goes on meanwhile; each
// attempt answers (connected_atom, ...).
void connect_doors(caf::event_based_actor* self, feed_state& st) {
  for (auto& [name, d] : st.doors) {
    if (d.actor || d.connecting)
      continue;
    d.connecting = true;
    d.since = std::chrono::steady_clock::now();
    if (d.info.actor) {
      // The coordinator's own door: no connection to make.
      self->send(self, connected_atom::value, name, d.info.host, d.info.port,
                 d.info.actor, std::string{});
      continue;
    }
    self->system().spawn([feed = caf::actor_cast<caf::actor>(self), name = name,
                          info = d.info,
                          node = st.opts.node](caf::blocking_actor* attempt) {
      auto a = connect_gate(attempt->system(), endpoint{info.host, info.port}, node);
      if (a)
        attempt->send(feed, connected_atom::value, name, info.host, info.port, *a,
                      std::string{});
      else
        attempt->send(feed, connected_atom::value, name, info.host, info.port,
                      caf::actor{}, actors::error_message(attempt->system(), a.error()));
    });
  }
}

// The connected door with the fewest of this host's runners; empty: none.
std::string least_fed(const feed_state& st) {
  std::string best;
  size_t best_count = 0;
  for (auto& [name, d] : st.doors) {
    if (!d.actor)
      continue;
    const size_t n = static_cast<size_t>(
      std::count_if(st.guests.begin(), st.guests.end(),
                    [&, n = name](const auto& g) { return g.second.door == n; }));
    if (best.empty() || n < best_count) {
      best = name;
      best_count = n;
    }
  }
  return best;
}

void hand_runner(caf::event_based_actor* self, std::shared_ptr<feed_state> st,
                 const std::string& runner_name);

// Hands every runner without a door to one; subscribes for the policy where
// there is no subscription.
void settle(caf::event_based_actor* self, std::shared_ptr<feed_state> st) {
  const auto now = std::chrono::steady_clock::now();
  const bool patient =
    std::any_of(st->doors.begin(), st->doors.end(), [&](const auto& d) {
      return d.second.connecting && now - d.second.since < connect_patience;
    });
  if (patient) {
    // A door being connected to may answer soon: its outcome (or the next
    // tick) settles the runners.
    schedule_retry(self, *st);
    return;
  }
  std::vector<std::string> waiting;
  for (auto& [name, g] : st->guests)
    if (g.door.empty() && g.runner)
      waiting.push_back(name);
  for (auto& name : waiting)
    hand_runner(self, st, name);
  if (st->policy_door.empty()) {
    const auto to = least_fed(*st);
    if (!to.empty()) {
      st->policy_door = to;
      self
        ->request(st->doors[to].actor, door_ask_timeout, actors::subscribe_atom::value,
                  st->opts.token, st->opts.policy_taker)
        .then(
          [st, to](uint64_t version) {
            feed_log(*st, actors::log_level::info,
                     fmt::format("takes the policy versions of learner host {} (at "
                                 "version {} now)",
                                 to, version));
          },
          [self, st, to](caf::error& e) {
            feed_log(*st, actors::log_level::warning,
                     fmt::format("learner host {} refused the policy subscription: {}",
                                 to, actors::error_message(self->system(), e)));
            if (st->policy_door == to)
              st->policy_door.clear();
            schedule_retry(self, *st);
          });
    }
  }
  const bool stranded = std::any_of(st->guests.begin(), st->guests.end(),
                                    [](const auto& g) { return g.second.door.empty(); });
  const bool connecting = std::any_of(st->doors.begin(), st->doors.end(),
                                      [](const auto& d) { return d.second.connecting; });
  // While a connection is under way its outcome settles the runners again.
  if (stranded && least_fed(*st).empty() && !connecting) {
    if (!st->said_no_door)
      feed_log(*st, actors::log_level::warning,
               "no learner host's feed door is reachable; its runners wait for one");
    st->said_no_door = true;
    schedule_retry(self, *st);
  }
}

void hand_runner(caf::event_based_actor* self, std::shared_ptr<feed_state> st,
                 const std::string& runner_name) {
  auto g = st->guests.find(runner_name);
  if (g == st->guests.end() || !g->second.runner)
    return;
  const auto to = least_fed(*st);
  if (to.empty())
    return; // settle says so and tries again
  g->second.door = to;
  g->second.handoffs += 1;
  st->said_no_door = false;
  self
    ->request(st->doors[to].actor, door_ask_timeout, actors::runner_atom::value,
              st->opts.token, runner_name, g->second.runner, g->second.handoffs)
    .then(
      [st, to, runner_name](uint64_t learner) {
        feed_log(*st, actors::log_level::info,
                 fmt::format("runner '{}' feeds learner {} of learner host {}",
                             runner_name, learner, to));
      },
      [self, st, to, runner_name](caf::error& e) {
        feed_log(*st, actors::log_level::warning,
                 fmt::format("learner host {} did not take runner '{}': {}; handing it "
                             "on",
                             to, runner_name, actors::error_message(self->system(), e)));
        if (auto g = st->guests.find(runner_name);
            g != st->guests.end() && g->second.door == to)
          g->second.door.clear();
        schedule_retry(self, *st);
      });
}

// Once a door connects (a learner host that joined after this host's runners
// were handed out): runners move from the door with the most to the one with
// the fewest until they differ by one at most. The learner that takes a
// runner over ends the old learner's request, and the old learner lets it go.
void rebalance(caf::event_based_actor* self, std::shared_ptr<feed_state> st) {
  for (;;) {
    std::map<std::string, std::vector<std::string>> fed; // door -> its runners
    for (auto& [name, d] : st->doors)
      if (d.actor)
        fed[name];
    for (auto& [rn, g] : st->guests)
      if (auto it = fed.find(g.door); it != fed.end())
        it->second.push_back(rn);
    if (fed.size() < 2)
      return;
    auto most =
      std::max_element(fed.begin(), fed.end(), [](const auto& a, const auto& b) {
        return a.second.size() < b.second.size();
      });
    auto fewest =
      std::min_element(fed.begin(), fed.end(), [](const auto& a, const auto& b) {
        return a.second.size() < b.second.size();
      });
    if (most->second.size() <= fewest->second.size() + 1)
      return;
    const std::string runner = most->second.back();
    feed_log(*st, actors::log_level::info,
             fmt::format("runner '{}' moves from learner host {} to {}", runner,
                         most->first, fewest->first));
    st->guests[runner].door.clear();
    hand_runner(self, st, runner); // to the door with the fewest
  }
}

// A door is gone (its host lost, or no longer listed): its runners and the
// policy subscription go elsewhere.
void lose_door(caf::event_based_actor* self, std::shared_ptr<feed_state> st,
               const std::string& name, const std::string& why) {
  if (st->stopping)
    return;
  size_t moved = 0;
  for (auto& [rn, g] : st->guests)
    if (g.door == name) {
      g.door.clear();
      ++moved;
    }
  if (st->policy_door == name)
    st->policy_door.clear();
  feed_log(*st, actors::log_level::warning,
           fmt::format("lost the feed door of learner host {} ({}); {} runner(s) go to "
                       "the other learner hosts",
                       name, why, moved));
  settle(self, st);
}

caf::behavior guest_feed(caf::event_based_actor* self, std::shared_ptr<feed_state> st) {
  self->attach_functor([st] {
    st->doors.clear();
    st->guests.clear();
    st->opts.policy_taker = nullptr;
  });
  self->set_down_handler([self, st](caf::down_msg& down) {
    for (auto& [name, d] : st->doors)
      if (d.actor && d.actor.address() == down.source) {
        d.actor = nullptr;
        const auto n = name;
        lose_door(self, st, n, actors::error_message(self->system(), down.reason));
        return;
      }
  });
  for (auto& d : st->opts.doors)
    st->doors[d.name].info = d;
  connect_doors(self, *st);
  return {
    [self, st](actors::runner_atom, const std::string& name, caf::actor& runner) {
      // From this host's supervisor: a runner, new or restarted.
      auto& g = st->guests[name];
      g.runner = std::move(runner);
      g.door.clear();
      settle(self, st);
    },
    [self, st](doors_atom, std::vector<door_info>& doors) {
      if (st->stopping)
        return;
      std::map<std::string, door_info> listed;
      for (auto& d : doors)
        listed[d.name] = d;
      std::vector<std::string> gone;
      for (auto& [name, d] : st->doors) {
        auto it = listed.find(name);
        if (it == listed.end() || it->second.host != d.info.host ||
            it->second.port != d.info.port)
          gone.push_back(name);
      }
      for (auto& name : gone) {
        const bool was_connected = static_cast<bool>(st->doors[name].actor);
        if (was_connected)
          self->demonitor(st->doors[name].actor);
        st->doors.erase(name);
        if (was_connected)
          lose_door(self, st, name, "the coordinator no longer lists it");
      }
      for (auto& [name, d] : listed)
        if (st->doors.count(name) == 0)
          st->doors[name].info = d;
      connect_doors(self, *st);
      settle(self, st);
    },
    [self, st](connected_atom, const std::string& name, const std::string& host,
               uint16_t port, caf::actor& door, const std::string& why) {
      auto it = st->doors.find(name);
      if (it == st->doors.end() || it->second.info.host != host ||
          it->second.info.port != port)
        return; // no longer listed (or listed elsewhere): a new attempt is under way
      auto& d = it->second;
      d.connecting = false;
      if (st->stopping || d.actor)
        return;
      if (!door) {
        if (!d.said_unreachable)
          feed_log(*st, actors::log_level::warning,
                   fmt::format("cannot reach the feed door of learner host {} at {}:{} "
                               "({}); trying again",
                               name, host, port, why));
        d.said_unreachable = true;
        schedule_retry(self, *st);
        return;
      }
      d.actor = std::move(door);
      d.said_unreachable = false;
      self->monitor(d.actor);
      settle(self, st);
      rebalance(self, st);
    },
    [self, st](retry_atom) {
      st->retry_pending = false;
      if (st->stopping)
        return;
      connect_doors(self, *st);
      settle(self, st);
    },
    [st](actors::stop_atom) { st->stopping = true; },
  };
}

} // namespace

caf::actor spawn_door(caf::actor_system& sys, door_options opts) {
  auto st = std::make_shared<door_state>();
  st->opts = std::move(opts);
  auto store = st->opts.store;
  auto d = sys.spawn(door, st);
  // Every new version is announced to the door (on the replica's thread; the
  // door reads the store itself and coalesces).
  caf::actor_addr addr = d.address();
  store->subscribe([addr](const std::shared_ptr<const actors::policy_snapshot>& s) {
    auto a = caf::actor_cast<caf::actor>(addr);
    if (!a)
      return false;
    caf::anon_send(a, actors::publish_atom::value, s->version);
    return true;
  });
  return d;
}

caf::actor spawn_guest_feed(caf::actor_system& sys, guest_feed_options opts) {
  auto st = std::make_shared<feed_state>();
  st->opts = std::move(opts);
  return sys.spawn(guest_feed, st);
}

} // namespace troupe::cluster
