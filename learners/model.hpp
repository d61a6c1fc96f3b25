// The MLP actor-critic: its specification, the layout of its tensors under
// PyTorch's names (docs/checkpoints.md, "Tensors"), orthogonal
// initialization and the deterministic evaluation forward pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "learners/stats_view.hpp"

namespace troupe::learners {

/// Activation after every hidden layer.
enum class activation_kind : uint8_t { tanh, relu };

/// Kind of action space: categorical head or diagonal Gaussian head.
enum class action_kind : uint8_t { discrete, box };

/// Batch norm between hidden layers: none, global running statistics from a
/// statistics view, or ordinary per-batch statistics (the naive baseline).
enum class batch_norm_mode : uint8_t { none, global, local };

/// "tanh" or "relu".
const char* to_string(activation_kind kind) noexcept;
/// "discrete" or "box".
const char* to_string(action_kind kind) noexcept;
/// "none", "global" or "local".
const char* to_string(batch_norm_mode mode) noexcept;

/// Parses "tanh" / "relu"; the error names the value and the choices.
result<activation_kind> parse_activation(const std::string& text);
/// Parses "discrete" / "box".
result<action_kind> parse_action_kind(const std::string& text);
/// Parses "none" / "global" / "local".
result<batch_norm_mode> parse_batch_norm(const std::string& text);

/// Everything that rebuilds a policy (together with its tensors).
struct model_spec {
  int64_t obs_dim = 0;                        ///< observation width
  action_kind action = action_kind::discrete; ///< kind of action space
  int64_t n = 0;                              ///< discrete: number of actions
  int64_t act_dim = 0;                        ///< box: action dimension
  std::vector<int64_t> hidden{64, 64};        ///< hidden widths (actor and critic)
  activation_kind activation = activation_kind::tanh; ///< hidden activation
  bool obs_norm = false;                              ///< normalize observations
  double obs_norm_eps = 1e-8;  ///< variance epsilon of the normalizer
  double obs_norm_clip = 10.0; ///< normalized values clip to [-clip, clip]
  batch_norm_mode batch_norm = batch_norm_mode::none; ///< batch norm mode
  double batch_norm_eps = 1e-5;                       ///< variance epsilon of batch norm
  double batch_norm_momentum = 0.1;                   ///< local mode: PyTorch's momentum

  /// Width of the policy head: n for discrete, act_dim for box.
  int64_t head_dim() const noexcept {
    return action == action_kind::discrete ? n : act_dim;
  }

  /// Checks every field; the error names the field, the rule and the value.
  status validate() const;
};

/// A named tensor of the model, viewed in place (row-major, PyTorch shape).
template <class T>
struct basic_tensor_ref {
  std::string name;           ///< PyTorch state_dict key, e.g. "actor.0.weight"
  std::vector<int64_t> shape; ///< PyTorch shape, e.g. {64, 4}
  T* data = nullptr;          ///< product(shape) elements

  /// Number of elements.
  size_t size() const noexcept {
    size_t out = 1;
    for (auto d : shape)
      out *= static_cast<size_t>(d);
    return out;
  }
};

/// Mutable view of one float32 tensor.
using tensor_ref = basic_tensor_ref<float>;
/// Read-only view of one float32 tensor.
using const_tensor_ref = basic_tensor_ref<const float>;

// -- layout ------------------------------------------------------------------

/// Offsets (into the flat parameter vector) of one nn.Linear.
struct linear_slot {
  int64_t in = 0;    ///< input width
  int64_t out = 0;   ///< output width
  size_t weight = 0; ///< offset of weight [out, in]
  size_t bias = 0;   ///< offset of bias [out]
};

/// One nn.BatchNorm1d: affine parameters in the parameter vector, running
/// statistics in the buffer vector.
struct batch_norm_slot {
  std::string prefix;      ///< e.g. "actor.1"; also the statistics stream name
  int64_t width = 0;       ///< number of features
  size_t weight = 0;       ///< parameter offset of the scale (gamma)
  size_t bias = 0;         ///< parameter offset of the shift (beta)
  size_t running_mean = 0; ///< buffer offset of running_mean
  size_t running_var = 0;  ///< buffer offset of running_var
};

/// One hidden stage: Linear, optional BatchNorm1d, activation.
struct hidden_slot {
  linear_slot linear;          ///< the Linear
  bool has_batch_norm = false; ///< whether a BatchNorm1d follows it
  batch_norm_slot batch_norm;  ///< valid when has_batch_norm
};

/// One nn.Sequential: hidden stages then the output Linear.
struct network_layout {
  std::string prefix;              ///< "actor", "actor_mean" or "critic"
  std::vector<hidden_slot> hidden; ///< hidden stages in order
  linear_slot output;              ///< output Linear
};

/// One entry of the tensor list: where a named tensor lives.
struct tensor_slot {
  std::string name;           ///< PyTorch name
  std::vector<int64_t> shape; ///< PyTorch shape
  bool is_buffer = false;     ///< in the buffer vector (else parameters)
  size_t offset = 0;          ///< offset in its vector
  size_t size = 0;            ///< number of elements
};

/// Where every tensor of a model lives.
struct model_layout {
  network_layout actor;             ///< policy network
  network_layout critic;            ///< value network
  bool has_log_std = false;         ///< box: state-independent log-std parameter
  size_t log_std = 0;               ///< parameter offset of actor_logstd [1, act_dim]
  size_t param_count = 0;           ///< trainable float32 numbers
  size_t buffer_count = 0;          ///< non-trainable float32 numbers
  std::vector<tensor_slot> tensors; ///< every tensor in state_dict order
};

/// The layout of a valid spec (call spec.validate() first).
model_layout make_layout(const model_spec& spec);

// -- evaluation output -------------------------------------------------------

/// The arrays actor_critic::evaluate() works in, kept from call to call so
/// that batches of the same size allocate nothing after the first (a copy
/// starts empty).
class evaluate_scratch {
public:
  struct arrays;
  evaluate_scratch();
  ~evaluate_scratch();
  evaluate_scratch(const evaluate_scratch&);
  evaluate_scratch& operator=(const evaluate_scratch&);
  evaluate_scratch(evaluate_scratch&&) noexcept;
  evaluate_scratch& operator=(evaluate_scratch&&) noexcept;

  /// The arrays, created on first use.
  arrays& get();

private:
  std::unique_ptr<arrays> arrays_;
};

/// Deterministic outputs of the policy for a batch of observations.
struct policy_output {
  size_t rows = 0;            ///< number of observations
  std::vector<float> logits;  ///< discrete: [rows x n]
  std::vector<float> mean;    ///< box: [rows x act_dim]
  std::vector<float> log_std; ///< box: [act_dim] (state-independent)
  std::vector<float> value;   ///< [rows]
  evaluate_scratch scratch;   ///< reused by the next evaluate() into this output
};

// -- the model ---------------------------------------------------------------

/// An MLP actor-critic with float32 parameters in CPU memory.
class actor_critic {
public:
  /// A model for `spec` (which must validate()), orthogonally initialized
  /// from `seed` with CleanRL's gains.
  actor_critic(const model_spec& spec, uint64_t seed);

  /// Validates `spec`, then constructs; the error names the bad field.
  static result<actor_critic> create(const model_spec& spec, uint64_t seed);

  /// The spec it was built from.
  const model_spec& spec() const noexcept { return spec_; }

  /// Where every tensor lives in params() and buffers().
  const model_layout& layout() const noexcept { return layout_; }

  /// Every parameter and buffer under its PyTorch name, in state_dict order.
  std::vector<tensor_ref> tensors();
  /// Read-only twin of tensors().
  std::vector<const_tensor_ref> tensors() const;

  /// Flat trainable parameters (layout().param_count floats).
  float* params() noexcept { return params_.data(); }
  /// Read-only twin of params().
  const float* params() const noexcept { return params_.data(); }
  /// Number of trainable floats.
  size_t param_count() const noexcept { return params_.size(); }

  /// Flat buffers: batch-norm running statistics (layout().buffer_count).
  float* buffers() noexcept { return buffers_.data(); }
  /// Read-only twin of buffers().
  const float* buffers() const noexcept { return buffers_.data(); }
  /// Number of buffer floats.
  size_t buffer_count() const noexcept { return buffers_.size(); }

  /// Number of local-mode training steps that updated the running statistics
  /// (PyTorch's BatchNorm1d.num_batches_tracked, not listed by tensors()).
  int64_t num_batches_tracked() const noexcept { return num_batches_tracked_; }
  /// Restores num_batches_tracked (from a checkpoint).
  void set_num_batches_tracked(int64_t n) noexcept { num_batches_tracked_ = n; }

  /// Every batch-norm layer, actor first (empty without batch norm).
  std::vector<batch_norm_slot> batch_norm_layers() const;

  /// Global mode: copies the latest snapshot of each view (one per layer of
  /// batch_norm_layers(), in order) into the running statistics, wait-free.
  status read_global_stats(const std::vector<stats_view*>& views);

  /// Deterministic evaluation forward pass for raw observations [rows x
  /// obs_dim], normalized here with `obs_stats` (required when
  /// spec().obs_norm is set), with batch norm on the running statistics (or,
  /// with `batch_statistics` in local mode, on these rows' own), filling
  /// logits or mean and log_std, and value.
  status evaluate(const float* obs, size_t rows, const stats_snapshot* obs_stats,
                  policy_output& out, bool batch_statistics = false) const;

private:
  model_spec spec_;
  model_layout layout_;
  std::vector<float> params_;
  std::vector<float> buffers_;
  int64_t num_batches_tracked_ = 0;
};

/// Normalizes observations [rows x dim] into `out` with the observation
/// normalizer's formula, in float64 arithmetic, rounding to T.
template <class T>
void normalize_observations(const float* obs, size_t rows, size_t dim, const double* mean,
                            const double* var, double eps, double clip, T* out);

} // namespace troupe::learners
