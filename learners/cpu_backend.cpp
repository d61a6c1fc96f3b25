// The CPU backend: the batch is split into row shards, one per worker
// thread; every shard runs the float32 forward and backward passes with
// Eigen GEMMs, and the shard gradients are summed with their row weights.
// Local batch norm needs the statistics of the whole batch, so it runs in
// one shard. With split_networks a PPO minibatch is split by network
// instead: the actor's share on the calling thread, the critic's on the
// worker, each writing its own parameters' gradients.
#include <cmath>
#include <algorithm>
#include <chrono>
#include <thread>

#include "kernels/moments.hpp"
#include "base/worker_pool.hpp"
#include "learners/backend.hpp"

namespace troupe::learners {

namespace {

struct shard_state {
  loss_workspace<float> workspace;
  std::vector<float> grad;
  std::vector<kernels::moments> moments;
  loss_report report;
};

class cpu_backend final : public learner_backend {
public:
  cpu_backend(const model_spec& spec, const adam_config& adam,
              const backend_options& opts)
    : spec_(spec), layout_(make_layout(spec)), params_(layout_.param_count),
      buffers_(layout_.buffer_count), grad_(layout_.param_count),
      optimizer_(layout_.param_count, adam),
      pool_(
        std::max(1u, opts.threads ? opts.threads : std::thread::hardware_concurrency()) -
          1,
        opts.split_networks ? split_spin : std::chrono::microseconds{0}),
      split_networks_(opts.split_networks),
      split_(opts.split_networks && spec.batch_norm == batch_norm_mode::none &&
             pool_.size() >= 2),
      actor_begin_(layout_.actor.hidden.empty()
                     ? layout_.actor.output.weight
                     : layout_.actor.hidden.front().linear.weight) {
    shards_.resize(pool_.size());
    for (auto& s : shards_)
      s.grad.resize(layout_.param_count);
  }

  device_kind device() const noexcept override { return device_kind::cpu; }

  status load(const float* params, const float* buffers) override {
    std::copy(params, params + params_.size(), params_.begin());
    std::copy(buffers, buffers + buffers_.size(), buffers_.begin());
    return ok_status();
  }

  status store(float* params, float* buffers) override {
    std::copy(params_.begin(), params_.end(), params);
    std::copy(buffers_.begin(), buffers_.end(), buffers);
    return ok_status();
  }

  status read_global_stats(const std::vector<stats_view*>& views) override {
    return copy_global_stats(layout_, views, buffers_.data());
  }

  result<loss_report> ppo_gradient(const ppo_batch<float>& batch,
                                   const ppo_config& config) override {
    if (batch.rows == 0)
      return make_error(errc::invalid_argument, "a PPO batch needs at least one row");
    if (auto ok =
          validate_actions(spec_, batch.discrete_actions, batch.box_actions, batch.rows);
        !ok)
      return ok.err();
    // Advantages are normalized over the whole batch before it is split.
    ppo_config shard_config = config;
    ppo_batch<float> whole = batch;
    if (config.normalize_advantages) {
      advantages_.resize(batch.rows);
      normalize_advantages(batch.advantages, batch.rows, advantages_.data());
      whole.advantages = advantages_.data();
      shard_config.normalize_advantages = false;
    }
    if (split_)
      return split_gradient(whole, shard_config);
    constexpr size_t min_rows_per_shard = 128;
    // Row shards change the sums' order, which split_networks promises not to.
    size_t shards =
      spec_.batch_norm == batch_norm_mode::local || split_networks_
        ? 1
        : std::clamp<size_t>(batch.rows / min_rows_per_shard, 1, shards_.size());
    const size_t obs_dim = static_cast<size_t>(spec_.obs_dim);
    const size_t act_dim = static_cast<size_t>(spec_.act_dim);
    pool_.run(shards, [&](size_t k) {
      const size_t begin = batch.rows * k / shards;
      const size_t end = batch.rows * (k + 1) / shards;
      ppo_batch<float> part;
      part.rows = end - begin;
      part.obs = whole.obs + begin * obs_dim;
      part.discrete_actions =
        whole.discrete_actions ? whole.discrete_actions + begin : nullptr;
      part.box_actions =
        whole.box_actions ? whole.box_actions + begin * act_dim : nullptr;
      part.old_logprob = whole.old_logprob + begin;
      part.advantages = whole.advantages + begin;
      part.returns = whole.returns + begin;
      part.old_values = whole.old_values + begin;
      auto& s = shards_[k];
      train_options options;
      options.batch_moments = &s.moments;
      s.report = ppo_loss_and_grad(spec_, layout_, params_.data(), buffers_.data(), part,
                                   shard_config, options, s.workspace, s.grad.data());
    });
    loss_report total;
    std::fill(grad_.begin(), grad_.end(), 0.0f);
    moments_.clear();
    for (size_t k = 0; k < shards; ++k) {
      const size_t begin = batch.rows * k / shards;
      const size_t end = batch.rows * (k + 1) / shards;
      const double w = static_cast<double>(end - begin) / static_cast<double>(batch.rows);
      auto& s = shards_[k];
      const float wf = static_cast<float>(w);
      for (size_t i = 0; i < grad_.size(); ++i)
        grad_[i] += wf * s.grad[i];
      total.loss += w * s.report.loss;
      total.policy_loss += w * s.report.policy_loss;
      total.value_loss += w * s.report.value_loss;
      total.entropy += w * s.report.entropy;
      total.approx_kl += w * s.report.approx_kl;
      total.clip_fraction += w * s.report.clip_fraction;
      if (k == 0)
        moments_ = s.moments;
      else
        for (size_t l = 0; l < moments_.size(); ++l)
          kernels::merge(moments_[l], s.moments[l]);
    }
    return total;
  }

  result<loss_report> vtrace_gradient(const vtrace_batch<float>& batch,
                                      const vtrace_config& config) override {
    if (auto ok = validate_vtrace_batch(spec_, batch); !ok)
      return ok.err();
    // The recursion runs along each trajectory, so the batch is not split.
    auto& s = shards_[0];
    train_options options;
    options.batch_moments = &moments_;
    vtrace_targets_buffer<float> targets;
    return vtrace_loss_and_grad(spec_, layout_, params_.data(), buffers_.data(), batch,
                                config, options, targets, s.workspace, grad_.data());
  }

  status read_gradient(float* grad) override {
    std::copy(grad_.begin(), grad_.end(), grad);
    return ok_status();
  }

  result<double> apply_gradient(double lr, double max_grad_norm) override {
    const double norm = global_norm(grad_.data(), grad_.size());
    if (!std::isfinite(norm))
      return norm; // a NaN or an infinity: not applied
    if (split_) {
      // The norm in one pass (its sum's order fixed); the clip and Adam are
      // element by element, so each thread steps its own network's
      // parameters, whose gradient it has just written (the critic's come
      // first, make_layout).
      const auto hyper = optimizer_.begin_step(lr);
      const size_t n = grad_.size();
      const size_t mid = actor_begin_ / 16 * 16; // a cache line's floats apart
      pool_.run(2, [&](size_t k) {
        const size_t begin = k == 0 ? mid : 0, end = k == 0 ? n : mid;
        if (max_grad_norm > 0)
          scale_to_norm(grad_.data() + begin, end - begin, norm, max_grad_norm);
        optimizer_.apply_range(params_.data(), grad_.data(), hyper, begin, end);
      });
      return norm;
    }
    if (max_grad_norm > 0)
      scale_to_norm(grad_.data(), grad_.size(), norm, max_grad_norm);
    optimizer_.step(params_.data(), grad_.data(), lr);
    return norm;
  }

  result<ppo_update_report> ppo_update(const ppo_update_request& request,
                                       const ppo_config& config) override {
    return ppo_update_stepwise(*this, spec_, request, config);
  }

  status read_optimizer(float* m, float* v, int64_t* steps) override {
    std::copy(optimizer_.first_moment().begin(), optimizer_.first_moment().end(), m);
    std::copy(optimizer_.second_moment().begin(), optimizer_.second_moment().end(), v);
    *steps = optimizer_.steps();
    return ok_status();
  }

  status write_optimizer(const float* m, const float* v, int64_t steps) override {
    std::copy(m, m + params_.size(), optimizer_.first_moment().begin());
    std::copy(v, v + params_.size(), optimizer_.second_moment().begin());
    optimizer_.set_steps(steps);
    return ok_status();
  }

  const std::vector<kernels::moments>& batch_moments() const noexcept override {
    return moments_;
  }

private:
  // How long the worker polls for the next minibatch: longer than the
  // optimizer step and the gather between two minibatches (tens of
  // microseconds), far shorter than a runner's batch.
  static constexpr std::chrono::microseconds split_spin{200};

  result<loss_report> split_gradient(const ppo_batch<float>& batch,
                                     const ppo_config& config) {
    // Every parameter belongs to one network (log_std to the actor's share);
    // zeroed first all the same, as the row-shard sum starts from 0.
    std::fill(grad_.begin(), grad_.end(), 0.0f);
    loss_report parts[2];
    pool_.run(2, [&](size_t k) {
      train_options options; // no batch norm: no moments, no running statistics
      parts[k] = ppo_loss_and_grad(spec_, layout_, params_.data(), buffers_.data(), batch,
                                   config, options, shards_[k].workspace, grad_.data(),
                                   k == 0 ? ppo_part::actor : ppo_part::critic);
    });
    moments_.clear();
    return ppo_merge_parts(parts[0], parts[1], config);
  }

  model_spec spec_;
  model_layout layout_;
  std::vector<float> params_;
  std::vector<float> buffers_;
  std::vector<float> grad_;
  std::vector<float> advantages_;
  adam_optimizer optimizer_;
  std::vector<kernels::moments> moments_;
  std::vector<shard_state> shards_;
  base::worker_pool pool_;
  bool split_networks_; // asked for: never row shards
  bool split_;          // and possible: two threads, no batch norm
  size_t actor_begin_;  // the actor's first parameter
};

} // namespace

status validate_actions(const model_spec& spec, const int64_t* discrete_actions,
                        const float* box_actions, size_t rows) {
  if (spec.action == action_kind::box) {
    if (!box_actions && rows > 0)
      return make_error(errc::invalid_argument, "a box policy's batch needs box actions");
    return ok_status();
  }
  if (!discrete_actions && rows > 0)
    return make_error(errc::invalid_argument,
                      "a discrete policy's batch needs action indices");
  for (size_t r = 0; r < rows; ++r)
    if (discrete_actions[r] < 0 || discrete_actions[r] >= spec.n)
      return make_error(errc::invalid_argument,
                        "action of row {} must be in [0, {}), got {}", r, spec.n,
                        discrete_actions[r]);
  return ok_status();
}

status validate_vtrace_batch(const model_spec& spec, const vtrace_batch<float>& batch) {
  if (batch.steps == 0 || batch.envs == 0)
    return make_error(errc::invalid_argument,
                      "a V-trace batch needs steps >= 1 and envs >= 1, got {} and {}",
                      batch.steps, batch.envs);
  return validate_actions(spec, batch.discrete_actions, batch.box_actions,
                          batch.steps * batch.envs);
}

status copy_global_stats(const model_layout& layout,
                         const std::vector<stats_view*>& views, float* buffers) {
  std::vector<const batch_norm_slot*> layers;
  for (const auto* net : {&layout.actor, &layout.critic})
    for (const auto& stage : net->hidden)
      if (stage.has_batch_norm)
        layers.push_back(&stage.batch_norm);
  if (views.size() != layers.size())
    return make_error(
      errc::dimension_mismatch,
      "global batch norm needs one statistics view per layer ({}), got {}", layers.size(),
      views.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& snap = views[i]->read();
    const auto& bn = *layers[i];
    if (snap.mean.size() != static_cast<size_t>(bn.width) ||
        snap.var.size() != static_cast<size_t>(bn.width))
      return make_error(
        errc::dimension_mismatch,
        "statistics for batch-norm layer {} must have dimension {}, got {}", bn.prefix,
        bn.width, snap.mean.size());
    for (int64_t j = 0; j < bn.width; ++j) {
      buffers[bn.running_mean + j] = static_cast<float>(snap.mean[j]);
      buffers[bn.running_var + j] = static_cast<float>(snap.var[j]);
    }
  }
  return ok_status();
}

const char* to_string(device_kind kind) noexcept {
  return kind == device_kind::cpu ? "cpu" : "cuda";
}

// choose_device and make_cuda_backend: learners/cuda_plugin.cpp (the plugin loader).

std::unique_ptr<learner_backend> make_cpu_backend(const model_spec& spec,
                                                  const adam_config& adam,
                                                  const backend_options& options) {
  return std::make_unique<cpu_backend>(spec, adam, options);
}

result<std::unique_ptr<learner_backend>> make_backend(device_kind kind,
                                                      const model_spec& spec,
                                                      const adam_config& adam,
                                                      const backend_options& options) {
  if (auto valid = spec.validate(); !valid)
    return valid.err();
  if (kind == device_kind::cuda)
    return make_cuda_backend(spec, adam, options);
  return make_cpu_backend(spec, adam, options);
}

} // namespace troupe::learners
