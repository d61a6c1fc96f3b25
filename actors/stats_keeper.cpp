#include "actors/stats_keeper.hpp"
#include "actors/exceptions.hpp"
#include "actors/log.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <optional>
#include <map>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "learners/stats_streams.hpp"
#include "base/mutex.hpp"

namespace troupe::actors {

using learners::delta_outcome;
using learners::stats_streams;

// -- the keeper --------------------------------------------------------------

namespace {

struct publication {
  std::vector<caf::actor> subscribers;
  uint64_t unpublished_merges = 0;
  uint64_t published_version = 0;
  std::optional<learners::stats_snapshot> frozen; // stats.freeze_after reached
};

struct keeper_state {
  stats_keeper_options opts;
  stats_streams streams;
  std::unordered_map<std::string, publication> pubs;
  std::map<std::pair<std::string, std::string>, uint64_t>
    logged; // (stream, worker) -> rejections seen
  bool tick_pending = false;
  learners::stats_snapshot scratch;
  static inline const char* name = "stats_keeper";
};

using keeper_actor = caf::stateful_actor<keeper_state>;

void publish(keeper_actor* self, const std::string& name) {
  auto& st = self->state;
  auto s = st.streams.find(name);
  auto& pub = st.pubs[name];
  if (!s)
    return;
  pub.unpublished_merges = 0;
  if (pub.frozen)
    return; // the last snapshot stays the one readers have
  pub.published_version = s->version;
  if (pub.subscribers.empty() && st.opts.freeze_after == 0)
    return;
  stats_streams::snapshot_into(*s, st.scratch);
  if (st.opts.freeze_after > 0 && st.scratch.count >= st.opts.freeze_after) {
    pub.frozen = st.scratch;
    write_log(st.opts.log,
              fmt::format("troupe stats_keeper: stream '{}' frozen at {} samples "
                          "(stats.freeze_after {}): readers keep this snapshot",
                          name, st.scratch.count, st.opts.freeze_after));
  }
  if (pub.subscribers.empty())
    return;
  auto msg = caf::make_message(st.scratch);
  for (auto& sub : pub.subscribers)
    self->send(sub, msg);
}

void publish_dirty(keeper_actor* self) {
  std::vector<std::string> dirty;
  for (auto& kv : self->state.pubs)
    if (kv.second.unpublished_merges > 0)
      dirty.push_back(kv.first);
  for (auto& name : dirty)
    publish(self, name);
}

void on_rejected(keeper_actor* self, const moments_delta& d, const error& e) {
  auto& st = self->state;
  auto worker = d.worker.empty() ? caf::to_string(self->current_sender()) : d.worker;
  auto seen = ++st.logged[{d.stream, worker}];
  if (seen <= st.opts.logged_rejections_per_worker || seen % 1000 == 0)
    write_log(st.opts.log,
              fmt::format("troupe stats_keeper: {} (rejection {} from this worker{})",
                          e.message, seen,
                          seen == st.opts.logged_rejections_per_worker
                            ? "; further ones logged every 1000th"
                            : ""));
}

caf::behavior stats_keeper(keeper_actor* self, stats_keeper_options opts) {
  self->state.opts = std::move(opts);
  convert_exceptions(self, "statistics keeper", self->state.opts.log);
  self->set_down_handler([self](caf::down_msg& dm) {
    for (auto& kv : self->state.pubs) {
      auto& subs = kv.second.subscribers;
      subs.erase(
        std::remove_if(subs.begin(), subs.end(),
                       [&](const caf::actor& a) { return a.address() == dm.source; }),
        subs.end());
    }
  });
  return {
    [self](declare_atom, const stream_decl& decl) -> caf::result<uint64_t> {
      if (auto st = self->state.streams.declare(decl); !st)
        return to_caf_error(st.err());
      self->state.pubs[decl.name];
      return decl.dim;
    },
    [self](declare_atom, const std::string& name, uint64_t dim) -> caf::result<uint64_t> {
      auto& o = self->state.opts;
      stream_decl decl{name, dim, o.mode, o.momentum};
      if (auto st = self->state.streams.declare(decl); !st)
        return to_caf_error(st.err());
      self->state.pubs[name];
      return dim;
    },
    [self](const moments_delta& d) {
      auto& st = self->state;
      delta_outcome outcome = delta_outcome::merged;
      if (auto ok = st.streams.merge(d, &outcome); !ok) {
        on_rejected(self, d, ok.err());
        return;
      }
      if (d.incarnation != 0 && outcome != delta_outcome::fenced) {
        // A cumulative ack to the sender, also for a duplicate (its earlier
        // ack may be what was lost) and a gap (tells it where to resend from).
        if (auto sender = caf::actor_cast<caf::actor>(self->current_sender())) {
          auto acks = st.streams.acks_of({d.worker, d.incarnation});
          self->send(sender,
                     delta_ack{d.worker, d.incarnation, d.stream, acks.last[d.stream]});
        }
      }
      if (outcome != delta_outcome::merged)
        return;
      auto& pub = st.pubs[d.stream];
      if (++pub.unpublished_merges >= st.opts.publish_every_merges) {
        publish(self, d.stream);
      } else if (st.opts.publish_interval_ms > 0 && !st.tick_pending) {
        st.tick_pending = true;
        self->delayed_send(self, std::chrono::milliseconds(st.opts.publish_interval_ms),
                           publish_atom::value);
      }
    },
    [self](publish_atom) {
      self->state.tick_pending = false;
      publish_dirty(self);
    },
    [self](subscribe_atom,
           const std::string& name) -> caf::result<learners::stats_snapshot> {
      auto snap = self->state.streams.snapshot(name);
      if (!snap)
        return to_caf_error(snap.err());
      if (auto p = self->state.pubs.find(name);
          p != self->state.pubs.end() && p->second.frozen)
        *snap = *p->second.frozen;
      auto sender = caf::actor_cast<caf::actor>(self->current_sender());
      if (sender) {
        auto& subs = self->state.pubs[name].subscribers;
        if (std::find(subs.begin(), subs.end(), sender) == subs.end()) {
          subs.push_back(sender);
          self->monitor(sender);
        }
      }
      return std::move(*snap);
    },
    [self](snapshot_atom,
           const std::string& name) -> caf::result<learners::stats_snapshot> {
      auto snap = self->state.streams.snapshot(name);
      if (!snap)
        return to_caf_error(snap.err());
      return std::move(*snap);
    },
    [self](status_atom, const std::string& name) -> caf::result<stream_status> {
      auto s = self->state.streams.status_of(name);
      if (!s)
        return to_caf_error(s.err());
      s->published = self->state.pubs[name].published_version;
      return std::move(*s);
    },
    [self](status_atom) {
      // The counters of every stream summed (samples, merges and drops).
      stream_status totals;
      totals.name = "*";
      for (auto& name : self->state.streams.names()) {
        auto s = self->state.streams.status_of(name);
        if (!s)
          continue;
        totals.version += s->version;
        totals.count += s->count;
        totals.rejected += s->rejected;
        totals.duplicates += s->duplicates;
        totals.out_of_order += s->out_of_order;
        totals.fenced += s->fenced;
        for (auto& [worker, n] : s->rejected_by_worker)
          totals.rejected_by_worker[worker] += n;
        for (auto& [worker, n] : s->duplicates_by_worker)
          totals.duplicates_by_worker[worker] += n;
        for (auto& [worker, n] : s->fenced_by_worker)
          totals.fenced_by_worker[worker] += n;
      }
      for (auto& [sender, n] : self->state.streams.samples_merged())
        totals.samples_by_sender[fmt::format("{}/{:016x}", sender.first, sender.second)] =
          n;
      return totals;
    },
    [self](save_atom, const std::string& path) -> caf::result<caf::ok_atom> {
      if (auto st = self->state.streams.save(path); !st)
        return to_caf_error(st.err());
      return caf::ok_atom::value;
    },
    [self](load_atom, const std::string& path) -> caf::result<caf::ok_atom> {
      if (auto st = self->state.streams.load(path); !st)
        return to_caf_error(st.err());
      for (auto& name : self->state.streams.names())
        publish(self, name);
      return caf::ok_atom::value;
    },
    [](sync_atom) { return sync_atom::value; },
    [self](ack_atom, const std::string& worker, uint64_t incarnation) {
      return self->state.streams.acks_of({worker, incarnation});
    },
    [self](fence_atom, const std::string& worker, uint64_t incarnation) {
      auto& st = self->state;
      if (!st.streams.is_fenced({worker, incarnation}))
        write_log(
          st.opts.log,
          fmt::format("troupe stats_keeper: fenced worker '{}' incarnation {:#x}: "
                      "its later deltas are dropped; it merged {} samples",
                      worker, incarnation,
                      st.streams.samples_merged_from({worker, incarnation})));
      st.streams.fence({worker, incarnation});
      return st.streams.acks_of({worker, incarnation});
    },
  };
}

// -- the view feeder ---------------------------------------------------------

// The subscriber's side of the first answer: set once by the feeder, waited
// on (bounded) by subscribe_view.
struct first_answer {
  base::mutex mtx;
  std::condition_variable cv;
  bool done TROUPE_GUARDED_BY(mtx) = false;
  // Empty: the view holds the keeper's snapshot.
  std::string problem TROUPE_GUARDED_BY(mtx);
  void settle(std::string why) {
    {
      base::mutex_lock guard(mtx);
      done = true;
      problem = std::move(why);
    }
    cv.notify_all();
  }
};

struct feeder_state {
  std::weak_ptr<learners::stats_view> view;
  static inline const char* name = "stats_view_feeder";
};

caf::behavior view_feeder(caf::stateful_actor<feeder_state>* self, caf::actor keeper,
                          std::string stream, std::weak_ptr<learners::stats_view> view,
                          std::shared_ptr<first_answer> first) {
  convert_exceptions(self, fmt::format("statistics view feeder of stream '{}'", stream),
                     {});
  self->state.view = std::move(view);
  self->monitor(keeper);
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  // The problem with a snapshot, or empty once the view holds it.
  auto publish = [self](const learners::stats_snapshot& s) -> std::string {
    if (auto v = self->state.view.lock()) {
      if (auto published = v->publish(s); !published.ok()) {
        // The view was made for another dimension than the stream has: a
        // wiring bug; the view keeps its last good snapshot, and the first
        // snapshot's problem is subscribe_view's error.
        self->quit(caf::sec::invalid_argument);
        return "troupe stats view: " + published.err().message;
      }
    } else
      self->quit();
    return {};
  };
  auto deliver = [publish](const learners::stats_snapshot& s) { (void)publish(s); };
  self->request(keeper, caf::infinite, subscribe_atom::value, stream)
    .then(
      [publish, first](const learners::stats_snapshot& s) { first->settle(publish(s)); },
      [self, stream, first](caf::error& e) {
        first->settle(fmt::format("cannot subscribe to statistics stream '{}': {}",
                                  stream, error_message(self->system(), e)));
        self->quit(e);
      });
  return {deliver};
}

} // namespace

caf::actor spawn_stats_keeper(caf::actor_system& sys, stats_keeper_options opts) {
  return sys.spawn(stats_keeper, std::move(opts));
}

result<std::shared_ptr<learners::stats_view>>
subscribe_view(caf::actor_system& sys, const caf::actor& keeper,
               const std::string& stream, size_t dim, std::chrono::milliseconds timeout) {
  auto view = std::make_shared<learners::stats_view>(dim, stream);
  auto first = std::make_shared<first_answer>();
  sys.spawn(view_feeder, keeper, stream, std::weak_ptr<learners::stats_view>(view),
            first);
  base::mutex_lock guard(first->mtx);
  if (!guard.wait_for(first->cv, timeout,
                      [&]() TROUPE_REQUIRES(first->mtx) { return first->done; }))
    return make_error(errc::unavailable,
                      "the statistics keeper did not answer the subscription to stream "
                      "'{}' within {} ms",
                      stream, timeout.count());
  if (!first->problem.empty())
    return error{errc::unavailable, first->problem};
  return view;
}

} // namespace troupe::actors
