#include "runtime/cluster/gate.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <vector>

#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/replica.hpp"
#include "runtime/cluster/messages.hpp"
#include "runtime/cluster/node.hpp"

namespace troupe::cluster {

namespace {

// How long the gate waits for the middleman's answer about a peer's address.
constexpr auto address_timeout = std::chrono::seconds(2);
// Fencing a lost host at the keeper (a local actor: it answers at once
// unless the run is ending).
constexpr auto fence_timeout = std::chrono::seconds(10);

struct host_entry {
  caf::actor actor;
  bool member = false; // a host with learners: a member of the group
  uint64_t rank = 0; // its rank there (the coordinator's replica, when it has one, is 0)
  lost_host info;
  std::optional<door_info> door; // a member host's feed door, once open
  bool guest = false;            // an environment-only host fed through the doors
};

struct gate_state {
  gate_options opts;
  std::map<caf::actor_addr, host_entry> hosts;
  uint64_t joins = 0;
  uint64_t lost = 0;
  bool stopping = false;
  bool budget_told = false; // a host said the step budget is spent
  std::vector<caf::typed_response_promise<caf::ok_atom>> stop_waiters;
  // The rendezvous store the group meets through, the gets that wait for a
  // key, and the group's members so far.
  std::map<std::string, std::string> store_values;
  std::map<std::string, std::vector<caf::typed_response_promise<std::string>>>
    store_waiting;
  uint64_t members = 0;
  bool formed = false;
  uint64_t epoch = 0;           // the group's newest epoch
  uint64_t regroup_pending = 0; // an epoch whose failure is being handled
};

void report_hosts(caf::event_based_actor* self, gate_state& st) {
  if (st.opts.cast.metrics)
    // No host answers weights pushes any more, so no lost host's count of
    // steps not learned is known: 0 (docs/training.md, env_steps_lost).
    self->send(st.opts.cast.metrics, actors::hosts_atom::value,
               static_cast<uint64_t>(st.hosts.size()), st.lost, uint64_t{0});
}

// The member hosts' feed doors open now.
std::vector<door_info> open_doors(const gate_state& st) {
  std::vector<door_info> out;
  if (st.opts.own_door) {
    door_info own;
    own.name = "coordinator";
    own.actor = st.opts.own_door;
    out.push_back(std::move(own));
  }
  for (auto& [addr, h] : st.hosts)
    if (h.door)
      out.push_back(*h.door);
  return out;
}

// Tells every environment-only host fed through the doors which are open now.
void announce_doors(caf::event_based_actor* self, const gate_state& st) {
  const auto doors = open_doors(st);
  for (auto& [addr, h] : st.hosts)
    if (h.guest)
      self->send(h.actor, doors_atom::value, doors);
}

using regroup_atom = caf::atom_constant<caf::atom("regroup")>;

// How long the gate waits for a member host to answer for its replica.
constexpr auto member_ask_timeout = std::chrono::seconds(5);

// A coordinator out of the group: asks the
// member hosts, lowest rank first, for their replica's `Answer` to `atom`
// (its state, or its rounds) until one answers; an error when none does.
template <class Answer, class Atom>
void ask_members(caf::event_based_actor* self, std::vector<caf::actor> members,
                 size_t next, caf::typed_response_promise<Answer> rp, Atom atom) {
  if (next >= members.size()) {
    rp.deliver(actors::to_caf_error(
      make_error(errc::unavailable, "no member host of the data plane's group answered "
                                    "for its replica")));
    return;
  }
  const auto to = members[next];
  self->request(to, member_ask_timeout, atom)
    .then([rp](Answer& a) mutable { rp.deliver(std::move(a)); },
          [self, members = std::move(members), next, rp, atom](caf::error&) mutable {
            ask_members(self, std::move(members), next + 1, rp, atom);
          });
}

// The member hosts, lowest rank first.
std::vector<caf::actor> members_by_rank(const gate_state& st) {
  std::vector<std::pair<uint64_t, caf::actor>> ranked;
  for (auto& [addr, h] : st.hosts)
    if (h.member)
      ranked.emplace_back(h.rank, h.actor);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<caf::actor> out;
  for (auto& r : ranked)
    out.push_back(r.second);
  return out;
}

// Only this process's actors (the coordinator's standby replica) ask the gate
// for a member's state: the gate listens to the network.
bool from_here(caf::event_based_actor* self) {
  const auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

// The epoch of a rendezvous key ("epoch-N/...", the group's prefix); 0: none.
uint64_t epoch_of_key(const std::string& key) {
  static const std::string head = "epoch-";
  if (key.compare(0, head.size(), head) != 0)
    return 0;
  uint64_t epoch = 0;
  size_t i = head.size();
  for (; i < key.size() && key[i] >= '0' && key[i] <= '9' && epoch < (uint64_t{1} << 59);
       ++i)
    epoch = epoch * 10 + static_cast<uint64_t>(key[i] - '0');
  return i < key.size() && key[i] == '/' ? epoch : 0;
}

// The rendezvous of epochs before `epoch` can no longer complete (their
// members moved on): the gets still waiting there fail now instead of at
// their time-out, so that the forming threads of the old epochs end (a
// blocked one kept the actor system from shutting down at the run's end), and
// the old epochs' keys go.
void retire_old_epochs(gate_state& st, uint64_t epoch) {
  for (auto it = st.store_waiting.begin(); it != st.store_waiting.end();) {
    const uint64_t of = epoch_of_key(it->first);
    if (of == 0 || of >= epoch) {
      ++it;
      continue;
    }
    for (auto& rp : it->second)
      rp.deliver(actors::to_caf_error(
        make_error(errc::unavailable,
                   "rendezvous: the group of epoch {} is replaced by epoch {} (key '{}')",
                   of, epoch, it->first)));
    it = st.store_waiting.erase(it);
  }
  for (auto it = st.store_values.begin(); it != st.store_values.end();) {
    const uint64_t of = epoch_of_key(it->first);
    it = of != 0 && of < epoch ? st.store_values.erase(it) : std::next(it);
  }
}

// Opens the next epoch of the group with the member
// hosts alive now (every member host has joined, or one was lost): each is
// told its rank. A coordinator with learners takes rank 0; one without stays
// out of the group.
void form_group(caf::event_based_actor* self, std::shared_ptr<gate_state> st,
                const std::string& why) {
  st->formed = true;
  const uint64_t first = st->opts.own_group ? 1 : 0;
  uint64_t size = first;
  for (auto& [addr, h] : st->hosts)
    if (h.member)
      h.rank = size++;
  if (size == 0) {
    // The last member host is gone and the coordinator is not a member: no
    // group until a host with learners joins (it then forms at once, from
    // the standby's state).
    actors::write_log(st->opts.log, actors::log_level::warning,
                      fmt::format("cluster: the data plane has no member left ({}); its "
                                  "group forms again when a host with learners joins",
                                  why));
    return;
  }
  const uint64_t epoch = ++st->epoch;
  retire_old_epochs(*st, epoch);
  for (auto& [addr, h] : st->hosts)
    if (h.member)
      self->send(h.actor, form_atom::value, epoch, h.rank, size);
  actors::write_log(
    st->opts.log,
    fmt::format("cluster: the data plane's group forms{}: {} host(s){}, epoch {}, on "
                "{}{}",
                epoch == 1 ? "" : " again", size - first,
                st->opts.own_group ? " and the coordinator" : "", epoch,
                st->opts.plane.interface.empty() ? std::string{"the hosts' own addresses"}
                                                 : st->opts.plane.interface,
                why.empty() ? std::string{} : " (" + why + ")"));
  if (st->opts.own_group)
    st->opts.own_group->form(
      epoch,
      gate_store(self->system(), caf::actor_cast<caf::actor>(self), st->opts.token),
      group_options(st->opts.plane, epoch, 0, size));
}

std::string hosted(const lost_host& h) {
  if (h.learners.empty() && h.guest_runners > 0)
    return fmt::format("no learners, {} runners feeding the learner hosts' learners",
                       h.guest_runners);
  if (h.learners.empty())
    return "no learners";
  return fmt::format("learners {} ({} runners each)", fmt::join(h.learners, ", "),
                     h.runners_per_learner);
}

// Checks a join and answers it; `address` is the peer's "HOST:PORT".
void admit(caf::event_based_actor* self, std::shared_ptr<gate_state> st,
           join_request& req, const std::string& address,
           caf::typed_response_promise<welcome>& rp) {
  // errc::unavailable: for now (the worker retries); any other: for good.
  auto refuse = [&](const std::string& why, errc code = errc::invalid_argument) {
    actors::write_log(st->opts.log,
                      fmt::format("cluster: refused a join from {} (worker '{}'): {}",
                                  address, req.name, why));
    rp.deliver(actors::to_caf_error(
      make_error(code, "the coordinator refused the join: {}", why)));
  };
  if (req.protocol != protocol_version)
    return refuse(fmt::format("it speaks protocol {}, this coordinator speaks {}",
                              req.protocol, protocol_version));
  if (!same_token(req.token, st->opts.token))
    return refuse(req.token.empty() ? "no token given" : "wrong token");
  if (st->stopping)
    return refuse("the run is ending");
  if (!req.host)
    return refuse("no host actor in the join request");
  if (req.name.empty())
    return refuse("an empty worker name");
  if (req.name == "coordinator")
    // The coordinator's own learners and feed door go by it (hosts.csv,
    // the doors' list).
    return refuse("the worker name 'coordinator' is the coordinator's own");
  if (req.guest_runners > 0 && req.learners > 0)
    return refuse(fmt::format("it asks for {} learners and {} runners of its own: an "
                              "environment-only host has no learners",
                              req.learners, req.guest_runners));
  if (req.guest_runners > st->opts.learners_per_host_max)
    return refuse(fmt::format("it asks for {} runners, at most {} per host",
                              req.guest_runners, st->opts.learners_per_host_max));
  if (req.guest_runners == 0 && req.learners == 0)
    return refuse("it asks for no learners and no runners: it would host nothing");
  const bool to_doors = req.guest_runners > 0;
  if (to_doors && open_doors(*st).empty())
    return refuse("it hosts runners only, and no learner host has opened its feed door "
                  "yet",
                  errc::unavailable);
  if (req.learners > st->opts.learners_per_host_max)
    return refuse(fmt::format("it asks for {} learners, at most {} per host",
                              req.learners, st->opts.learners_per_host_max));
  const bool member = req.learners > 0;
  for (auto& [a, h] : st->hosts)
    if (h.info.name == req.name)
      // Most often the worker's own earlier life, killed and restarted
      // before the coordinator declared it lost: the worker asks again.
      return refuse(fmt::format("a live host of the run is named '{}' already (from {}); "
                                "an unresponsive one is declared lost after "
                                "cluster.timeout_ms",
                                req.name, h.info.address),
                    errc::unavailable);
  host_entry h;
  h.actor = req.host;
  if (member) {
    h.member = true;
    ++st->members;
  }
  h.info.name = req.name;
  h.info.incarnation = req.incarnation;
  h.info.address = address;
  h.info.runners_per_learner =
    req.runners_per_learner > 0 ? req.runners_per_learner : st->opts.runners_per_learner;
  h.info.guest_runners = req.guest_runners;
  for (uint64_t i = 0; i < req.learners; ++i)
    h.info.learners.push_back(fmt::format("{}.learner{}", req.name, i));
  welcome w;
  w.config_toml = st->opts.config_toml;
  w.run = st->opts.run;
  w.host_index = st->joins++;
  w.keeper = st->opts.cast.keeper;
  w.server = st->opts.cast.server;
  w.metrics = st->opts.cast.metrics;
  w.learner_names = h.info.learners;
  if (to_doors) {
    w.doors = open_doors(*st);
    h.guest = true;
  }
  w.weights = policy_push_of(*st->opts.store->latest());
  actors::write_log(st->opts.log,
                    fmt::format("cluster: host {} ({}) joined, incarnation {:016x}: {}, "
                                "device {}",
                                req.name, address, req.incarnation, hosted(h.info),
                                req.device));
  self->monitor(h.actor);
  const auto addr = h.actor.address();
  st->hosts.emplace(addr, std::move(h));
  report_hosts(self, *st);
  rp.deliver(std::move(w));
  // The group forms once cluster.hosts have joined (0: at the first); a
  // host that joins a formed group enters at the next epoch.
  if (member && st->formed)
    form_group(self, st, fmt::format("host {} joins", req.name));
  else if (member && (st->opts.plane.hosts == 0 || st->members == st->opts.plane.hosts))
    form_group(self, st, "");
}

caf::behavior gate(caf::event_based_actor* self, std::shared_ptr<gate_state> st) {
  // The middleman may hold the published gate past its end: its handles to
  // the keeper, the server and the metrics actor go when it ends, so that
  // those can be destroyed (the actor system waits for them).
  self->attach_functor([st] {
    st->opts.cast = actors::shared_actors{};
    st->opts.store.reset();
    st->opts.supervisor = nullptr;
    st->hosts.clear();
    st->stop_waiters.clear();
    st->store_waiting.clear();
    st->opts.own_group.reset();
    if (st->opts.own_door)
      caf::anon_send_exit(st->opts.own_door, caf::exit_reason::user_shutdown);
    st->opts.own_door = nullptr;
  });
  self->set_down_handler([self, st](caf::down_msg& down) {
    auto it = st->hosts.find(down.source);
    if (it == st->hosts.end())
      return;
    auto info = std::move(it->second.info);
    const bool had_door = it->second.door.has_value();
    const bool member = it->second.member;
    const uint64_t rank = it->second.rank;
    st->hosts.erase(it);
    // Once the run ends every host goes, however its connection closes.
    const bool left = st->stopping;
    if (left) {
      actors::write_log(
        st->opts.log, fmt::format("cluster: host {} ({}) left", info.name, info.address));
    } else {
      st->lost += 1;
      actors::write_log(
        st->opts.log, fmt::format("cluster: lost host {} ({}): it hosted {}; its count "
                                  "of env steps not learned is unknown; {} host(s) "
                                  "remain ({})",
                                  info.name, info.address, hosted(info), st->hosts.size(),
                                  actors::error_message(self->system(), down.reason)));
      // Whatever of its incarnation still reaches the keeper is refused.
      on_host_lost(self, st->opts.cast, info, st->opts.log);
      if (member && st->formed)
        // The survivors meet again in the next epoch and complete the round.
        form_group(self, st, fmt::format("host {} of rank {} was lost", info.name, rank));
      else if (member)
        st->members -= 1; // not formed yet: another host may take its place
    }
    if (had_door && !st->stopping)
      announce_doors(self, *st);
    report_hosts(self, *st);
    if (st->stopping && st->hosts.empty()) {
      for (auto& rp : st->stop_waiters)
        rp.deliver(caf::ok_atom::value);
      st->stop_waiters.clear();
    }
  });
  if (st->opts.own_group && st->opts.plane.hosts == 0)
    // A coordinator with learners waits for nobody: its group of one forms
    // now, and each host with learners that joins enters at the next epoch.
    form_group(self, st, "");
  return {
    [self, st](join_request& req) -> caf::result<welcome> {
      auto rp = self->make_response_promise<welcome>();
      caf::node_id node;
      if (req.host)
        node = req.host.node();
      else if (auto& sender = self->current_sender())
        node = sender->node();
      auto mm = self->system().middleman().actor_handle();
      self->request(mm, address_timeout, caf::get_atom::value, node)
        .then(
          [self, st, req, rp](const caf::node_id&, const std::string& host,
                              uint16_t port) mutable {
            admit(self, st, req,
                  host.empty() ? std::string{"unknown"}
                               : fmt::format("{}:{}", host, port),
                  rp);
          },
          [self, st, req, rp](caf::error&) mutable {
            admit(self, st, req, "unknown", rp);
          });
      return rp;
    },
    [self, st](actors::stop_atom) -> caf::result<caf::ok_atom> {
      st->stopping = true;
      for (auto& kv : st->hosts)
        self->send(kv.second.actor, actors::stop_atom::value);
      if (st->hosts.empty())
        return caf::ok_atom::value;
      auto rp = self->make_response_promise<caf::ok_atom>();
      st->stop_waiters.push_back(rp);
      return rp;
    },
    [self, st](actors::done_atom, const std::string& name) {
      // A host's learners spent algo.total_env_steps on their own count, which
      // the coordinator's count (from reports still on the way) may not show
      // yet: the run's budget is spent. Told to the supervisor as the metrics
      // actor tells it, once.
      if (st->stopping || st->budget_told)
        return;
      st->budget_told = true;
      actors::write_log(
        st->opts.log, fmt::format("cluster: host {} spent the step budget "
                                  "(algo.total_env_steps) on its own count; the run ends",
                                  name));
      if (st->opts.supervisor)
        self->send(st->opts.supervisor, actors::done_atom::value);
    },
    [self, st](epoch_failed_atom, const std::string& token, uint64_t epoch,
               const std::string& host, const std::string& why) {
      // A member's operation failed in `epoch`: a member left or froze. The
      // next epoch opens after a short grace, so that the connection's loss
      // (a down message) is seen first and the lost host left out.
      if (!same_token(token, st->opts.token) || !st->formed || epoch != st->epoch ||
          st->regroup_pending == epoch || st->stopping)
        return;
      st->regroup_pending = epoch;
      actors::write_log(st->opts.log, actors::log_level::warning,
                        fmt::format("cluster: {} reports that the data plane's epoch {} "
                                    "failed: {}",
                                    host, epoch, why));
      const auto grace = std::chrono::milliseconds(std::min<int64_t>(
        500, std::max<int64_t>(50, st->opts.plane.round_timeout.count() / 10)));
      self->delayed_send(self, grace, regroup_atom::value, epoch);
    },
    [self, st](regroup_atom, uint64_t epoch) {
      if (epoch == st->epoch && !st->stopping)
        form_group(self, st, fmt::format("epoch {} failed", epoch));
    },
    [self, st](store_set_atom, const std::string& token, const std::string& key,
               const std::string& value) -> caf::result<caf::ok_atom> {
      // Only a holder of the run's token writes where the group meets.
      if (!same_token(token, st->opts.token))
        return actors::to_caf_error(make_error(
          errc::invalid_argument, "rendezvous: wrong token for key '{}'", key));
      if (const uint64_t of = epoch_of_key(key); of != 0 && of < st->epoch)
        return actors::to_caf_error(make_error(
          errc::unavailable,
          "rendezvous: the group of epoch {} is replaced by epoch {} (key '{}')", of,
          st->epoch, key));
      st->store_values[key] = value;
      if (auto it = st->store_waiting.find(key); it != st->store_waiting.end()) {
        for (auto& rp : it->second)
          rp.deliver(value);
        st->store_waiting.erase(it);
      }
      return caf::ok_atom::value;
    },
    [self, st](store_get_atom, const std::string& token,
               const std::string& key) -> caf::result<std::string> {
      if (!same_token(token, st->opts.token))
        return actors::to_caf_error(make_error(
          errc::invalid_argument, "rendezvous: wrong token for key '{}'", key));
      if (auto it = st->store_values.find(key); it != st->store_values.end())
        return it->second;
      if (const uint64_t of = epoch_of_key(key); of != 0 && of < st->epoch)
        return actors::to_caf_error(make_error(
          errc::unavailable,
          "rendezvous: the group of epoch {} is replaced by epoch {} (key '{}')", of,
          st->epoch, key));
      auto rp = self->make_response_promise<std::string>();
      st->store_waiting[key].push_back(rp);
      return rp;
    },
    [self, st](actors::state_atom a) -> caf::result<actors::parameter_server_state> {
      // The coordinator's standby replica asks for the weights, Adam state
      // and counters of a member (a checkpoint, a joining host's start).
      if (!from_here(self))
        return actors::to_caf_error(
          make_error(errc::invalid_argument, "a replica's state is asked for locally"));
      auto rp = self->make_response_promise<actors::parameter_server_state>();
      ask_members(self, members_by_rank(*st), 0, rp, a);
      return rp;
    },
    [self, st](actors::rounds_atom a) -> caf::result<actors::replica_status> {
      if (!from_here(self))
        return actors::to_caf_error(
          make_error(errc::invalid_argument, "a replica's rounds are asked for locally"));
      auto rp = self->make_response_promise<actors::replica_status>();
      ask_members(self, members_by_rank(*st), 0, rp, a);
      return rp;
    },
    [self, st](final_state_atom, const std::string& token, const std::string& host,
               actors::parameter_server_state& state, actors::replica_status& rounds) {
      // A member host's replica as it leaves: the coordinator's standby keeps
      // the newest, for the final checkpoint and the closing lines.
      if (!same_token(token, st->opts.token) || st->opts.own_group ||
          !st->opts.cast.server)
        return;
      actors::write_log(st->opts.log, actors::log_level::info,
                        fmt::format("cluster: host {} leaves with its replica at version "
                                    "{} after {} rounds",
                                    host, state.version, rounds.rounds));
      caf::anon_send(st->opts.cast.server, actors::state_atom::value, std::move(state));
      caf::anon_send(st->opts.cast.server, actors::rounds_atom::value, std::move(rounds));
    },
    [self, st](door_atom, const std::string& token, door_info& door) {
      // A member host's feed door is open: the environment-only hosts learn of it.
      if (!same_token(token, st->opts.token) || st->stopping)
        return;
      for (auto& [addr, h] : st->hosts)
        if (h.member && h.info.name == door.name) {
          actors::write_log(st->opts.log, actors::log_level::info,
                            fmt::format("cluster: learner host {} opened its feed door "
                                        "at {}:{}",
                                        door.name, door.host, door.port));
          h.door = std::move(door);
          announce_doors(self, *st);
          return;
        }
    },
    [st](actors::status_atom) -> caf::result<uint64_t, uint64_t> {
      return {static_cast<uint64_t>(st->hosts.size()), st->lost};
    },
  };
}

} // namespace

void on_host_lost(caf::event_based_actor* gate, const actors::shared_actors& cast,
                  const lost_host& host, const actors::log_sink& log) {
  if (host.incarnation == 0)
    return;
  const std::string who =
    fmt::format("host {} (incarnation {:016x})", host.name, host.incarnation);
  if (cast.keeper)
    gate
      ->request(cast.keeper, fence_timeout, actors::fence_atom::value, host.name,
                host.incarnation)
      .then(
        [log, who](const actors::delta_acks& acks) {
          std::vector<std::string> streams;
          for (auto& [stream, last] : acks.last)
            streams.push_back(fmt::format("{} through delta {}", stream, last));
          actors::write_log(
            log,
            fmt::format("cluster: fenced {} at the statistics keeper: merged {}", who,
                        streams.empty() ? std::string{"nothing"}
                                        : fmt::format("{}", fmt::join(streams, ", "))));
        },
        [gate, log, who](caf::error& e) {
          actors::write_log(log,
                            fmt::format("cluster: could not fence {} at the statistics "
                                        "keeper: {}",
                                        who, actors::error_message(gate->system(), e)));
        });
}

caf::actor spawn_gate(caf::actor_system& sys, gate_options opts) {
  auto st = std::make_shared<gate_state>();
  st->opts = std::move(opts);
  auto g = sys.spawn(gate, st);
  if (st->opts.own_group)
    st->opts.own_group->on_failure([addr = g.address(), token = st->opts.token](
                                     uint64_t epoch, const std::string& why) {
      if (auto a = caf::actor_cast<caf::actor>(addr))
        caf::anon_send(a, epoch_failed_atom::value, token, epoch,
                       std::string{"the coordinator"}, why);
    });
  return g;
}

} // namespace troupe::cluster
