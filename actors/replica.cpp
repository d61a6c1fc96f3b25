#include "actors/replica.hpp"
#include "actors/exceptions.hpp"
#include "actors/server_state.hpp"
#include "base/mutex.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>

namespace troupe::actors {

uint64_t weights_hash(const std::vector<float>& params,
                      const std::vector<float>& buffers) {
  // Four independent lanes, each taking every fourth pair of weights as one
  // 64-bit word through a multiply-rotate-multiply step (odd multipliers and
  // a rotation: every bit of every weight counts), so that the lanes'
  // multiplications overlap instead of forming one chain; then the lanes
  // and the lengths are folded and mixed. Words are built from the floats'
  // bit patterns as integers, so the result does not depend on byte order.
  constexpr uint64_t k1 = 0x9e3779b185ebca87ull, k2 = 0xc2b2ae3d27d4eb4full;
  auto rotl = [](uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  auto step = [&](uint64_t lane, uint64_t word) {
    return rotl(lane + word * k2, 31) * k1;
  };
  auto bits = [](float x) {
    uint32_t w;
    std::memcpy(&w, &x, sizeof w);
    return static_cast<uint64_t>(w);
  };
  uint64_t lane[4] = {k1 + k2, k2, 0, 0 - k1};
  auto feed = [&](const std::vector<float>& v) {
    const size_t n = v.size();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (size_t k = 0; k < 4; ++k)
        lane[k] = step(lane[k], bits(v[i + 2 * k]) | (bits(v[i + 2 * k + 1]) << 32));
    for (; i < n; ++i)
      lane[i % 4] = step(lane[i % 4], bits(v[i]) | (uint64_t{1} << 32 << (i % 4)));
    lane[0] = step(lane[0], n);
  };
  feed(params);
  feed(buffers);
  uint64_t h =
    rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

namespace {

using round_done_atom = caf::atom_constant<caf::atom("round_done")>;
using idle_atom = caf::atom_constant<caf::atom("round_idle")>;

// The all-reduce runs on a thread of its own, so that the replica keeps
// taking its learners' gradients (for the next round) while a round is in
// flight. One job at a time: the replica hands a buffer over, the thread
// reduces it in place and tells the replica.
class round_thread {
public:
  round_thread(std::shared_ptr<collective> group, caf::actor_addr owner)
    : group_(std::move(group)), owner_(std::move(owner)), thread_([this] { run(); }) {}

  ~round_thread() {
    {
      base::mutex_lock lock(mtx_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  round_thread(const round_thread&) = delete;
  round_thread& operator=(const round_thread&) = delete;

  // Starts reducing `buf` (round `round`), after broadcasting rank 0's
  // `state` when it is not empty (a group's first round); the replica learns
  // of the end through a round_done message.
  void start(std::vector<double> buf, std::vector<char> state, uint64_t round)
    TROUPE_EXCLUDES(mtx_) {
    {
      base::mutex_lock lock(mtx_);
      buf_ = std::move(buf);
      state_ = std::move(state);
      round_ = round;
      regroup_ = false;
      job_ = true;
    }
    cv_.notify_all();
  }

  // A group's first exchange: with `reform`, after a failed round (`why`),
  // first forms the next group with the members still alive. Then gathers
  // every member's completed rounds (this one's: `completed`) into the buffer
  // take() returns, and broadcasts the state of the first member with the
  // most (this one's: `state`) to all, so every member starts the group equal.
  void start_regroup(std::string why, uint64_t completed, std::vector<char> state,
                     uint64_t round, bool reform) TROUPE_EXCLUDES(mtx_) {
    {
      base::mutex_lock lock(mtx_);
      reform_ = reform;
      why_ = std::move(why);
      completed_ = completed;
      state_ = std::move(state);
      round_ = round;
      regroup_ = true;
      job_ = true;
    }
    cv_.notify_all();
  }

  // The outcome of the last job, its buffer (a round: the reduced sums; a
  // regroup: every member's completed rounds) and the state it broadcast
  // (empty when none).
  std::tuple<status, std::vector<double>, std::vector<char>> take()
    TROUPE_EXCLUDES(mtx_) {
    base::mutex_lock lock(mtx_);
    return {std::move(outcome_), std::move(buf_), std::move(state_)};
  }

private:
  // The regroup job: see start_regroup.
  status regroup(bool reform, const std::string& why, uint64_t completed,
                 std::vector<double>& counts, std::vector<char>& state) {
    if (reform)
      if (auto s = group_->reform(why); !s.ok())
        return s;
    if (auto s = group_->ready(); !s.ok())
      return s;
    if (group_->rank() >= group_->size())
      return make_error(errc::unavailable, "{}: no rank in a group of {}",
                        group_->describe(), group_->size());
    counts.assign(group_->size(), 0.0);
    counts[group_->rank()] = static_cast<double>(completed) + 1; // 0: nobody
    if (auto s = group_->allreduce_sum(counts.data(), counts.size()); !s.ok())
      return s;
    const auto most = std::max_element(counts.begin(), counts.end());
    const auto source = static_cast<size_t>(most - counts.begin());
    return group_->broadcast(state.data(), state.size(), source);
  }

  void run() TROUPE_EXCLUDES(mtx_) {
    for (;;) {
      std::vector<double> buf;
      std::vector<char> state;
      std::string why;
      uint64_t round = 0, completed = 0;
      bool regroup_job = false, reform = false;
      {
        base::mutex_lock lock(mtx_);
        lock.wait(cv_, [&]() TROUPE_REQUIRES(mtx_) { return job_ || quit_; });
        if (quit_)
          return;
        job_ = false;
        buf = std::move(buf_);
        state = std::move(state_);
        why = std::move(why_);
        round = round_;
        completed = completed_;
        regroup_job = regroup_;
        reform = reform_;
      }
      status s;
      if (regroup_job) {
        s = regroup(reform, why, completed, buf, state);
      } else {
        if (!state.empty())
          s = group_->broadcast(state.data(), state.size(), 0);
        if (s.ok())
          s = group_->allreduce_sum(buf.data(), buf.size());
      }
      {
        base::mutex_lock lock(mtx_);
        buf_ = std::move(buf);
        state_ = std::move(state);
        outcome_ = std::move(s);
      }
      // A weak reference: a replica nobody holds may end while a round flies.
      if (auto owner = caf::actor_cast<caf::actor>(owner_))
        caf::anon_send(owner, round_done_atom::value, round);
    }
  }

  std::shared_ptr<collective> group_;
  caf::actor_addr owner_;
  base::mutex mtx_;
  std::condition_variable cv_;
  std::vector<double> buf_ TROUPE_GUARDED_BY(mtx_);
  std::vector<char> state_ TROUPE_GUARDED_BY(mtx_);
  std::string why_ TROUPE_GUARDED_BY(mtx_);
  uint64_t round_ TROUPE_GUARDED_BY(mtx_) = 0;
  uint64_t completed_ TROUPE_GUARDED_BY(mtx_) = 0;
  bool regroup_ TROUPE_GUARDED_BY(mtx_) = false;
  bool reform_ TROUPE_GUARDED_BY(mtx_) = false;
  status outcome_ TROUPE_GUARDED_BY(mtx_);
  bool job_ TROUPE_GUARDED_BY(mtx_) = false;
  bool quit_ TROUPE_GUARDED_BY(mtx_) = false;
  std::thread thread_; // last: started once the members above exist
};

// A gradient waiting for its round: sync mode answers it when the round is
// applied; async mode holds a learner's second gradient until the next round.
struct waiting_gradient {
  gradient_update g;
  caf::typed_response_promise<weights_reply> promise;
};

// This host's part of one round: sums weighted by samples, in double.
struct round_sums {
  std::vector<double> grad;    // sum of samples * gradient
  std::vector<double> buffers; // sum of samples * batch-norm buffers
  double weight = 0;           // sum of samples
  double buffer_weight = 0;    // sum of samples of the gradients with buffers
  double lr_sum = 0;           // sum of learning rates (the round's lr is their mean)
  double gradients = 0;        // gradients in the round
  double env_steps = 0;        // batch env steps of the batches that end in it
  double batches = 0;          // batches that end in it
  std::set<std::string> learners;
  std::vector<waiting_gradient> answer_after; // sync: answered when applied

  void reset(size_t params, size_t buffer_count) {
    grad.assign(params, 0.0);
    buffers.assign(buffer_count, 0.0);
    weight = buffer_weight = lr_sum = gradients = env_steps = batches = 0;
    learners.clear();
    answer_after.clear();
  }

  bool empty() const { return gradients == 0; }
};

// Where each number sits in the buffer a round all-reduces: the gradient
// sum, the buffer sum, then the scalars, then the weights' hash in three
// 21-bit pieces, each with its square (all equal on every host exactly when
// size * sum(h^2) == sum(h)^2, and sums of integers below 2^53 are exact in
// any order).
constexpr size_t scalar_count = 7;
constexpr size_t hash_pieces = 3;
constexpr size_t tail_count = scalar_count + 2 * hash_pieces;

// How many first exchanges in a row may fail before the replica gives up.
constexpr uint64_t max_failed_regroups = 5;

struct replica_state {
  replica_options opts;
  std::shared_ptr<collective> group;
  std::shared_ptr<policy_store> store;
  std::vector<float> params;
  std::vector<float> buffers;
  std::unique_ptr<learners::adam_optimizer> adam;
  parameter_server_status counters;
  replica_status rounds;
  round_sums next;   // the round being gathered
  round_sums flying; // the round in flight (sync: its learners wait)
  bool in_flight = false;
  uint64_t launched = 0; // rounds started
  std::chrono::steady_clock::time_point started;
  std::map<std::string, waiting_gradient> held; // async: for the round after next
  std::vector<float> step_grad;
  uint64_t expected = 0; // sync: this host's learners in a round
  bool idle_pending = false;
  bool draining = false;
  bool regrouping = false;       // a group's first exchange is under way
  uint64_t failed_regroups = 0;  // first exchanges failed in a row
  bool flying_open = false;      // a round was started and not applied
  uint64_t regroups_started = 0; // groups formed again after a failure
  uint64_t logged_drops = 0;
  uint64_t logged_rejects = 0;
  std::unique_ptr<round_thread> thread; // last: joined first
};

using replica_actor = caf::stateful_actor<replica_state>;

weights_reply current(const replica_state& st, bool applied) {
  return weights_reply{st.counters.version, applied,    st.draining, false,
                       st.params,           st.buffers, false,       false};
}

// Holds a learner's gradient for the round after the one being gathered; one
// held before under its name (a replaced learner's) is answered, unapplied.
void hold(replica_state& s, gradient_update&& g,
          caf::typed_response_promise<weights_reply> promise) {
  const std::string name = g.learner;
  auto it = s.held.find(name);
  if (it != s.held.end())
    it->second.promise.deliver(current(s, false));
  s.held[name] = waiting_gradient{std::move(g), std::move(promise)};
}

// Adds a gradient to the round being gathered.
void add(replica_state& s, const gradient_update& g) {
  const double w = static_cast<double>(std::max<uint64_t>(g.samples, 1));
  for (size_t i = 0; i < g.grad.size(); ++i)
    s.next.grad[i] += w * g.grad[i];
  if (!g.buffers.empty() && g.buffers.size() == s.buffers.size()) {
    for (size_t i = 0; i < g.buffers.size(); ++i)
      s.next.buffers[i] += w * g.buffers[i];
    s.next.buffer_weight += w;
  }
  s.next.weight += w;
  s.next.lr_sum += g.learning_rate;
  s.next.gradients += 1;
  if (g.batch_env_steps > 0) {
    s.next.env_steps += static_cast<double>(g.batch_env_steps);
    s.next.batches += 1;
  }
  s.next.learners.insert(g.learner);
  s.rounds.contributed += 1;
}

bool ready(const replica_state& s) {
  if (s.in_flight || s.draining)
    return false;
  // A host without learners (a coordinator) has nothing to wait for: it
  // enters each round at once and waits there for the others.
  if (s.opts.sync || s.expected == 0)
    return s.next.learners.size() >= s.expected;
  return !s.next.empty();
}

// The replica's whole state as bytes, for the broadcast that starts a group:
// counters as doubles, then parameters, buffers and Adam's moments.
constexpr size_t packed_counters = 6;

std::vector<char> pack_state(const replica_state& s) {
  const double head[packed_counters] = {
    static_cast<double>(s.counters.version),   static_cast<double>(s.adam->steps()),
    static_cast<double>(s.counters.env_steps), static_cast<double>(s.counters.batches),
    static_cast<double>(s.counters.applied),   static_cast<double>(s.params.size())};
  const auto& m = s.adam->first_moment();
  const auto& v = s.adam->second_moment();
  std::vector<char> out(sizeof head +
                        (s.params.size() * 3 + s.buffers.size()) * sizeof(float));
  char* at = out.data();
  auto put = [&](const void* p, size_t bytes) {
    if (bytes == 0)
      return; // an empty vector's data() may be null, which memcpy must not get
    std::memcpy(at, p, bytes);
    at += bytes;
  };
  put(head, sizeof head);
  put(s.params.data(), s.params.size() * sizeof(float));
  put(s.buffers.data(), s.buffers.size() * sizeof(float));
  put(m.data(), m.size() * sizeof(float));
  put(v.data(), v.size() * sizeof(float));
  return out;
}

void unpack_state(replica_state& s, const std::vector<char>& in) {
  double head[packed_counters];
  const char* at = in.data();
  auto get = [&](void* p, size_t bytes) {
    if (bytes == 0)
      return; // as in pack_state
    std::memcpy(p, at, bytes);
    at += bytes;
  };
  get(head, sizeof head);
  get(s.params.data(), s.params.size() * sizeof(float));
  get(s.buffers.data(), s.buffers.size() * sizeof(float));
  get(s.adam->first_moment().data(), s.params.size() * sizeof(float));
  get(s.adam->second_moment().data(), s.params.size() * sizeof(float));
  s.counters.version = static_cast<uint64_t>(head[0]);
  s.adam->set_steps(static_cast<int64_t>(head[1]));
  s.counters.env_steps = static_cast<uint64_t>(head[2]);
  s.counters.batches = static_cast<uint64_t>(head[3]);
  s.counters.applied = static_cast<uint64_t>(head[4]);
}

void launch(replica_actor* self);

void maybe_launch(replica_actor* self) {
  auto& s = self->state;
  if (ready(s)) {
    launch(self);
  } else if (!s.opts.sync && !s.in_flight && !s.draining && !s.idle_pending) {
    // Nothing to send: enter the next round after a while anyway, so that the
    // other hosts' round completes.
    s.idle_pending = true;
    self->delayed_send(self, s.opts.idle_round, idle_atom::value, s.launched);
  }
}

// The buffer a round all-reduces, from this host's sums `sums`.
std::vector<double> round_buffer(const replica_state& s, const round_sums& sums) {
  std::vector<double> buf;
  buf.reserve(s.params.size() + s.buffers.size() + tail_count);
  buf.insert(buf.end(), sums.grad.begin(), sums.grad.end());
  buf.insert(buf.end(), sums.buffers.begin(), sums.buffers.end());
  for (double x : {sums.weight, sums.buffer_weight, sums.lr_sum, sums.gradients,
                   sums.env_steps, sums.batches, 1.0})
    buf.push_back(x);
  const uint64_t h = weights_hash(s.params, s.buffers);
  for (size_t k = 0; k < hash_pieces; ++k) {
    const double piece = static_cast<double>((h >> (21 * k)) & ((1ull << 21) - 1));
    buf.push_back(piece);
    buf.push_back(piece * piece);
  }
  return buf;
}

void start_round(replica_state& s, std::vector<double> buf) {
  s.rounds.reduced_bytes += buf.size() * sizeof(double);
  s.in_flight = true;
  s.flying_open = true;
  s.started = std::chrono::steady_clock::now();
  s.thread->start(std::move(buf), {}, s.launched++);
}

// Starts a group's first exchange (see round_thread::start_regroup).
void start_sync(replica_state& s, const std::string& why, bool reform) {
  s.regrouping = true;
  s.in_flight = true;
  s.started = std::chrono::steady_clock::now();
  s.thread->start_regroup(why, s.rounds.rounds, pack_state(s), s.launched, reform);
}

void launch(replica_actor* self) {
  auto& s = self->state;
  auto buf = round_buffer(s, s.next);
  std::swap(s.flying, s.next);
  s.next.reset(s.params.size(), s.buffers.size());
  start_round(s, std::move(buf));
  // The gradients held for this round's successor go into it now (async:
  // answered at once; sync: when it is applied).
  auto held = std::move(s.held);
  s.held.clear();
  for (auto& [name, w] : held) {
    add(s, w.g);
    if (s.opts.sync)
      s.next.answer_after.push_back(waiting_gradient{gradient_update{}, w.promise});
    else
      w.promise.deliver(current(s, true));
  }
}

void fail(replica_actor* self, const std::string& why) {
  auto& s = self->state;
  if (s.draining) {
    // The run ends: the others leave the group, and a round in flight with
    // them fails. The replica stays, with the weights of its last round,
    // for the final checkpoint.
    write_log(s.opts.log, log_level::info,
              fmt::format("replica of host '{}': the group ended with the run ({})",
                          s.opts.host, why));
    return;
  }
  write_log(s.opts.log, log_level::error, why);
  auto reply = current(s, false);
  reply.rejected = true;
  for (auto& w : s.flying.answer_after)
    w.promise.deliver(reply);
  for (auto& w : s.next.answer_after)
    w.promise.deliver(reply);
  for (auto& [name, w] : s.held)
    w.promise.deliver(reply);
  s.flying.answer_after.clear();
  s.next.answer_after.clear();
  s.held.clear();
  self->quit(to_caf_error(make_error(errc::unavailable, "{}", why)));
}

// The next group has formed after a failed round, and every member holds
// the state of the member that completed the most rounds. If that is more
// than this one completed, the failed round was applied there (with this
// host's sums in it: a ring all-reduce completes on a member only once every
// member's part is in): its sums are dropped. Otherwise no member completed
// it, and this host sends its sums again in the new group. Either way every
// gradient is applied once.
void regrouped(replica_actor* self, status outcome, const std::vector<double>& counts,
               const std::vector<char>& state) {
  auto& s = self->state;
  s.regrouping = false;
  s.in_flight = false;
  const bool again = s.regroups_started > 0;
  if (!outcome.ok()) {
    const auto why =
      fmt::format("replica of host '{}': {} failed: {}", s.opts.host,
                  again ? "forming the group again" : "the group's first exchange",
                  outcome.err().message);
    // A group whose membership changes may be replaced while it forms (a
    // host joins during the first exchange): the next one is formed, a
    // bounded number of times in a row (each wait is bounded by the group).
    if (s.draining || !s.group->forms_again() || s.failed_regroups >= max_failed_regroups)
      return fail(self, why);
    s.failed_regroups += 1;
    write_log(s.opts.log, log_level::warning,
              fmt::format("{}; the group forms again (try {} of {})", why,
                          s.failed_regroups, max_failed_regroups));
    s.regroups_started += 1;
    start_sync(s, why, /*reform=*/true);
    return;
  }
  s.failed_regroups = 0;
  const double most = *std::max_element(counts.begin(), counts.end());
  const auto completed_there = static_cast<uint64_t>(most) - 1;
  const uint64_t completed_here = s.rounds.rounds;
  unpack_state(s, state);
  if (s.store)
    s.store->publish(s.counters.version, s.params.data(),
                     s.buffers.empty() ? nullptr : s.buffers.data());
  s.rounds.rounds = completed_there;
  s.rounds.group_size = s.group->size();
  s.rounds.weights_hash = weights_hash(s.params, s.buffers);
  if (!s.flying_open) {
    // Nothing was in flight (the group's start, or a host joined): rounds
    // go on from the state every member now holds.
    if (again)
      write_log(s.opts.log,
                fmt::format("replica of host '{}': the group formed again ({})",
                            s.opts.host, s.group->describe()));
    maybe_launch(self);
    return;
  }
  const bool applied_elsewhere = completed_there > completed_here;
  write_log(s.opts.log,
            fmt::format("replica of host '{}': the group formed again ({}); the failed "
                        "round {}",
                        s.opts.host, s.group->describe(),
                        applied_elsewhere ? "was applied on another member: its sums are "
                                            "taken from there"
                                          : "was applied nowhere: this host sends its "
                                            "sums again"));
  if (applied_elsewhere) {
    auto reply = current(s, true);
    for (auto& w : s.flying.answer_after)
      w.promise.deliver(reply);
    s.flying.reset(s.params.size(), s.buffers.size());
    s.flying_open = false;
    maybe_launch(self);
    return;
  }
  // The failed round again, in the new group; its learners wait as before.
  start_round(s, round_buffer(s, s.flying));
}

// A round's result: the same numbers on every host, applied the same way.
void complete(replica_actor* self, uint64_t round) {
  auto& s = self->state;
  auto [outcome, buf, state] = s.thread->take();
  s.in_flight = false;
  const auto ns =
    static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - s.started)
                            .count());
  s.rounds.round_ns_sum += ns;
  s.rounds.round_ns_max = std::max(s.rounds.round_ns_max, ns);
  if (s.regrouping)
    return regrouped(self, std::move(outcome), buf, state);
  if (!outcome.ok()) {
    const auto why = fmt::format("replica of host '{}': round {} failed: {}", s.opts.host,
                                 round, outcome.err().message);
    if (s.draining)
      return fail(self, why);
    // The members still alive form the next group and complete the round.
    write_log(s.opts.log, log_level::warning,
              why + "; the members still alive form the group again");
    s.regroups_started += 1;
    start_sync(s, why, /*reform=*/true);
    return;
  }
  const size_t p = s.params.size(), b = s.buffers.size();
  const double* tail = buf.data() + p + b;
  const double weight = tail[0], buffer_weight = tail[1], lr_sum = tail[2],
               gradients = tail[3], env_steps = tail[4], batches = tail[5],
               members = tail[6];
  const auto n = static_cast<unsigned __int128>(members);
  for (size_t k = 0; k < hash_pieces; ++k) {
    const auto sum = static_cast<unsigned __int128>(tail[scalar_count + 2 * k]);
    const auto sum_sq = static_cast<unsigned __int128>(tail[scalar_count + 2 * k + 1]);
    if (n * sum_sq != sum * sum)
      return fail(
        self, fmt::format("replica of host '{}': the weights differ between hosts at "
                          "round {} (version {}; this host's weights hash to {:#018x}): "
                          "the replicas no longer apply the same steps",
                          s.opts.host, round, s.counters.version,
                          weights_hash(s.params, s.buffers)));
  }
  if (members != static_cast<double>(s.group->size()))
    return fail(self, fmt::format("replica of host '{}': round {} counted {} members, "
                                  "the group has {}",
                                  s.opts.host, round, members, s.group->size()));
  s.flying_open = false;
  s.rounds.group_size = s.group->size();
  s.rounds.rounds += 1;
  if (gradients == 0) {
    s.rounds.empty_rounds += 1;
  } else {
    s.step_grad.resize(p);
    for (size_t i = 0; i < p; ++i)
      s.step_grad[i] = static_cast<float>(buf[i] / weight);
    if (buffer_weight > 0)
      for (size_t i = 0; i < b; ++i)
        s.buffers[i] = static_cast<float>(buf[p + i] / buffer_weight);
    if (s.opts.max_grad_norm > 0)
      learners::clip_grad_norm(s.step_grad.data(), p, s.opts.max_grad_norm);
    s.adam->step(s.params.data(), s.step_grad.data(), lr_sum / gradients);
    s.counters.version += 1;
    s.counters.applied += static_cast<uint64_t>(gradients);
    s.counters.batches += static_cast<uint64_t>(batches);
    s.counters.env_steps += static_cast<uint64_t>(env_steps);
    for (const auto& name : s.flying.learners)
      s.counters.applied_by_learner[name] += 1;
    if (s.store)
      s.store->publish(s.counters.version, s.params.data(),
                       s.buffers.empty() ? nullptr : s.buffers.data());
  }
  s.rounds.weights_hash = weights_hash(s.params, s.buffers);
  auto reply = current(s, true);
  auto waiting = std::move(s.flying.answer_after);
  s.flying.answer_after.clear();
  for (auto& w : waiting)
    w.promise.deliver(reply);
  maybe_launch(self);
}

// Installs a checkpoint's state (the caller checked its sizes).
void install(replica_state& s, parameter_server_state&& in) {
  s.params = std::move(in.params);
  s.buffers = std::move(in.buffers);
  s.adam->first_moment() = std::move(in.adam_m);
  s.adam->second_moment() = std::move(in.adam_v);
  s.adam->set_steps(in.adam_steps);
  s.counters = in.counters;
  s.counters.version = in.version;
  if (s.store)
    s.store->publish(s.counters.version, s.params.data(),
                     s.buffers.empty() ? nullptr : s.buffers.data());
}

// Why a checkpoint's state does not fit this replica; empty if it does.
std::string state_mismatch(const replica_state& s, const parameter_server_state& in) {
  return restored_state_mismatch("replica", in, s.params.size(), s.buffers.size());
}

caf::behavior replica(replica_actor* self, replica_options opts,
                      std::shared_ptr<collective> group, std::vector<float> params,
                      std::vector<float> buffers, std::shared_ptr<policy_store> store,
                      std::optional<parameter_server_state> start) {
  auto& st = self->state;
  st.opts = std::move(opts);
  convert_exceptions(self, "replica", st.opts.log);
  st.group = std::move(group);
  st.store = std::move(store);
  st.params = std::move(params);
  st.buffers = std::move(buffers);
  st.adam = std::make_unique<learners::adam_optimizer>(st.params.size(), st.opts.adam);
  st.expected = st.opts.num_learners;
  st.next.reset(st.params.size(), st.buffers.size());
  st.flying.reset(st.params.size(), st.buffers.size());
  st.rounds.weights_hash = weights_hash(st.params, st.buffers);
  if (start) {
    if (auto bad = state_mismatch(st, *start); !bad.empty()) {
      self->quit(to_caf_error(make_error(errc::invalid_argument, "{}", bad)));
      return {};
    }
    install(st, std::move(*start));
  }
  st.thread = std::make_unique<round_thread>(st.group, self->address());
  // The group's first exchange: every member takes the state of the member
  // with the most rounds (at a run's start, rank 0's: the coordinator's).
  start_sync(st, {}, /*reform=*/false);
  return {
    [self](gradient_update& g) -> caf::result<weights_reply> {
      auto& s = self->state;
      s.counters.received += 1;
      if (g.grad.size() != s.params.size())
        return to_caf_error(make_error(errc::invalid_argument,
                                       "replica: gradient from '{}' has {} numbers, "
                                       "expected {}",
                                       g.learner, g.grad.size(), s.params.size()));
      const uint64_t staleness =
        s.counters.version > g.base_version ? s.counters.version - g.base_version : 0;
      s.counters.max_staleness_seen = std::max(s.counters.max_staleness_seen, staleness);
      if (s.draining)
        return current(s, false);
      if (const auto bad = first_non_finite(g); !bad.empty()) {
        s.counters.rejected += 1;
        s.counters.rejected_by_learner[g.learner] += 1;
        if (s.logged_rejects++ < 5)
          write_log(s.opts.log,
                    fmt::format("replica: rejected a gradient from '{}' computed on "
                                "version {}: {} (rejected from it so far: {})",
                                g.learner, g.base_version, bad,
                                s.counters.rejected_by_learner[g.learner]));
        auto reply = current(s, false);
        reply.rejected = true;
        return reply;
      }
      if (s.opts.sync) {
        auto promise = self->make_response_promise<weights_reply>();
        if (s.next.learners.count(g.learner)) {
          // A replacement's gradient: the orphan is answered, unapplied; the
          // sums cannot drop it, so the replacement waits for the next round.
          write_log(s.opts.log,
                    fmt::format("replica: a second gradient from '{}' in one round "
                                "waits for the next",
                                g.learner));
          hold(s, std::move(g), promise);
          return promise;
        }
        add(s, g);
        s.next.answer_after.push_back(waiting_gradient{gradient_update{}, promise});
        maybe_launch(self);
        return promise;
      }
      if (staleness > s.opts.max_staleness) {
        s.counters.dropped += 1;
        if (s.logged_drops++ < 5)
          write_log(s.opts.log,
                    fmt::format("replica: dropped a gradient from '{}' computed on "
                                "version {} (now {}, max_staleness {})",
                                g.learner, g.base_version, s.counters.version,
                                s.opts.max_staleness));
        return current(s, false);
      }
      if (s.next.learners.count(g.learner)) {
        // One gradient per learner and round: this one opens the next round.
        s.rounds.held += 1;
        auto promise = self->make_response_promise<weights_reply>();
        hold(s, std::move(g), promise);
        return promise;
      }
      add(s, g);
      maybe_launch(self);
      return current(s, true);
    },
    [self](round_done_atom, uint64_t round) { complete(self, round); },
    [self](idle_atom, uint64_t launched) {
      auto& s = self->state;
      s.idle_pending = false;
      if (s.in_flight || s.draining)
        return;
      if (s.launched == launched && s.next.empty())
        launch(self); // nothing of ours: the others' round must not wait
      else
        maybe_launch(self);
    },
    [self](leave_atom, const std::string& learner) -> uint64_t {
      // Sync: a learner that ends no longer holds up the rounds.
      auto& s = self->state;
      if (s.opts.sync && s.expected > 0 && !s.next.learners.count(learner))
        s.expected -= 1;
      maybe_launch(self);
      return s.expected;
    },
    [self](join_atom, const std::string&) -> uint64_t {
      // A host's learners join its own replica's rounds: nothing to change.
      return self->state.expected;
    },
    [](fence_atom, const std::string&, uint64_t) -> uint64_t {
      // Other hosts' gradients never come here: nothing to refuse.
      return 0;
    },
    [self](weights_atom) { return current(self->state, true); },
    [self](stop_atom) {
      // The run ends: every learner that waits is answered now (a round in
      // flight may never complete: the other hosts stop too).
      auto& s = self->state;
      s.draining = true;
      auto reply = current(s, false);
      for (auto& w : s.flying.answer_after)
        w.promise.deliver(reply);
      s.flying.answer_after.clear();
      for (auto& w : s.next.answer_after)
        w.promise.deliver(reply);
      s.next.answer_after.clear();
      for (auto& [name, w] : s.held)
        w.promise.deliver(reply);
      s.held.clear();
    },
    [self](status_atom) {
      auto out = self->state.counters;
      out.members = self->state.expected;
      return out;
    },
    [self](rounds_atom) { return self->state.rounds; },
    [self](state_atom, parameter_server_state& in) -> caf::result<uint64_t> {
      // A state from elsewhere: after the group's first exchange it makes this
      // replica differ from the others, which the next round's hash check
      // reports (a resume passes its state to spawn_replica).
      auto& s = self->state;
      if (auto bad = state_mismatch(s, in); !bad.empty())
        return to_caf_error(make_error(errc::invalid_argument, "{}", bad));
      install(s, std::move(in));
      return s.counters.version;
    },
    [self](state_atom) {
      auto& s = self->state;
      return server_snapshot(s.counters, *s.adam, s.params, s.buffers);
    },
  };
}

// -- the standby ----------------------------------------------------------------

struct standby_state {
  standby_options opts;
  caf::actor source;
  parameter_server_state held;
  replica_status rounds;
  std::shared_ptr<policy_store> store;
  static inline const char* name = "standby_replica";
};

using standby_actor = caf::stateful_actor<standby_state>;

// Keeps a member's rounds unless they are older than what is held.
void adopt_rounds(standby_state& s, const replica_status& in) {
  if (in.rounds >= s.rounds.rounds)
    s.rounds = in;
}

// Keeps `in` unless it is older than what is held; the problem, or empty.
std::string adopt(standby_state& s, parameter_server_state&& in) {
  if (auto bad = restored_state_mismatch("standby replica of host '" + s.opts.host + "'",
                                         in, s.held.params.size(), s.held.buffers.size());
      !bad.empty())
    return bad;
  if (in.version < s.held.version)
    return {};
  in.counters.version = in.version;
  s.held = std::move(in);
  if (s.store)
    s.store->publish(s.held.version, s.held.params.data(),
                     s.held.buffers.empty() ? nullptr : s.held.buffers.data());
  return {};
}

caf::behavior standby(standby_actor* self, standby_options opts,
                      std::vector<float> params, std::vector<float> buffers,
                      std::shared_ptr<policy_store> store,
                      std::optional<parameter_server_state> start) {
  auto& st = self->state;
  st.opts = std::move(opts);
  convert_exceptions(self, "standby replica", st.opts.log);
  st.store = std::move(store);
  st.held.adam_m.assign(params.size(), 0.0f);
  st.held.adam_v.assign(params.size(), 0.0f);
  st.held.params = std::move(params);
  st.held.buffers = std::move(buffers);
  if (start)
    if (auto bad = adopt(st, std::move(*start)); !bad.empty()) {
      self->quit(to_caf_error(make_error(errc::invalid_argument, "{}", bad)));
      return {};
    }
  st.rounds.weights_hash = weights_hash(st.held.params, st.held.buffers);
  return {
    [self](source_atom, caf::actor source) { self->state.source = std::move(source); },
    [self](state_atom) -> caf::result<parameter_server_state> {
      auto& s = self->state;
      if (!s.source)
        return s.held;
      auto rp = self->make_response_promise<parameter_server_state>();
      self->request(s.source, s.opts.ask_timeout, state_atom::value)
        .then(
          [self, rp](parameter_server_state& in) mutable {
            auto& s = self->state;
            if (auto bad = adopt(s, std::move(in)); !bad.empty())
              write_log(s.opts.log, bad);
            rp.deliver(s.held);
          },
          [self, rp](caf::error&) mutable {
            // No member to ask (the run starts or ends): what is held.
            rp.deliver(self->state.held);
          });
      return rp;
    },
    [self](state_atom, parameter_server_state& in) -> caf::result<uint64_t> {
      auto& s = self->state;
      if (auto bad = adopt(s, std::move(in)); !bad.empty())
        return to_caf_error(make_error(errc::invalid_argument, "{}", bad));
      return s.held.version;
    },
    [self](rounds_atom) -> caf::result<replica_status> {
      auto& s = self->state;
      if (!s.source)
        return s.rounds;
      auto rp = self->make_response_promise<replica_status>();
      self->request(s.source, s.opts.ask_timeout, rounds_atom::value)
        .then(
          [self, rp](const replica_status& in) mutable {
            adopt_rounds(self->state, in);
            rp.deliver(self->state.rounds);
          },
          [self, rp](caf::error&) mutable { rp.deliver(self->state.rounds); });
      return rp;
    },
    [self](rounds_atom, const replica_status& in) { adopt_rounds(self->state, in); },
    // adopt() keeps the counters' version the state's.
    [self](status_atom) { return self->state.held.counters; },
    [self](weights_atom) {
      auto& h = self->state.held;
      return weights_reply{h.version, true,      false, false,
                           h.params,  h.buffers, false, false};
    },
    [self](gradient_update& g) -> caf::result<weights_reply> {
      return to_caf_error(make_error(errc::invalid_argument,
                                     "standby replica of host '{}': a gradient from '{}' "
                                     "came here, where no learner steps",
                                     self->state.opts.host, g.learner));
    },
    [](join_atom, const std::string&) -> uint64_t { return 0; },
    [](leave_atom, const std::string&) -> uint64_t { return 0; },
    [](fence_atom, const std::string&, uint64_t) -> uint64_t { return 0; },
    [](stop_atom) {},
  };
}

} // namespace

caf::actor spawn_standby_replica(caf::actor_system& sys, standby_options opts,
                                 std::vector<float> params, std::vector<float> buffers,
                                 std::shared_ptr<policy_store> store,
                                 std::optional<parameter_server_state> start) {
  return sys.spawn(standby, std::move(opts), std::move(params), std::move(buffers),
                   std::move(store), std::move(start));
}

caf::actor spawn_replica(caf::actor_system& sys, replica_options opts,
                         std::shared_ptr<collective> group, std::vector<float> params,
                         std::vector<float> buffers, std::shared_ptr<policy_store> store,
                         std::optional<parameter_server_state> start) {
  return sys.spawn<caf::detached>(replica, std::move(opts), std::move(group),
                                  std::move(params), std::move(buffers), std::move(store),
                                  std::move(start));
}

} // namespace troupe::actors
