#include "learners/model.hpp"

#include <cmath>
#include <random>

#include <Eigen/Dense>

#include "learners/backend.hpp"
#include "learners/mlp.hpp"

namespace troupe::learners {

// -- names -------------------------------------------------------------------

const char* to_string(activation_kind kind) noexcept {
  return kind == activation_kind::tanh ? "tanh" : "relu";
}

const char* to_string(action_kind kind) noexcept {
  return kind == action_kind::discrete ? "discrete" : "box";
}

const char* to_string(batch_norm_mode mode) noexcept {
  switch (mode) {
  case batch_norm_mode::none:
    return "none";
  case batch_norm_mode::global:
    return "global";
  case batch_norm_mode::local:
    return "local";
  }
  return "none";
}

result<activation_kind> parse_activation(const std::string& text) {
  if (text == "tanh")
    return activation_kind::tanh;
  if (text == "relu")
    return activation_kind::relu;
  return make_error(errc::invalid_argument,
                    "activation must be one of \"tanh\", \"relu\", got \"{}\"", text);
}

result<action_kind> parse_action_kind(const std::string& text) {
  if (text == "discrete")
    return action_kind::discrete;
  if (text == "box")
    return action_kind::box;
  return make_error(errc::invalid_argument,
                    "action kind must be one of \"discrete\", \"box\", got \"{}\"", text);
}

result<batch_norm_mode> parse_batch_norm(const std::string& text) {
  if (text == "none")
    return batch_norm_mode::none;
  if (text == "global")
    return batch_norm_mode::global;
  if (text == "local")
    return batch_norm_mode::local;
  return make_error(
    errc::invalid_argument,
    "batch_norm must be one of \"none\", \"global\", \"local\", got \"{}\"", text);
}

// -- spec --------------------------------------------------------------------

status model_spec::validate() const {
  constexpr int64_t max_width = 1 << 20;
  if (obs_dim < 1 || obs_dim > max_width)
    return make_error(errc::invalid_argument, "obs_dim must be in [1, {}], got {}",
                      max_width, obs_dim);
  if (action == action_kind::discrete && (n < 2 || n > max_width))
    return make_error(errc::invalid_argument,
                      "a discrete action space needs n in [2, {}], got {}", max_width, n);
  if (action == action_kind::box && (act_dim < 1 || act_dim > max_width))
    return make_error(errc::invalid_argument,
                      "a box action space needs act_dim in [1, {}], got {}", max_width,
                      act_dim);
  for (size_t i = 0; i < hidden.size(); ++i)
    if (hidden[i] < 1 || hidden[i] > max_width)
      return make_error(errc::invalid_argument, "hidden[{}] must be in [1, {}], got {}",
                        i, max_width, hidden[i]);
  if (!(obs_norm_eps > 0.0) || !std::isfinite(obs_norm_eps))
    return make_error(errc::invalid_argument,
                      "obs_norm_eps must be a finite number > 0, got {}", obs_norm_eps);
  if (!(obs_norm_clip > 0.0))
    return make_error(errc::invalid_argument, "obs_norm_clip must be > 0, got {}",
                      obs_norm_clip);
  if (!(batch_norm_eps > 0.0) || !std::isfinite(batch_norm_eps))
    return make_error(errc::invalid_argument,
                      "batch_norm_eps must be a finite number > 0, got {}",
                      batch_norm_eps);
  if (!(batch_norm_momentum > 0.0 && batch_norm_momentum <= 1.0))
    return make_error(errc::invalid_argument,
                      "batch_norm_momentum must be in (0, 1], got {}",
                      batch_norm_momentum);
  if (batch_norm != batch_norm_mode::none && hidden.empty())
    return make_error(errc::invalid_argument,
                      "batch_norm = \"{}\" needs at least one hidden layer",
                      to_string(batch_norm));
  return ok_status();
}

// -- layout ------------------------------------------------------------------

namespace {

struct layout_builder {
  model_layout& layout;

  size_t add_param(std::string name, std::vector<int64_t> shape) {
    return add(std::move(name), std::move(shape), false);
  }

  size_t add_buffer(std::string name, std::vector<int64_t> shape) {
    return add(std::move(name), std::move(shape), true);
  }

  size_t add(std::string name, std::vector<int64_t> shape, bool is_buffer) {
    tensor_slot slot;
    slot.name = std::move(name);
    slot.shape = std::move(shape);
    slot.is_buffer = is_buffer;
    slot.size = 1;
    for (auto d : slot.shape)
      slot.size *= static_cast<size_t>(d);
    auto& counter = is_buffer ? layout.buffer_count : layout.param_count;
    slot.offset = counter;
    counter += slot.size;
    layout.tensors.push_back(slot);
    return slot.offset;
  }

  linear_slot add_linear(const std::string& prefix, int64_t in, int64_t out) {
    linear_slot s;
    s.in = in;
    s.out = out;
    s.weight = add_param(prefix + ".weight", {out, in});
    s.bias = add_param(prefix + ".bias", {out});
    return s;
  }

  network_layout add_network(const std::string& prefix, const model_spec& spec,
                             int64_t out_width) {
    network_layout net;
    net.prefix = prefix;
    const bool bn = spec.batch_norm != batch_norm_mode::none;
    const size_t modules_per_stage = bn ? 3 : 2;
    int64_t in = spec.obs_dim;
    for (size_t l = 0; l < spec.hidden.size(); ++l) {
      hidden_slot stage;
      size_t index = l * modules_per_stage;
      stage.linear = add_linear(prefix + "." + std::to_string(index), in, spec.hidden[l]);
      if (bn) {
        auto& b = stage.batch_norm;
        stage.has_batch_norm = true;
        b.prefix = prefix + "." + std::to_string(index + 1);
        b.width = spec.hidden[l];
        b.weight = add_param(b.prefix + ".weight", {b.width});
        b.bias = add_param(b.prefix + ".bias", {b.width});
        b.running_mean = add_buffer(b.prefix + ".running_mean", {b.width});
        b.running_var = add_buffer(b.prefix + ".running_var", {b.width});
      }
      net.hidden.push_back(std::move(stage));
      in = spec.hidden[l];
    }
    size_t index = spec.hidden.size() * modules_per_stage;
    net.output = add_linear(prefix + "." + std::to_string(index), in, out_width);
    return net;
  }
};

} // namespace

model_layout make_layout(const model_spec& spec) {
  model_layout layout;
  layout_builder builder{layout};
  // state_dict order of CleanRL's Agent: critic is declared first.
  layout.critic = builder.add_network("critic", spec, 1);
  if (spec.action == action_kind::discrete) {
    layout.actor = builder.add_network("actor", spec, spec.n);
  } else {
    layout.actor = builder.add_network("actor_mean", spec, spec.act_dim);
    layout.has_log_std = true;
    layout.log_std = builder.add_param("actor_logstd", {1, spec.act_dim});
  }
  return layout;
}

// -- initialization ----------------------------------------------------------

namespace {

// torch.nn.init.orthogonal_: QR of a Gaussian matrix (transposed when it has
// fewer rows than columns), signs fixed by diag(R), scaled by `gain`.
void orthogonal_init(float* weight, int64_t rows, int64_t cols, double gain,
                     std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  const bool transposed = rows < cols;
  const int64_t tall = transposed ? cols : rows;
  const int64_t wide = transposed ? rows : cols;
  Eigen::MatrixXd a(tall, wide);
  for (int64_t i = 0; i < tall; ++i)
    for (int64_t j = 0; j < wide; ++j)
      a(i, j) = normal(rng);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(tall, wide);
  Eigen::MatrixXd r = qr.matrixQR().topRows(wide).template triangularView<Eigen::Upper>();
  for (int64_t j = 0; j < wide; ++j)
    if (r(j, j) < 0)
      q.col(j) = -q.col(j);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      weight[i * cols + j] = static_cast<float>(gain * (transposed ? q(j, i) : q(i, j)));
}

void init_network(const network_layout& net, double output_gain, float* params,
                  float* buffers, std::mt19937_64& rng) {
  const double hidden_gain = std::sqrt(2.0);
  for (const auto& stage : net.hidden) {
    orthogonal_init(params + stage.linear.weight, stage.linear.out, stage.linear.in,
                    hidden_gain, rng);
    if (stage.has_batch_norm) {
      const auto& bn = stage.batch_norm;
      std::fill(params + bn.weight, params + bn.weight + bn.width, 1.0f);
      std::fill(buffers + bn.running_var, buffers + bn.running_var + bn.width, 1.0f);
    }
  }
  orthogonal_init(params + net.output.weight, net.output.out, net.output.in, output_gain,
                  rng);
}

} // namespace

actor_critic::actor_critic(const model_spec& spec, uint64_t seed)
  : spec_(spec), layout_(make_layout(spec)) {
  auto valid = spec.validate();
  TROUPE_CHECK(valid.ok(), "actor_critic needs a valid spec: {}", valid.err().message);
  params_.assign(layout_.param_count, 0.0f);
  buffers_.assign(layout_.buffer_count, 0.0f);
  std::mt19937_64 rng(seed);
  init_network(layout_.actor, 0.01, params_.data(), buffers_.data(), rng);
  init_network(layout_.critic, 1.0, params_.data(), buffers_.data(), rng);
}

result<actor_critic> actor_critic::create(const model_spec& spec, uint64_t seed) {
  if (auto valid = spec.validate(); !valid)
    return valid.err();
  return actor_critic(spec, seed);
}

// -- tensors -----------------------------------------------------------------

std::vector<tensor_ref> actor_critic::tensors() {
  std::vector<tensor_ref> out;
  out.reserve(layout_.tensors.size());
  for (const auto& t : layout_.tensors)
    out.push_back(
      {t.name, t.shape, (t.is_buffer ? buffers_.data() : params_.data()) + t.offset});
  return out;
}

std::vector<const_tensor_ref> actor_critic::tensors() const {
  std::vector<const_tensor_ref> out;
  out.reserve(layout_.tensors.size());
  for (const auto& t : layout_.tensors)
    out.push_back(
      {t.name, t.shape, (t.is_buffer ? buffers_.data() : params_.data()) + t.offset});
  return out;
}

std::vector<batch_norm_slot> actor_critic::batch_norm_layers() const {
  std::vector<batch_norm_slot> out;
  for (const auto* net : {&layout_.actor, &layout_.critic})
    for (const auto& stage : net->hidden)
      if (stage.has_batch_norm)
        out.push_back(stage.batch_norm);
  return out;
}

status actor_critic::read_global_stats(const std::vector<stats_view*>& views) {
  return copy_global_stats(layout_, views, buffers_.data());
}

// -- evaluation --------------------------------------------------------------

struct evaluate_scratch::arrays {
  std::vector<float> normalized;
  network_cache<float> actor;
  network_cache<float> critic;
};

evaluate_scratch::evaluate_scratch() = default;
evaluate_scratch::~evaluate_scratch() = default;
evaluate_scratch::evaluate_scratch(const evaluate_scratch&) {}
evaluate_scratch& evaluate_scratch::operator=(const evaluate_scratch&) {
  return *this;
}
evaluate_scratch::evaluate_scratch(evaluate_scratch&&) noexcept = default;
evaluate_scratch& evaluate_scratch::operator=(evaluate_scratch&&) noexcept = default;

evaluate_scratch::arrays& evaluate_scratch::get() {
  if (!arrays_)
    arrays_ = std::make_unique<arrays>();
  return *arrays_;
}

status actor_critic::evaluate(const float* obs, size_t rows,
                              const stats_snapshot* obs_stats, policy_output& out,
                              bool batch_statistics) const {
  const size_t dim = static_cast<size_t>(spec_.obs_dim);
  auto& scratch = out.scratch.get();
  const float* input = obs;
  if (spec_.obs_norm) {
    if (!obs_stats)
      return make_error(errc::invalid_argument,
                        "the policy normalizes observations (obs_norm = true) but no "
                        "observation statistics were given");
    if (obs_stats->mean.size() != dim || obs_stats->var.size() != dim)
      return make_error(errc::dimension_mismatch,
                        "observation statistics must have dimension {}, got mean {} and "
                        "var {}",
                        dim, obs_stats->mean.size(), obs_stats->var.size());
    scratch.normalized.resize(rows * dim);
    normalize_observations(obs, rows, dim, obs_stats->mean.data(), obs_stats->var.data(),
                           spec_.obs_norm_eps, spec_.obs_norm_clip,
                           scratch.normalized.data());
    input = scratch.normalized.data();
  }
  const auto mode = batch_statistics ? forward_mode::train : forward_mode::eval;
  network_forward(layout_.actor, spec_, params_.data(), buffers_.data(), input, rows,
                  mode, scratch.actor);
  network_forward(layout_.critic, spec_, params_.data(), buffers_.data(), input, rows,
                  mode, scratch.critic);
  out.rows = rows;
  // Swapped, not moved: the caches keep the previous call's arrays to grow into.
  if (spec_.action == action_kind::discrete) {
    out.logits.swap(scratch.actor.out);
    out.mean.clear();
    out.log_std.clear();
  } else {
    out.logits.clear();
    out.mean.swap(scratch.actor.out);
    out.log_std.assign(params_.begin() + layout_.log_std,
                       params_.begin() + layout_.log_std + spec_.act_dim);
  }
  out.value.swap(scratch.critic.out);
  return ok_status();
}

} // namespace troupe::learners
