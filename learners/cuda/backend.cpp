// The CUDA backend: parameters, optimizer state and every activation live on
// the device; GEMMs go through cuBLAS on the context's stream and the
// elementwise work through the kernels of kernels/cuda/. One step launches
// everything asynchronously and synchronizes once, to copy the loss report
// and the batch-norm moments back.
#include <algorithm>
#include <cmath>

#include "kernels/activation.hpp"
#include "kernels/adam.hpp"
#include "kernels/cuda_context.hpp"
#include "kernels/moments.hpp"
#include "kernels/normalize.hpp"
#include "kernels/policy_heads.hpp"
#include "kernels/ppo_update.hpp"
#include "learners/backend.hpp"

namespace troupe::learners {

namespace {

using kernels::device_array;

#define TROUPE_TRY(expr)                                                                 \
  do {                                                                                   \
    if (auto troupe_try_status = (expr); !troupe_try_status)                             \
      return troupe_try_status.err();                                                    \
  } while (false)

kernels::activation_op to_op(activation_kind kind) {
  return kind == activation_kind::tanh ? kernels::activation_op::tanh
                                       : kernels::activation_op::relu;
}

struct device_stage {
  device_array<float> z, zhat, h;
  device_array<float> mean, var, inv_std;
};

struct device_network {
  std::vector<device_stage> stages;
  device_array<float> out;
};

class cuda_backend final : public learner_backend {
public:
  cuda_backend(const model_spec& spec, const adam_config& adam,
               std::unique_ptr<kernels::cuda_context> context)
    : spec_(spec), layout_(make_layout(spec)), adam_(adam), ctx_(std::move(context)) {}

  status init() {
    TROUPE_TRY(params_.reserve(std::max<size_t>(layout_.param_count, 1)));
    TROUPE_TRY(buffers_.reserve(std::max<size_t>(layout_.buffer_count, 1)));
    TROUPE_TRY(grad_.reserve(std::max<size_t>(layout_.param_count, 1)));
    TROUPE_TRY(m_.reserve(std::max<size_t>(layout_.param_count, 1)));
    TROUPE_TRY(v_.reserve(std::max<size_t>(layout_.param_count, 1)));
    TROUPE_TRY(
      kernels::cuda_zero(grad_.data(), layout_.param_count * sizeof(float), stream()));
    TROUPE_TRY(
      kernels::cuda_zero(m_.data(), layout_.param_count * sizeof(float), stream()));
    TROUPE_TRY(
      kernels::cuda_zero(v_.data(), layout_.param_count * sizeof(float), stream()));
    size_t widest = 1;
    for (auto w : spec_.hidden)
      widest = std::max(widest, static_cast<size_t>(w));
    TROUPE_TRY(zeros_.reserve(widest));
    TROUPE_TRY(kernels::cuda_zero(zeros_.data(), widest * sizeof(float), stream()));
    size_t total = 0;
    for (const auto* net : {&layout_.actor, &layout_.critic})
      for (const auto& stage : net->hidden)
        if (stage.has_batch_norm) {
          moment_offsets_.push_back(total);
          total += 2 * static_cast<size_t>(stage.linear.out) + 1;
        }
    TROUPE_TRY(moments_raw_.reserve(std::max<size_t>(total, 1)));
    actor_.stages.resize(spec_.hidden.size());
    critic_.stages.resize(spec_.hidden.size());
    return ctx_->synchronize();
  }

  device_kind device() const noexcept override { return device_kind::cuda; }

  status load(const float* params, const float* buffers) override {
    TROUPE_TRY(kernels::cuda_copy_to_device(
      params_.data(), params, layout_.param_count * sizeof(float), stream()));
    if (layout_.buffer_count)
      TROUPE_TRY(kernels::cuda_copy_to_device(
        buffers_.data(), buffers, layout_.buffer_count * sizeof(float), stream()));
    return ctx_->synchronize();
  }

  status store(float* params, float* buffers) override {
    TROUPE_TRY(kernels::cuda_copy_to_host(params, params_.data(),
                                          layout_.param_count * sizeof(float), stream()));
    if (layout_.buffer_count)
      TROUPE_TRY(kernels::cuda_copy_to_host(
        buffers, buffers_.data(), layout_.buffer_count * sizeof(float), stream()));
    return ctx_->synchronize();
  }

  status read_global_stats(const std::vector<stats_view*>& views) override {
    // Only the running statistics change: stage them on the host and upload
    // the buffer vector (a few floats per feature).
    host_buffers_.resize(layout_.buffer_count);
    if (layout_.buffer_count == 0)
      return copy_global_stats(layout_, views, host_buffers_.data());
    TROUPE_TRY(kernels::cuda_copy_to_host(host_buffers_.data(), buffers_.data(),
                                          layout_.buffer_count * sizeof(float),
                                          stream()));
    TROUPE_TRY(ctx_->synchronize());
    TROUPE_TRY(copy_global_stats(layout_, views, host_buffers_.data()));
    return kernels::cuda_copy_to_device(buffers_.data(), host_buffers_.data(),
                                        layout_.buffer_count * sizeof(float), stream());
  }

  result<loss_report> ppo_gradient(const ppo_batch<float>& batch,
                                   const ppo_config& config) override {
    const size_t rows = batch.rows;
    if (rows == 0)
      return make_error(errc::invalid_argument, "a PPO batch needs at least one row");
    TROUPE_TRY(validate_actions(spec_, batch.discrete_actions, batch.box_actions, rows));
    const size_t obs_dim = static_cast<size_t>(spec_.obs_dim);
    const size_t head = static_cast<size_t>(spec_.head_dim());
    const bool box = spec_.action == action_kind::box;

    // Advantages are normalized on the host, in float64, before the upload.
    host_adv_.assign(batch.advantages, batch.advantages + rows);
    if (config.normalize_advantages)
      normalize_advantages(host_adv_.data(), rows, host_adv_.data());
    TROUPE_TRY(upload(obs_, batch.obs, rows * obs_dim));
    if (box)
      TROUPE_TRY(upload(box_actions_, batch.box_actions, rows * head));
    else
      TROUPE_TRY(upload(actions_, batch.discrete_actions, rows));
    TROUPE_TRY(upload(old_logp_, batch.old_logprob, rows));
    TROUPE_TRY(upload(adv_, host_adv_.data(), rows));
    TROUPE_TRY(upload(ret_, batch.returns, rows));
    TROUPE_TRY(upload(old_v_, batch.old_values, rows));

    moments_.clear();
    host_moments_.clear();
    moment_index_ = 0;
    TROUPE_TRY(term_sums_.reserve(5));
    TROUPE_TRY(enqueue_ppo(rows, config, term_sums_.data()));
    float sums[5];
    TROUPE_TRY(
      kernels::cuda_copy_to_host(sums, term_sums_.data(), sizeof(sums), stream()));
    TROUPE_TRY(ctx_->synchronize());
    collect_moments();
    return report_of(sums, rows, config);
  }

  bool fuses_updates() const noexcept override { return true; }

  // The whole update as one CUDA graph: the batch and the row order go up
  // once, every minibatch is gathered, normalized, differentiated, clipped
  // and stepped on the device, and the loss reports come back once. The
  // first update of a shape runs eagerly (it sizes every buffer); the next
  // one of the same shape is captured, and later ones replay the graph.
  result<ppo_update_report> ppo_update(const ppo_update_request& request,
                                       const ppo_config& config) override {
    TROUPE_TRY(validate_ppo_update(spec_, request));
    const auto& b = request.batch;
    const size_t rows = b.rows;
    const size_t obs_dim = static_cast<size_t>(spec_.obs_dim);
    const size_t head = static_cast<size_t>(spec_.head_dim());
    const bool box = spec_.action == action_kind::box;
    const size_t mbs = request.minibatches;
    const size_t steps = request.epochs * mbs;
    TROUPE_TRY(upload(full_obs_, b.obs, rows * obs_dim));
    if (box)
      TROUPE_TRY(upload(full_box_, b.box_actions, rows * head));
    else
      TROUPE_TRY(upload(full_actions_, b.discrete_actions, rows));
    TROUPE_TRY(upload(full_old_logp_, b.old_logprob, rows));
    TROUPE_TRY(upload(full_adv_, b.advantages, rows));
    TROUPE_TRY(upload(full_ret_, b.returns, rows));
    TROUPE_TRY(upload(full_old_v_, b.old_values, rows));
    TROUPE_TRY(upload(order_, request.order, request.epochs * rows));
    const size_t widest_mb = (rows + mbs - 1) / mbs;
    TROUPE_TRY(reserve_ppo(widest_mb));
    // Room for many minibatches at once, so that the records seldom move
    // (a graph holds their addresses).
    TROUPE_TRY(update_sums_.reserve(std::max<size_t>(steps, 1024) * 5));
    TROUPE_TRY(update_norms_.reserve(std::max<size_t>(steps, 1024)));
    TROUPE_TRY(norm_partials_.reserve(kernels::squared_norm_partials));
    TROUPE_TRY(term_sums_.reserve(5));
    TROUPE_TRY(control_.reserve(1));
    kernels::device_step_control control;
    control.lr = request.lr;
    control.max_grad_norm = request.max_grad_norm;
    control.beta1 = adam_.beta1;
    control.beta2 = adam_.beta2;
    control.eps = adam_.eps;
    control.step = steps_;
    TROUPE_TRY(
      kernels::cuda_copy_to_device(control_.data(), &control, sizeof(control), stream()));

    // A buffer that moved makes every graph stale.
    if (auto signature = buffer_signature(); signature != graph_buffers_) {
      graphs_.clear();
      graph_buffers_ = std::move(signature);
    }
    ppo_update_report report;
    report.graphed = warmed_ && graph_error_.empty();
    for (size_t e = 0; e < request.epochs; ++e)
      for (size_t m = 0; m < mbs; ++m) {
        const size_t mb = rows * (m + 1) / mbs - rows * m / mbs;
        if (!warmed_ || !graph_error_.empty()) {
          // The first update runs eagerly: it loads the kernels and lets
          // cuBLAS pick its algorithms, which a capture must not be the first
          // to do.
          TROUPE_TRY(enqueue_minibatch(mb, config));
          continue;
        }
        graph_key key{mb,
                      config.clip_coef,
                      config.vf_coef,
                      config.ent_coef,
                      config.clip_value_loss,
                      config.normalize_advantages};
        auto cached = std::find_if(graphs_.begin(), graphs_.end(),
                                   [&](const auto& g) { return g.first == key; });
        if (cached != graphs_.end()) {
          TROUPE_TRY(cached->second.launch(stream()));
        } else if (auto captured = capture_minibatch(mb, config)) {
          if (graphs_.size() >= max_graphs)
            graphs_.erase(graphs_.begin()); // the oldest size
          graphs_.emplace_back(key, std::move(*captured));
          TROUPE_TRY(graphs_.back().second.launch(stream()));
        } else {
          // Nothing recorded ran: this minibatch runs eagerly (loading what
          // the capture missed); after a few failures no capture is tried.
          if (++capture_failures_ >= max_capture_failures)
            graph_error_ = captured.err().message;
          TROUPE_TRY(enqueue_minibatch(mb, config));
          report.graphed = false;
        }
      }
    warmed_ = true;
    report.graph_error = graph_error_;
    host_update_sums_.resize(steps * 5);
    report.norms.resize(steps);
    TROUPE_TRY(kernels::cuda_copy_to_host(host_update_sums_.data(), update_sums_.data(),
                                          steps * 5 * sizeof(float), stream()));
    TROUPE_TRY(kernels::cuda_copy_to_host(report.norms.data(), update_norms_.data(),
                                          steps * sizeof(double), stream()));
    TROUPE_TRY(
      kernels::cuda_copy_to_host(&control, control_.data(), sizeof(control), stream()));
    TROUPE_TRY(ctx_->synchronize());
    steps_ = control.step;
    report.taken = static_cast<size_t>(control.taken);
    report.rejected = static_cast<size_t>(control.rejected);
    for (size_t e = 0; e < request.epochs; ++e)
      for (size_t m = 0; m < mbs; ++m) {
        const size_t mb = rows * (m + 1) / mbs - rows * m / mbs;
        report.losses.push_back(
          report_of(host_update_sums_.data() + (e * mbs + m) * 5, mb, config));
      }
    moments_.clear();
    return report;
  }

  result<loss_report> vtrace_gradient(const vtrace_batch<float>& batch,
                                      const vtrace_config& config) override {
    TROUPE_TRY(validate_vtrace_batch(spec_, batch));
    const size_t n = batch.steps * batch.envs;
    const size_t rows = n + batch.envs;
    const size_t obs_dim = static_cast<size_t>(spec_.obs_dim);
    const size_t head = static_cast<size_t>(spec_.head_dim());
    const bool box = spec_.action == action_kind::box;
    TROUPE_TRY(upload(obs_, batch.obs, rows * obs_dim));
    if (box)
      TROUPE_TRY(upload(box_actions_, batch.box_actions, n * head));
    else
      TROUPE_TRY(upload(actions_, batch.discrete_actions, n));
    moments_.clear();
    host_moments_.clear();
    moment_index_ = 0;
    TROUPE_TRY(forward(layout_.actor, actor_, obs_.data(), rows));
    TROUPE_TRY(forward(layout_.critic, critic_, obs_.data(), rows));
    TROUPE_TRY(head_forward(n));
    // The recursion runs backward in time along each trajectory: a sequential
    // loop of steps * envs numbers, done on the host.
    host_logp_.resize(n);
    host_entropy_.resize(n);
    host_values_.resize(rows);
    TROUPE_TRY(kernels::cuda_copy_to_host(host_logp_.data(), logp_.data(),
                                          n * sizeof(float), stream()));
    TROUPE_TRY(kernels::cuda_copy_to_host(host_entropy_.data(), entropy_.data(),
                                          n * sizeof(float), stream()));
    TROUPE_TRY(kernels::cuda_copy_to_host(host_values_.data(), critic_.out.data(),
                                          rows * sizeof(float), stream()));
    TROUPE_TRY(ctx_->synchronize());
    std::vector<float> log_rhos(n), vs(n), adv(n);
    for (size_t i = 0; i < n; ++i)
      log_rhos[i] = host_logp_[i] - batch.behavior_logprob[i];
    vtrace_targets(batch.steps, batch.envs, log_rhos.data(), batch.discounts,
                   batch.rewards, host_values_.data(), host_values_.data() + n, config,
                   vs.data(), adv.data());
    std::vector<float> d_logp(n), d_entropy(n), d_value(rows, 0.0f);
    const float inv_n = 1.0f / static_cast<float>(n);
    double pg = 0, vl = 0, ent = 0;
    for (size_t i = 0; i < n; ++i) {
      pg -= static_cast<double>(host_logp_[i]) * adv[i];
      d_logp[i] = -adv[i] * inv_n;
      const float err = host_values_[i] - vs[i];
      vl += static_cast<double>(err) * err;
      d_value[i] = static_cast<float>(config.baseline_coef) * err * inv_n;
      ent += host_entropy_[i];
      d_entropy[i] = -static_cast<float>(config.ent_coef) * inv_n;
    }
    TROUPE_TRY(upload(d_logp_, d_logp.data(), n));
    TROUPE_TRY(upload(d_entropy_, d_entropy.data(), n));
    TROUPE_TRY(upload(d_value_, d_value.data(), rows));
    TROUPE_TRY(d_head_.reserve(rows * head));
    TROUPE_TRY(kernels::cuda_zero(d_head_.data(), rows * head * sizeof(float), stream()));
    TROUPE_TRY(head_backward(n));
    TROUPE_TRY(backward(layout_.actor, actor_, obs_.data(), rows, d_head_.data()));
    TROUPE_TRY(backward(layout_.critic, critic_, obs_.data(), rows, d_value_.data()));
    TROUPE_TRY(ctx_->synchronize());
    collect_moments();
    loss_report report;
    const double count = static_cast<double>(n);
    report.policy_loss = pg / count;
    report.value_loss = 0.5 * vl / count;
    report.entropy = ent / count;
    report.loss = report.policy_loss + config.baseline_coef * report.value_loss -
                  config.ent_coef * report.entropy;
    return report;
  }

  status read_gradient(float* grad) override {
    TROUPE_TRY(kernels::cuda_copy_to_host(grad, grad_.data(),
                                          layout_.param_count * sizeof(float), stream()));
    return ctx_->synchronize();
  }

  result<double> apply_gradient(double lr, double max_grad_norm) override {
    auto norm = ctx_->norm2(grad_.data(), layout_.param_count);
    if (!norm)
      return norm.err();
    if (!std::isfinite(*norm))
      return *norm; // a NaN or an infinity: not applied
    if (max_grad_norm > 0) {
      const double coef = max_grad_norm / (*norm + 1e-6);
      if (coef < 1.0)
        TROUPE_TRY(
          ctx_->scale(grad_.data(), layout_.param_count, static_cast<float>(coef)));
    }
    ++steps_;
    auto hyper = adam_hyper_for(adam_, lr, steps_);
    TROUPE_TRY(kernels::cuda_adam_step_async(params_.data(), grad_.data(), m_.data(),
                                             v_.data(), layout_.param_count, hyper,
                                             stream()));
    return *norm;
  }

  status read_optimizer(float* m, float* v, int64_t* steps) override {
    const size_t bytes = layout_.param_count * sizeof(float);
    TROUPE_TRY(kernels::cuda_copy_to_host(m, m_.data(), bytes, stream()));
    TROUPE_TRY(kernels::cuda_copy_to_host(v, v_.data(), bytes, stream()));
    TROUPE_TRY(ctx_->synchronize());
    *steps = steps_;
    return ok_status();
  }

  status write_optimizer(const float* m, const float* v, int64_t steps) override {
    if (steps < 0)
      return make_error(errc::invalid_argument, "Adam's step count must be >= 0, got {}",
                        steps);
    const size_t bytes = layout_.param_count * sizeof(float);
    TROUPE_TRY(kernels::cuda_copy_to_device(m_.data(), m, bytes, stream()));
    TROUPE_TRY(kernels::cuda_copy_to_device(v_.data(), v, bytes, stream()));
    TROUPE_TRY(ctx_->synchronize());
    steps_ = steps;
    return ok_status();
  }

  const std::vector<kernels::moments>& batch_moments() const noexcept override {
    return moments_;
  }

private:
  // What a captured minibatch depends on besides the buffers' addresses: its
  // rows and the constants baked into its kernels.
  struct graph_key {
    size_t rows = 0;
    double clip = 0, vf = 0, ent = 0;
    bool clip_value = false, normalize = false;
    bool operator==(const graph_key& o) const {
      return rows == o.rows && clip == o.clip && vf == o.vf && ent == o.ent &&
             clip_value == o.clip_value && normalize == o.normalize;
    }
  };

  void* stream() const noexcept { return ctx_->stream(); }

  // The loss report of a minibatch of `rows` rows from its five term sums.
  static loss_report report_of(const float* sums, size_t rows, const ppo_config& config) {
    loss_report report;
    const double n = static_cast<double>(rows);
    report.policy_loss = sums[0] / n;
    report.value_loss = 0.5 * sums[1] / n;
    report.entropy = sums[2] / n;
    report.approx_kl = sums[3] / n;
    report.clip_fraction = sums[4] / n;
    report.loss = report.policy_loss + config.vf_coef * report.value_loss -
                  config.ent_coef * report.entropy;
    return report;
  }

  // The addresses of every buffer a captured update touches, and the
  // context's reallocation count: when one moved, the graph is stale.
  std::vector<const void*> buffer_signature() const {
    std::vector<const void*> out{params_.data(),
                                 grad_.data(),
                                 m_.data(),
                                 v_.data(),
                                 zeros_.data(),
                                 obs_.data(),
                                 box_actions_.data(),
                                 old_logp_.data(),
                                 adv_.data(),
                                 ret_.data(),
                                 old_v_.data(),
                                 actions_.data(),
                                 logp_.data(),
                                 entropy_.data(),
                                 head_aux_.data(),
                                 d_logp_.data(),
                                 d_entropy_.data(),
                                 d_value_.data(),
                                 terms_.data(),
                                 d_head_.data(),
                                 d_log_std_rows_.data(),
                                 d_a_.data(),
                                 d_b_.data(),
                                 full_obs_.data(),
                                 full_box_.data(),
                                 full_actions_.data(),
                                 full_old_logp_.data(),
                                 full_adv_.data(),
                                 full_ret_.data(),
                                 full_old_v_.data(),
                                 order_.data(),
                                 update_sums_.data(),
                                 update_norms_.data(),
                                 norm_partials_.data(),
                                 term_sums_.data(),
                                 control_.data(),
                                 actor_.out.data(),
                                 critic_.out.data()};
    for (const auto* net : {&actor_, &critic_})
      for (const auto& st : net->stages)
        for (const auto* a : {&st.z, &st.zhat, &st.h, &st.mean, &st.var, &st.inv_std})
          out.push_back(a->data());
    out.push_back(
      reinterpret_cast<const void*>(static_cast<uintptr_t>(ctx_->generation())));
    return out;
  }

  // Sizes every buffer a minibatch of up to `rows` rows uses, so that
  // enqueue_ppo allocates nothing (a captured stream must not).
  status reserve_ppo(size_t rows) {
    const size_t obs_dim = static_cast<size_t>(spec_.obs_dim);
    const size_t head = static_cast<size_t>(spec_.head_dim());
    size_t widest = 1;
    for (auto w : spec_.hidden)
      widest = std::max(widest, static_cast<size_t>(w));
    for (auto* a : {&obs_})
      TROUPE_TRY(a->reserve(rows * obs_dim));
    for (auto* a : {&box_actions_, &head_aux_, &d_head_, &d_log_std_rows_})
      TROUPE_TRY(a->reserve(rows * head));
    TROUPE_TRY(actions_.reserve(rows));
    for (auto* a : {&old_logp_, &adv_, &ret_, &old_v_, &logp_, &entropy_, &d_logp_,
                    &d_entropy_, &d_value_})
      TROUPE_TRY(a->reserve(rows));
    TROUPE_TRY(terms_.reserve(rows * 5));
    TROUPE_TRY(d_a_.reserve(rows * widest));
    TROUPE_TRY(d_b_.reserve(rows * widest));
    for (auto [net, dn] :
         {std::pair{&layout_.actor, &actor_}, std::pair{&layout_.critic, &critic_}}) {
      for (size_t l = 0; l < net->hidden.size(); ++l) {
        const size_t width = static_cast<size_t>(net->hidden[l].linear.out);
        TROUPE_TRY(dn->stages[l].z.reserve(rows * width));
        TROUPE_TRY(dn->stages[l].h.reserve(rows * width));
      }
      TROUPE_TRY(dn->out.reserve(rows * static_cast<size_t>(net->output.out)));
    }
    return ctx_->reserve_rows(rows);
  }

  // The policy head over the first `rows` rows of the actor's output: the
  // log-probability of each row's action (box_actions_ or actions_) into
  // logp_, the entropy into entropy_, what the backward pass needs into
  // head_aux_.
  status head_forward(size_t rows) {
    const size_t head = static_cast<size_t>(spec_.head_dim());
    TROUPE_TRY(logp_.reserve(rows));
    TROUPE_TRY(entropy_.reserve(rows));
    TROUPE_TRY(head_aux_.reserve(rows * head));
    if (spec_.action == action_kind::box)
      return kernels::cuda_gaussian_forward_async(
        actor_.out.data(), params_.data() + layout_.log_std, box_actions_.data(), rows,
        head, head_aux_.data(), logp_.data(), entropy_.data(), stream());
    return kernels::cuda_categorical_forward_async(
      actor_.out.data(), actions_.data(), rows, head, head_aux_.data(), logp_.data(),
      entropy_.data(), stream());
  }

  // The head's backward pass over `rows` rows from d_logp_ and d_entropy_:
  // the gradient of the actor's output into d_head_ (sized by the caller) and,
  // for a box head, the log-std's gradient into grad_.
  status head_backward(size_t rows) {
    const size_t head = static_cast<size_t>(spec_.head_dim());
    if (spec_.action != action_kind::box)
      return kernels::cuda_categorical_backward_async(
        head_aux_.data(), entropy_.data(), actions_.data(), d_logp_.data(),
        d_entropy_.data(), rows, head, d_head_.data(), stream());
    TROUPE_TRY(d_log_std_rows_.reserve(rows * head));
    TROUPE_TRY(kernels::cuda_gaussian_backward_async(
      head_aux_.data(), params_.data() + layout_.log_std, d_logp_.data(),
      d_entropy_.data(), rows, head, d_head_.data(), d_log_std_rows_.data(), stream()));
    return ctx_->column_sums(d_log_std_rows_.data(), rows, head,
                             grad_.data() + layout_.log_std);
  }

  // Enqueues the loss and gradient (into grad_) of the minibatch in obs_,
  // actions_ or box_actions_, old_logp_, adv_ (normalized), ret_ and old_v_,
  // with its five term sums written to `sums` (device): no host
  // synchronization, and no allocation once reserve_ppo(rows) was called.
  status enqueue_ppo(size_t rows, const ppo_config& config, float* sums) {
    const size_t head = static_cast<size_t>(spec_.head_dim());
    TROUPE_TRY(forward(layout_.actor, actor_, obs_.data(), rows));
    TROUPE_TRY(forward(layout_.critic, critic_, obs_.data(), rows));

    TROUPE_TRY(head_forward(rows));
    TROUPE_TRY(d_logp_.reserve(rows));
    TROUPE_TRY(d_entropy_.reserve(rows));
    TROUPE_TRY(d_value_.reserve(rows));
    TROUPE_TRY(terms_.reserve(rows * 5));
    kernels::ppo_term_constants c;
    c.clip = static_cast<float>(config.clip_coef);
    c.vf_coef = static_cast<float>(config.vf_coef);
    c.ent_coef = static_cast<float>(config.ent_coef);
    c.inv_rows = 1.0f / static_cast<float>(rows);
    c.clip_value_loss = config.clip_value_loss;
    TROUPE_TRY(kernels::cuda_ppo_terms_async(
      logp_.data(), entropy_.data(), critic_.out.data(), old_logp_.data(), adv_.data(),
      ret_.data(), old_v_.data(), rows, c, d_logp_.data(), d_entropy_.data(),
      d_value_.data(), terms_.data(), stream()));
    TROUPE_TRY(ctx_->column_sums(terms_.data(), rows, 5, sums));

    TROUPE_TRY(d_head_.reserve(rows * head));
    TROUPE_TRY(head_backward(rows));
    TROUPE_TRY(backward(layout_.actor, actor_, obs_.data(), rows, d_head_.data()));
    return backward(layout_.critic, critic_, obs_.data(), rows, d_value_.data());
  }

  // Records one minibatch of `rows` rows into a graph (run by launching it).
  result<kernels::cuda_graph> capture_minibatch(size_t rows, const ppo_config& config) {
    TROUPE_TRY(ctx_->begin_capture());
    auto enqueued = enqueue_minibatch(rows, config);
    auto captured = ctx_->end_capture();
    if (!enqueued)
      return enqueued.err();
    return captured;
  }

  // Enqueues the next minibatch of a whole update (see ppo_update): its
  // rows are read from full_*_ at the order's device-side cursor, and its
  // records go to the device-side index, so that the same work serves every
  // minibatch of its size. No host synchronization, no allocation.
  status enqueue_minibatch(size_t mb, const ppo_config& config) {
    const size_t obs_dim = static_cast<size_t>(spec_.obs_dim);
    const size_t head = static_cast<size_t>(spec_.head_dim());
    const bool box = spec_.action == action_kind::box;
    const size_t n = layout_.param_count;
    kernels::gather_part parts[6] = {
      {full_obs_.data(), obs_.data(), obs_dim, sizeof(float)},
      box
        ? kernels::gather_part{full_box_.data(), box_actions_.data(), head, sizeof(float)}
        : kernels::gather_part{full_actions_.data(), actions_.data(), 1, sizeof(int64_t)},
      {full_old_logp_.data(), old_logp_.data(), 1, sizeof(float)},
      {full_adv_.data(), adv_.data(), 1, sizeof(float)},
      {full_ret_.data(), ret_.data(), 1, sizeof(float)},
      {full_old_v_.data(), old_v_.data(), 1, sizeof(float)}};
    TROUPE_TRY(kernels::cuda_gather_parts_async(order_.data(), control_.data(), mb, parts,
                                                6, stream()));
    if (config.normalize_advantages)
      TROUPE_TRY(kernels::cuda_normalize_advantages_async(adv_.data(), mb, stream()));
    TROUPE_TRY(enqueue_ppo(mb, config, term_sums_.data()));
    TROUPE_TRY(
      kernels::cuda_squared_norm_async(grad_.data(), n, norm_partials_.data(), stream()));
    TROUPE_TRY(kernels::cuda_step_prepare_async(norm_partials_.data(), term_sums_.data(),
                                                mb, control_.data(), update_norms_.data(),
                                                update_sums_.data(), stream()));
    return kernels::cuda_clipped_adam_step_async(params_.data(), grad_.data(), m_.data(),
                                                 v_.data(), n, control_.data(), stream());
  }

  // Turns the raw (count, mean, m2) copies of the last forward into moments.
  void collect_moments() {
    for (const auto& raw : host_moments_) {
      const size_t width = (raw.size() - 1) / 2;
      kernels::moments m(width);
      m.count = static_cast<uint64_t>(raw[0]);
      std::copy(raw.begin() + 1, raw.begin() + 1 + width, m.mean.begin());
      std::copy(raw.begin() + 1 + width, raw.end(), m.m2.begin());
      moments_.push_back(std::move(m));
    }
  }

  template <class T>
  status upload(device_array<T>& dst, const T* src, size_t count) {
    TROUPE_TRY(dst.reserve(std::max<size_t>(count, 1)));
    return kernels::cuda_copy_to_device(dst.data(), src, count * sizeof(T), stream());
  }

  status forward(const network_layout& net, device_network& dn, const float* input,
                 size_t rows) {
    const float* x = input;
    const auto act = to_op(spec_.activation);
    for (size_t l = 0; l < net.hidden.size(); ++l) {
      const auto& stage = net.hidden[l];
      auto& ds = dn.stages[l];
      const size_t in = static_cast<size_t>(stage.linear.in);
      const size_t width = static_cast<size_t>(stage.linear.out);
      TROUPE_TRY(ds.z.reserve(rows * width));
      TROUPE_TRY(ds.h.reserve(rows * width));
      if (!stage.has_batch_norm) {
        // No batch norm: nothing reads the pre-activation, so the GEMM writes
        // straight into h and the activation runs in place (a pass saved).
        TROUPE_TRY(ctx_->gemm_x_wt(x, params_.data() + stage.linear.weight, rows, in,
                                   width, ds.h.data()));
        TROUPE_TRY(kernels::cuda_bias_activation_async(
          ds.h.data(), params_.data() + stage.linear.bias, rows, width, act, ds.h.data(),
          stream()));
      } else {
        TROUPE_TRY(ctx_->gemm_x_wt(x, params_.data() + stage.linear.weight, rows, in,
                                   width, ds.z.data()));
        const auto& bn = stage.batch_norm;
        TROUPE_TRY(kernels::cuda_bias_activation_async(
          ds.z.data(), params_.data() + stage.linear.bias, rows, width,
          kernels::activation_op::identity, ds.z.data(), stream()));
        TROUPE_TRY(ds.zhat.reserve(rows * width));
        TROUPE_TRY(ds.mean.reserve(width));
        TROUPE_TRY(ds.var.reserve(width));
        TROUPE_TRY(ds.inv_std.reserve(width));
        // The batch's moments: the delta for the keeper, and in local mode
        // the statistics this forward normalizes with. Each layer has its
        // own slot, so no copy back waits on a later layer.
        const size_t ws_bytes = kernels::cuda_moments_workspace_bytes(rows, width);
        auto ws = ctx_->workspace(ws_bytes);
        if (!ws)
          return ws.err();
        double* raw = moments_raw_.data() + moment_offsets_[moment_index_];
        ++moment_index_;
        TROUPE_TRY(kernels::cuda_moments_async(ds.z.data(), rows, width, raw, *ws,
                                               ws_bytes, stream()));
        host_moments_.emplace_back(2 * width + 1);
        TROUPE_TRY(kernels::cuda_copy_to_host(
          host_moments_.back().data(), raw, (2 * width + 1) * sizeof(double), stream()));
        const float* mean = ds.mean.data();
        if (spec_.batch_norm == batch_norm_mode::local) {
          TROUPE_TRY(kernels::cuda_moments_to_stats_async(
            raw, width, spec_.batch_norm_eps, ds.mean.data(), ds.var.data(),
            ds.inv_std.data(), stream()));
          TROUPE_TRY(kernels::cuda_running_stats_update_async(
            raw, width, spec_.batch_norm_momentum, buffers_.data() + bn.running_mean,
            buffers_.data() + bn.running_var, stream()));
        } else {
          mean = buffers_.data() + bn.running_mean;
          TROUPE_TRY(kernels::cuda_inverse_std_async(buffers_.data() + bn.running_var,
                                                     width, spec_.batch_norm_eps,
                                                     ds.inv_std.data(), stream()));
        }
        TROUPE_TRY(kernels::cuda_batch_norm_forward_async(
          ds.z.data(), mean, ds.inv_std.data(), params_.data() + bn.weight,
          params_.data() + bn.bias, rows, width, ds.zhat.data(), ds.h.data(), stream()));
        TROUPE_TRY(kernels::cuda_bias_activation_async(
          ds.h.data(), zeros_.data(), rows, width, act, ds.h.data(), stream()));
      }
      x = ds.h.data();
    }
    const auto& out = net.output;
    TROUPE_TRY(dn.out.reserve(rows * static_cast<size_t>(out.out)));
    TROUPE_TRY(ctx_->gemm_x_wt(x, params_.data() + out.weight, rows,
                               static_cast<size_t>(out.in), static_cast<size_t>(out.out),
                               dn.out.data()));
    return kernels::cuda_bias_activation_async(
      dn.out.data(), params_.data() + out.bias, rows, static_cast<size_t>(out.out),
      kernels::activation_op::identity, dn.out.data(), stream());
  }

  status backward(const network_layout& net, device_network& dn, const float* input,
                  size_t rows, const float* d_output) {
    const auto& out = net.output;
    const size_t stages = net.hidden.size();
    const float* last = stages ? dn.stages.back().h.data() : input;
    const size_t out_in = static_cast<size_t>(out.in),
                 out_w = static_cast<size_t>(out.out);
    TROUPE_TRY(
      ctx_->gemm_dzt_x(d_output, last, rows, out_in, out_w, grad_.data() + out.weight));
    TROUPE_TRY(ctx_->column_sums(d_output, rows, out_w, grad_.data() + out.bias));
    if (stages == 0)
      return ok_status();
    size_t widest = 1;
    for (auto w : spec_.hidden)
      widest = std::max(widest, static_cast<size_t>(w));
    TROUPE_TRY(d_a_.reserve(rows * widest));
    TROUPE_TRY(d_b_.reserve(rows * widest));
    TROUPE_TRY(ctx_->gemm_dz_w(d_output, params_.data() + out.weight, rows, out_in, out_w,
                               d_a_.data()));
    const auto act = to_op(spec_.activation);
    for (size_t l = stages; l-- > 0;) {
      const auto& stage = net.hidden[l];
      auto& ds = dn.stages[l];
      const size_t width = static_cast<size_t>(stage.linear.out);
      const size_t in = static_cast<size_t>(stage.linear.in);
      TROUPE_TRY(kernels::cuda_activation_backward_async(ds.h.data(), d_a_.data(),
                                                         rows * width, act, stream()));
      float* d_linear = d_a_.data();
      if (stage.has_batch_norm) {
        const auto& bn = stage.batch_norm;
        // dgamma = colsum(dy zhat), dbeta = colsum(dy); the product goes to
        // d_b, which then receives dz.
        TROUPE_TRY(kernels::cuda_multiply_async(d_a_.data(), ds.zhat.data(), rows * width,
                                                d_b_.data(), stream()));
        TROUPE_TRY(ctx_->column_sums(d_b_.data(), rows, width, grad_.data() + bn.weight));
        TROUPE_TRY(ctx_->column_sums(d_a_.data(), rows, width, grad_.data() + bn.bias));
        TROUPE_TRY(kernels::cuda_batch_norm_backward_async(
          d_a_.data(), ds.zhat.data(), params_.data() + bn.weight, ds.inv_std.data(),
          grad_.data() + bn.bias, grad_.data() + bn.weight, rows, width,
          spec_.batch_norm == batch_norm_mode::local, d_b_.data(), stream()));
        d_linear = d_b_.data();
      }
      const float* x = l == 0 ? input : dn.stages[l - 1].h.data();
      TROUPE_TRY(ctx_->gemm_dzt_x(d_linear, x, rows, in, width,
                                  grad_.data() + stage.linear.weight));
      TROUPE_TRY(
        ctx_->column_sums(d_linear, rows, width, grad_.data() + stage.linear.bias));
      if (l > 0) {
        float* target = d_linear == d_a_.data() ? d_b_.data() : d_a_.data();
        TROUPE_TRY(ctx_->gemm_dz_w(d_linear, params_.data() + stage.linear.weight, rows,
                                   in, width, target));
        if (target == d_b_.data())
          std::swap(d_a_, d_b_);
      }
    }
    return ok_status();
  }

  model_spec spec_;
  model_layout layout_;
  adam_config adam_;
  std::unique_ptr<kernels::cuda_context> ctx_;
  device_array<float> params_, buffers_, grad_, m_, v_, zeros_;
  device_array<float> obs_, box_actions_, old_logp_, adv_, ret_, old_v_;
  device_array<int64_t> actions_;
  device_network actor_, critic_;
  device_array<float> logp_, entropy_, head_aux_, d_logp_, d_entropy_, d_value_, terms_,
    term_sums_, d_head_, d_log_std_rows_, d_a_, d_b_;
  device_array<double> moments_raw_;
  std::vector<size_t> moment_offsets_; // per batch-norm layer, into moments_raw_
  size_t moment_index_ = 0;
  std::vector<std::vector<double>> host_moments_;
  std::vector<kernels::moments> moments_;
  std::vector<float> host_adv_, host_logp_, host_entropy_, host_values_, host_buffers_;
  int64_t steps_ = 0;
  // the whole update (ppo_update)
  device_array<float> full_obs_, full_box_, full_old_logp_, full_adv_, full_ret_,
    full_old_v_, update_sums_;
  device_array<int64_t> full_actions_;
  device_array<uint32_t> order_;
  device_array<double> update_norms_, norm_partials_;
  device_array<kernels::device_step_control> control_;
  std::vector<float> host_update_sums_;
  // Captured minibatches by size (a batch's valid rows vary with its
  // episode ends, and so its minibatches' sizes), oldest first; all of them
  // used the buffers in graph_buffers_.
  static constexpr size_t max_graphs = 64;
  static constexpr int max_capture_failures = 4;
  std::vector<std::pair<graph_key, kernels::cuda_graph>> graphs_;
  std::vector<const void*> graph_buffers_;
  bool warmed_ = false;      // an update ran eagerly once
  int capture_failures_ = 0; // captures that failed so far
  std::string graph_error_;  // the last failure's reason, once updates run eagerly
  kernels::cuda_graph graph_;
};

} // namespace

result<std::unique_ptr<learner_backend>>
create_cuda_backend(const model_spec& spec, const adam_config& adam,
                    const backend_options& options) {
  if (auto valid = spec.validate(); !valid)
    return valid.err();
  auto ctx = kernels::cuda_context::create(0, options.allow_tf32);
  if (!ctx)
    return ctx.err();
  auto backend = std::make_unique<cuda_backend>(spec, adam, std::move(*ctx));
  if (auto st = backend->init(); !st)
    return st.err();
  return std::unique_ptr<learner_backend>(std::move(backend));
}

} // namespace troupe::learners
