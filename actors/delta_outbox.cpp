#include "actors/delta_outbox.hpp"
#include "actors/exceptions.hpp"

#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>

#include <fmt/format.h>

#include "kernels/moments.hpp"

namespace troupe::actors {

uint64_t random_incarnation() {
  std::random_device rd;
  uint64_t x = 0;
  while (x == 0)
    x = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return x;
}

namespace {

struct kept_delta {
  moments_delta delta;
  uint64_t batches = 0; // local deltas it covers
};

struct stream_box {
  std::deque<kept_delta> unacked; // sent, ascending sequence
  std::optional<kept_delta> held; // merged, not sent yet
  uint64_t next_seq = 1;
};

struct outbox_state {
  delta_outbox_options opts;
  caf::actor keeper;
  bool reconnecting = false;
  bool tick_pending = false; // interval > 0: a (publish_atom) to self is on its way
  std::set<std::string> ema; // streams declared "ema": never paced (a merged
                             // delta would be one moving-average step, not several)
  std::map<std::string, stream_box> streams;
  delta_outbox_status counters;
  static inline const char* name = "delta_outbox";
};

using outbox_actor = caf::stateful_actor<outbox_state>;

// a += b with Chan's merge: exact for the moments of the union.
void merge_into(kept_delta& a, const moments_delta& b, uint64_t batches) {
  kernels::moments ma, mb;
  ma.count = a.delta.count;
  ma.mean = std::move(a.delta.mean);
  ma.m2 = std::move(a.delta.m2);
  mb.count = b.count;
  mb.mean = b.mean;
  mb.m2 = b.m2;
  kernels::merge(ma, mb);
  a.delta.count = ma.count;
  a.delta.mean = std::move(ma.mean);
  a.delta.m2 = std::move(ma.m2);
  a.batches += batches;
}

void send_kept(outbox_actor* self, stream_box& box, kept_delta k) {
  auto& st = self->state;
  k.delta.worker = st.opts.worker;
  k.delta.incarnation = st.counters.incarnation;
  k.delta.seq_first = box.next_seq;
  k.delta.seq_last = box.next_seq;
  box.next_seq += 1;
  self->send(st.keeper, k.delta);
  st.counters.sent += 1;
  box.unacked.push_back(std::move(k));
}

bool online(const outbox_state& st) {
  return st.keeper && !st.reconnecting;
}

// Drops what the keeper merged (everything up to `last` of the current incarnation).
void on_acked(outbox_state& st, stream_box& box, uint64_t last) {
  while (!box.unacked.empty() && box.unacked.front().delta.seq_last <= last) {
    st.counters.acked_samples += box.unacked.front().delta.count;
    st.counters.acked_deltas += box.unacked.front().batches;
    box.unacked.pop_front();
  }
}

// Sends a held delta when the window has room.
void send_held(outbox_actor* self, stream_box& box) {
  if (online(self->state) && box.held &&
      box.unacked.size() < self->state.opts.max_unacked) {
    auto k = std::move(*box.held);
    box.held.reset();
    send_kept(self, box, std::move(k));
  }
}

delta_outbox_status status_of(const outbox_state& st) {
  auto out = st.counters;
  out.unacked = 0;
  out.held = 0;
  for (auto& [name, box] : st.streams) {
    out.unacked += box.unacked.size();
    out.held += box.held ? 1 : 0;
  }
  out.connected = online(st);
  return out;
}

// Forwards a stream declaration to the keeper and its answer to the sender.
caf::result<uint64_t> forward_declare(outbox_actor* self, const std::string& stream,
                                      caf::message declaration) {
  auto& st = self->state;
  if (!st.keeper)
    return to_caf_error(make_error(errc::unavailable,
                                   "delta outbox '{}': no keeper to declare stream '{}' "
                                   "at (offline)",
                                   st.opts.worker, stream));
  auto rp = self->make_response_promise<uint64_t>();
  self->request(st.keeper, st.opts.ask_timeout, std::move(declaration))
    .then([rp](uint64_t dim) mutable { rp.deliver(dim); },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

caf::behavior delta_outbox(outbox_actor* self, delta_outbox_options opts,
                           caf::actor keeper) {
  auto& st = self->state;
  st.opts = std::move(opts);
  convert_exceptions(self, fmt::format("delta outbox of '{}'", st.opts.worker),
                     st.opts.log);
  st.keeper = std::move(keeper);
  st.counters.worker = st.opts.worker;
  st.counters.incarnation =
    st.opts.incarnation != 0 ? st.opts.incarnation : random_incarnation();
  return {
    // A sender that declares its stream (an environment runner does, before
    // its first delta) talks to the keeper through the outbox too; both forms
    // of the keeper's declare are forwarded.
    [self](declare_atom a, stream_decl& decl) -> caf::result<uint64_t> {
      const std::string name = decl.name;
      if (decl.mode == "ema")
        self->state.ema.insert(name);
      return forward_declare(self, name, caf::make_message(a, std::move(decl)));
    },
    [self](declare_atom a, std::string& stream, uint64_t dim) -> caf::result<uint64_t> {
      const std::string name = stream;
      return forward_declare(self, name, caf::make_message(a, std::move(stream), dim));
    },
    [self](moments_delta& d) {
      auto& st = self->state;
      st.counters.received += 1;
      auto& box = st.streams[d.stream];
      kept_delta k{std::move(d), 1};
      const bool pace = st.opts.interval.count() > 0 && st.ema.count(k.delta.stream) == 0;
      if (pace || !online(st) || box.held || box.unacked.size() >= st.opts.max_unacked) {
        if (box.held)
          merge_into(*box.held, k.delta, 1);
        else
          box.held = std::move(k);
        if (pace && !st.tick_pending) {
          st.tick_pending = true;
          self->delayed_send(self, st.opts.interval, publish_atom::value);
        }
        return;
      }
      send_kept(self, box, std::move(k));
    },
    // interval > 0: what each stream merged since the last tick goes out.
    [self](publish_atom) {
      auto& st = self->state;
      st.tick_pending = false;
      bool left = false;
      for (auto& [name, box] : st.streams) {
        send_held(self, box);
        left = left || box.held.has_value();
      }
      if (left) { // offline or a full window: try again at the next tick
        st.tick_pending = true;
        self->delayed_send(self, st.opts.interval, publish_atom::value);
      }
    },
    [self](const delta_ack& a) {
      auto& st = self->state;
      if (a.worker != st.opts.worker || a.incarnation != st.counters.incarnation)
        return; // an ack of an earlier incarnation: its deltas were settled at the
                // reconnect
      auto i = st.streams.find(a.stream);
      if (i == st.streams.end())
        return;
      on_acked(st, i->second, a.last);
      send_held(self, i->second);
    },
    [self](reconnect_atom, caf::actor keeper) -> caf::result<uint64_t> {
      auto& st = self->state;
      auto rp = self->make_response_promise<uint64_t>();
      st.keeper = keeper;
      st.reconnecting = true;
      const uint64_t old = st.counters.incarnation;
      self->request(keeper, st.opts.ask_timeout, fence_atom::value, st.opts.worker, old)
        .then(
          [self, rp, old](delta_acks& acks) mutable {
            auto& st = self->state;
            if (st.counters.incarnation != old) { // a later reconnect won the race
              rp.deliver(st.counters.incarnation);
              return;
            }
            st.counters.incarnation = random_incarnation();
            st.reconnecting = false;
            for (auto& [name, box] : st.streams) {
              auto last = acks.last.find(name);
              on_acked(st, box, last == acks.last.end() ? 0 : last->second);
              std::optional<kept_delta> rest;
              auto take = [&](kept_delta& k) {
                if (rest)
                  merge_into(*rest, k.delta, k.batches);
                else
                  rest = std::move(k);
              };
              for (auto& k : box.unacked)
                take(k);
              if (box.held)
                take(*box.held);
              box.unacked.clear();
              box.held.reset();
              box.next_seq = 1;
              if (!rest)
                continue;
              // ONE delta carrying the range of the local deltas it covers.
              rest->delta.worker = st.opts.worker;
              rest->delta.incarnation = st.counters.incarnation;
              rest->delta.seq_first = 1;
              rest->delta.seq_last = rest->batches;
              box.next_seq = rest->batches + 1;
              self->send(st.keeper, rest->delta);
              st.counters.sent += 1;
              st.counters.resent += 1;
              box.unacked.push_back(std::move(*rest));
            }
            rp.deliver(st.counters.incarnation);
          },
          [self, rp](caf::error& e) mutable {
            auto& st = self->state;
            st.reconnecting = false;
            st.keeper = nullptr; // offline: deltas are held until the next reconnect
            write_log(
              st.opts.log,
              fmt::format("delta outbox of '{}': reconnect failed, the keeper did "
                          "not answer the fence of incarnation {:#x}: {}",
                          st.opts.worker, st.counters.incarnation,
                          error_message(self->system(), e)));
            rp.deliver(std::move(e));
          });
      return rp;
    },
    [self](flush_atom) -> caf::result<delta_outbox_status> {
      auto& st = self->state;
      if (!online(st))
        return status_of(st);
      auto rp = self->make_response_promise<delta_outbox_status>();
      const uint64_t inc = st.counters.incarnation;
      self->request(st.keeper, st.opts.ask_timeout, ack_atom::value, st.opts.worker, inc)
        .then(
          [self, rp, inc](delta_acks& acks) mutable {
            auto& st = self->state;
            if (st.counters.incarnation == inc)
              for (auto& [name, box] : st.streams) {
                auto last = acks.last.find(name);
                if (last != acks.last.end())
                  on_acked(st, box, last->second);
                send_held(self, box);
              }
            rp.deliver(status_of(st));
          },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
      return rp;
    },
    [self](status_atom) { return status_of(self->state); },
  };
}

} // namespace

caf::actor spawn_delta_outbox(caf::actor_system& sys, delta_outbox_options opts,
                              caf::actor keeper) {
  return sys.spawn(delta_outbox, std::move(opts), std::move(keeper));
}

} // namespace troupe::actors
