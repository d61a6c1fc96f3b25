#include "actors/parameter_server.hpp"
#include "actors/exceptions.hpp"
#include "actors/log.hpp"
#include "actors/server_state.hpp"
#include "base/delivery_ledger.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

namespace troupe::actors {

namespace {

// sync mode: one learner's gradient waiting for the step to complete.
struct pending_gradient {
  std::string learner;
  std::string worker;
  uint64_t incarnation = 0;
  uint64_t sequence = 0;
  caf::typed_response_promise<weights_reply> promise;
  uint64_t samples = 0;
  double learning_rate = 0;
  uint64_t batch_env_steps = 0;
  std::vector<float> grad;
  std::vector<float> buffers;
};

struct server_state {
  parameter_server_options opts;
  std::shared_ptr<policy_store> store;
  std::vector<float> params;
  std::vector<float> buffers;
  std::unique_ptr<learners::adam_optimizer> adam;
  parameter_server_status counters;
  // sync mode: the step being gathered, at most one gradient per learner name
  std::vector<pending_gradient> pending;
  std::vector<float> step_grad;
  // sync membership: the learners a step waits for. Until num_learners names
  // were seen, a new name takes one of the `unnamed` places; later a new name
  // (or a join) takes part from the next step, its gradient held meanwhile.
  std::set<std::string> members;
  uint64_t unnamed = 0;
  std::set<std::string> joining;
  std::vector<pending_gradient> next_step;
  // At most once: highest sequence seen per (worker, incarnation) and
  // learner (the channel; gaps allowed), and the fenced incarnations.
  base::delivery_ledger ledger;
  // (worker, incarnation, learner) whose first gradient is not applied yet
  std::set<std::tuple<std::string, uint64_t, std::string>> first_pending;
  uint64_t logged_drops = 0;
  uint64_t logged_rejects = 0;
  bool draining = false; // stopping: answer at once, apply nothing
};

using server_actor = caf::stateful_actor<server_state>;

weights_reply current(const server_state& st, bool applied) {
  return weights_reply{st.counters.version, applied,    st.draining, false,
                       st.params,           st.buffers, false,       false};
}

const std::string& worker_of(const gradient_update& g) {
  return g.worker.empty() ? g.learner : g.worker;
}

// sync: how many gradients the step under way waits for.
uint64_t expected(const server_state& st) {
  return st.members.size() + st.unnamed;
}

// sync: the count-weighted mean of the pending gradients, applied once;
// every waiting learner is answered with the new version. Then the learners
// that joined meanwhile become members and their held gradients open the
// next step.
void complete_step(server_state& st);

void maybe_complete(server_state& st) {
  if (!st.pending.empty() && st.pending.size() >= expected(st))
    complete_step(st);
}

// A batch is counted when its last gradient is applied or dropped (not while
// draining): a checkpoint's counters then match its weights exactly.
void count_batch(server_state& st, uint64_t batch_env_steps) {
  if (batch_env_steps == 0)
    return;
  st.counters.batches += 1;
  st.counters.env_steps += batch_env_steps;
}

// Publishes the current weights as the current version.
void publish_current(server_state& st) {
  if (st.store)
    st.store->publish(st.counters.version, st.params.data(),
                      st.buffers.empty() ? nullptr : st.buffers.data());
}

// Clips and applies one gradient, bumps the version and publishes it.
void apply(server_state& st, std::vector<float>& grad, double lr) {
  if (st.opts.max_grad_norm > 0)
    learners::clip_grad_norm(grad.data(), grad.size(), st.opts.max_grad_norm);
  st.adam->step(st.params.data(), grad.data(), lr);
  st.counters.version += 1;
  publish_current(st);
}

// Batch-norm running statistics sent with a gradient that is applied.
void install_buffers(server_state& st, const std::vector<float>& buffers) {
  if (!buffers.empty() && buffers.size() == st.buffers.size())
    st.buffers = buffers;
}

// Weights and Adam's state from elsewhere (a lone learner's local steps, a
// checkpoint) become the server's: parameters, buffers (kept when `buffers`
// is empty), both moments and the step count. The caller has checked sizes.
void install_weights(server_state& st, std::vector<float>&& params,
                     const std::vector<float>& buffers, std::vector<float>&& adam_m,
                     std::vector<float>&& adam_v, uint64_t adam_steps) {
  st.params = std::move(params);
  install_buffers(st, buffers);
  st.adam->first_moment() = std::move(adam_m);
  st.adam->second_moment() = std::move(adam_v);
  st.adam->set_steps(adam_steps);
}

void complete_step(server_state& s) {
  // The count-weighted mean, in double.
  double total = 0, lr = 0;
  for (auto& q : s.pending) {
    total += static_cast<double>(q.samples);
    lr += q.learning_rate;
  }
  lr /= static_cast<double>(s.pending.size());
  std::vector<double> sum(s.params.size(), 0.0);
  for (auto& q : s.pending) {
    const double w = static_cast<double>(q.samples);
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] += w * q.grad[i];
  }
  s.step_grad.resize(sum.size());
  for (size_t i = 0; i < sum.size(); ++i)
    s.step_grad[i] = static_cast<float>(sum[i] / total);
  install_buffers(s, s.pending.back().buffers); // the last to arrive, as before
  apply(s, s.step_grad, lr);
  s.counters.applied += s.pending.size();
  for (auto& q : s.pending) {
    s.counters.applied_by_learner[q.learner] += 1;
    count_batch(s, q.batch_env_steps);
  }
  auto reply = current(s, true);
  auto waiting = std::move(s.pending);
  s.pending.clear();
  for (auto& q : waiting)
    q.promise.deliver(reply);
  for (auto& name : s.joining)
    s.members.insert(name);
  s.joining.clear();
  s.pending = std::move(s.next_step);
  s.next_step.clear();
  maybe_complete(s);
}

caf::behavior parameter_server(server_actor* self, parameter_server_options opts,
                               std::vector<float> params, std::vector<float> buffers,
                               std::shared_ptr<policy_store> store) {
  auto& st = self->state;
  st.opts = std::move(opts);
  convert_exceptions(self, "parameter server", st.opts.log);
  st.params = std::move(params);
  st.buffers = std::move(buffers);
  st.store = std::move(store);
  st.adam = std::make_unique<learners::adam_optimizer>(st.params.size(), st.opts.adam);
  st.unnamed = st.opts.num_learners;
  return {
    [self](gradient_update& g) -> caf::result<weights_reply> {
      auto& s = self->state;
      s.counters.received += 1;
      if (g.grad.size() != s.params.size())
        return to_caf_error(
          make_error(errc::invalid_argument,
                     "parameter server: gradient from '{}' has {} numbers, "
                     "expected {}",
                     g.learner, g.grad.size(), s.params.size()));
      const uint64_t staleness =
        s.counters.version > g.base_version ? s.counters.version - g.base_version : 0;
      s.counters.max_staleness_seen = std::max(s.counters.max_staleness_seen, staleness);
      if (s.draining)
        return current(s, false);
      if (g.incarnation != 0) {
        const auto& worker = worker_of(g);
        const base::sender_id sender{worker, g.incarnation};
        const bool first = s.ledger.last_accepted(sender, g.learner) == 0;
        // Learners send in order and wait for each answer: a sequence at or
        // below the highest seen is a resend of one handled already.
        const auto verdict = s.ledger.admit(sender, g.learner, g.sequence, g.sequence,
                                            base::sequence_gaps::allowed);
        if (verdict == base::delivery_verdict::fenced) {
          s.counters.fenced += 1;
          s.counters.fenced_by_worker[worker] += 1;
          if (s.counters.fenced_by_worker[worker] <= 5)
            write_log(s.opts.log,
                      fmt::format("parameter server: refused a gradient from '{}' of "
                                  "worker '{}': its incarnation {:#x} is fenced",
                                  g.learner, worker, g.incarnation));
          auto reply = current(s, false);
          reply.rejected = reply.fenced = true;
          return reply;
        }
        if (verdict == base::delivery_verdict::duplicate) {
          s.counters.duplicates += 1;
          auto reply = current(s, false);
          reply.duplicate = true;
          return reply;
        }
        if (first)
          s.first_pending.insert(std::make_tuple(worker, g.incarnation, g.learner));
      }
      // A NaN or infinity would pass the clipping test (a NaN norm compares
      // false) and poison Adam's moments for good: rejected, never applied.
      if (const auto bad = first_non_finite(g); !bad.empty()) {
        s.counters.rejected += 1;
        s.counters.rejected_by_learner[g.learner] += 1;
        s.counters.rejected_by_worker[worker_of(g)] += 1;
        if (s.logged_rejects++ < 5)
          write_log(
            s.opts.log,
            fmt::format("parameter server: rejected a gradient from '{}' "
                        "computed on version {}: {} (rejected from it so far: {})",
                        g.learner, g.base_version, bad,
                        s.counters.rejected_by_learner[g.learner]));
        count_batch(s, g.batch_env_steps);
        auto reply = current(s, false);
        reply.rejected = true;
        return reply;
      }
      if (!s.opts.sync) {
        if (staleness > s.opts.max_staleness) {
          // Dropped whole: its batch-norm buffers are as stale as its gradient.
          s.counters.dropped += 1;
          if (s.logged_drops++ < 5)
            write_log(s.opts.log,
                      fmt::format("parameter server: dropped a gradient from '{}' "
                                  "computed on version {} (now {}, max_staleness {})",
                                  g.learner, g.base_version, s.counters.version,
                                  s.opts.max_staleness));
          count_batch(s, g.batch_env_steps);
          return current(s, false);
        }
        install_buffers(s, g.buffers);
        apply(s, g.grad, g.learning_rate);
        s.counters.applied += 1;
        s.counters.applied_by_learner[g.learner] += 1;
        if (g.incarnation != 0 && s.first_pending.erase(std::make_tuple(
                                    worker_of(g), g.incarnation, g.learner)))
          // An operator's (and the failover figures') sign that a joining
          // host's learner trains: once per learner and incarnation.
          write_log(s.opts.log,
                    fmt::format("parameter server: first gradient applied from '{}' "
                                "(worker '{}', incarnation {:#x}) at version {}",
                                g.learner, worker_of(g), g.incarnation,
                                s.counters.version));
        count_batch(s, g.batch_env_steps);
        return current(s, true);
      }
      // sync: one gradient per learner. A second one under a name already
      // waiting comes from that learner's replacement (a learner waits for
      // the answer before it sends again, and a dead learner's gradient was
      // queued before the supervisor saw it die): the orphan is answered,
      // unapplied, and the replacement's takes its place.
      auto promise = self->make_response_promise<weights_reply>();
      pending_gradient p{g.learner,         worker_of(g),
                         g.incarnation,     g.sequence,
                         promise,           std::max<uint64_t>(g.samples, 1),
                         g.learning_rate,   g.batch_env_steps,
                         std::move(g.grad), std::move(g.buffers)};
      if (!s.members.count(p.learner)) {
        if (s.unnamed > 0 && !s.joining.count(p.learner)) {
          s.unnamed -= 1;
          s.members.insert(p.learner);
        } else if (s.pending.empty()) {
          // No step under way: a new learner takes part at once.
          s.joining.erase(p.learner);
          s.members.insert(p.learner);
        } else {
          // A step is under way: it takes part from the next one.
          s.joining.insert(p.learner);
          auto held = std::find_if(
            s.next_step.begin(), s.next_step.end(),
            [&](const pending_gradient& q) { return q.learner == p.learner; });
          if (held != s.next_step.end()) {
            held->promise.deliver(current(s, false));
            *held = std::move(p);
          } else {
            s.next_step.push_back(std::move(p));
          }
          return promise;
        }
      }
      auto same =
        std::find_if(s.pending.begin(), s.pending.end(),
                     [&](const pending_gradient& q) { return q.learner == p.learner; });
      if (same != s.pending.end()) {
        write_log(s.opts.log,
                  fmt::format("parameter server: a new gradient from '{}' replaces the "
                              "one it sent before (from an earlier incarnation)",
                              p.learner));
        same->promise.deliver(current(s, false));
        *same = std::move(p);
      } else {
        s.pending.push_back(std::move(p));
      }
      maybe_complete(s);
      return promise;
    },
    [self](local_steps& in) -> caf::result<weights_reply> {
      // The only learner of a sync run took `steps` optimizer steps itself
      // (no round trip per gradient): its weights and Adam's state become
      // the server's, as if each gradient had been sent and applied here.
      auto& s = self->state;
      if (s.draining)
        return current(s, false);
      if (in.params.size() != s.params.size() || in.adam_m.size() != s.params.size() ||
          in.adam_v.size() != s.params.size() ||
          (!in.buffers.empty() && in.buffers.size() != s.buffers.size()))
        return to_caf_error(
          make_error(errc::invalid_argument,
                     "parameter server: local steps from '{}' carry {} parameters and {} "
                     "buffers, expected {} and {}",
                     in.learner, in.params.size(), in.buffers.size(), s.params.size(),
                     s.buffers.size()));
      s.counters.received += in.steps + in.rejected;
      if (in.base_version != s.counters.version || !s.pending.empty()) {
        // Another gradient moved the weights meanwhile: not a lone learner.
        write_log(s.opts.log,
                  fmt::format("parameter server: refused {} local steps from '{}' taken "
                              "from version {} (now {})",
                              in.steps, in.learner, in.base_version, s.counters.version));
        auto reply = current(s, false);
        reply.rejected = true;
        return reply;
      }
      install_weights(s, std::move(in.params), in.buffers, std::move(in.adam_m),
                      std::move(in.adam_v), in.adam_steps);
      s.counters.version += in.steps;
      s.counters.applied += in.steps;
      s.counters.applied_by_learner[in.learner] += in.steps;
      if (in.rejected > 0) {
        s.counters.rejected += in.rejected;
        s.counters.rejected_by_learner[in.learner] += in.rejected;
        s.counters.rejected_by_worker[in.learner] += in.rejected;
      }
      if (in.steps > 0)
        publish_current(s);
      count_batch(s, in.batch_env_steps);
      return current(s, true);
    },
    [self](leave_atom, const std::string& learner) -> uint64_t {
      // The learner's host is lost (or it ended): the step under way
      // completes with the rest; its own waiting gradient is answered unapplied.
      auto& s = self->state;
      if (s.members.erase(learner) == 0 && !s.joining.erase(learner) && s.unnamed > 0)
        s.unnamed -= 1; // one of the learners that never sent a gradient
      s.joining.erase(learner);
      for (auto* list : {&s.pending, &s.next_step}) {
        auto it =
          std::find_if(list->begin(), list->end(),
                       [&](const pending_gradient& q) { return q.learner == learner; });
        if (it != list->end()) {
          it->promise.deliver(current(s, false));
          list->erase(it);
        }
      }
      maybe_complete(s);
      return expected(s);
    },
    [self](join_atom, const std::string& learner) -> uint64_t {
      // A new learner: it takes part from the next step, never the one under way.
      auto& s = self->state;
      if (!s.members.count(learner)) {
        if (s.pending.empty())
          s.members.insert(learner);
        else
          s.joining.insert(learner);
      }
      return expected(s);
    },
    [self](fence_atom, const std::string& worker, uint64_t incarnation) -> uint64_t {
      // A lost host's incarnation: its later gradients are refused; one
      // waiting in a sync step is answered refused and leaves the step.
      auto& s = self->state;
      if (s.ledger.fence({worker, incarnation}))
        write_log(s.opts.log,
                  fmt::format("parameter server: fenced worker '{}' incarnation {:#x}: "
                              "its later gradients are refused",
                              worker, incarnation));
      uint64_t refused = 0;
      for (auto* list : {&s.pending, &s.next_step}) {
        for (auto it = list->begin(); it != list->end();) {
          if (it->worker == worker && it->incarnation == incarnation) {
            auto reply = current(s, false);
            reply.rejected = reply.fenced = true;
            it->promise.deliver(std::move(reply));
            s.counters.fenced += 1;
            s.counters.fenced_by_worker[worker] += 1;
            it = list->erase(it);
            ++refused;
          } else {
            ++it;
          }
        }
      }
      maybe_complete(s);
      return refused;
    },
    [self](weights_atom) { return current(self->state, true); },
    [self](stop_atom) {
      // The run is stopping: learners that wait for a sync step that will
      // never complete (another learner stopped first) are answered now.
      auto& s = self->state;
      s.draining = true;
      auto reply = current(s, false);
      for (auto& p : s.pending)
        p.promise.deliver(reply);
      s.pending.clear();
      for (auto& p : s.next_step)
        p.promise.deliver(reply);
      s.next_step.clear();
    },
    [self](status_atom) {
      auto out = self->state.counters;
      out.members = expected(self->state);
      return out;
    },
    [self](state_atom) {
      auto& s = self->state;
      return server_snapshot(s.counters, *s.adam, s.params, s.buffers);
    },
    [self](state_atom, parameter_server_state& in) -> caf::result<uint64_t> {
      auto& s = self->state;
      if (auto bad = restored_state_mismatch("parameter server", in, s.params.size(),
                                             s.buffers.size());
          !bad.empty())
        return to_caf_error(make_error(errc::invalid_argument, "{}", bad));
      install_weights(s, std::move(in.params), in.buffers, std::move(in.adam_m),
                      std::move(in.adam_v), in.adam_steps);
      s.counters = in.counters;
      s.counters.version = in.version;
      publish_current(s);
      return s.counters.version;
    },
  };
}

} // namespace

caf::actor spawn_parameter_server(caf::actor_system& sys, parameter_server_options opts,
                                  std::vector<float> params, std::vector<float> buffers,
                                  std::shared_ptr<policy_store> store,
                                  server_thread where) {
  // Its own thread: every learner waits for its reply, so it must not queue
  // behind the environment runners' batch collections on the scheduler's
  // workers (a quarter of a millisecond each), nor wait for a sleeping worker.
  if (where == server_thread::scheduler)
    return sys.spawn(parameter_server, std::move(opts), std::move(params),
                     std::move(buffers), std::move(store));
  return sys.spawn<caf::detached>(parameter_server, std::move(opts), std::move(params),
                                  std::move(buffers), std::move(store));
}

} // namespace troupe::actors
