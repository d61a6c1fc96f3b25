// The learner's compute backend: one interface over a CPU implementation
// (Eigen, worker threads) and a CUDA one (cuBLAS, kernels/cuda/), each holding
// one learner's parameters, optimizer state and scratch (docs/learners.md, "Backends").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "kernels/moments.hpp"
#include "learners/losses.hpp"
#include "learners/model.hpp"
#include "learners/optimizer.hpp"

namespace troupe::learners {

/// Where a backend computes.
enum class device_kind : uint8_t { cpu, cuda };

/// "cpu" or "cuda".
const char* to_string(device_kind kind) noexcept;

/// The device a `[run] device` setting resolves to, and why.
struct device_choice {
  device_kind kind = device_kind::cpu; ///< the chosen device
  std::string reason;                  ///< one line for the start-up message
};

/// Resolves "auto" | "cpu" | "cuda". "auto" takes the GPU when the CUDA
/// runtime finds one; "cuda" without a device (or a build without CUDA) is
/// an error that says which.
result<device_choice> choose_device(const std::string& setting);

/// Options of a backend beyond the model and the optimizer.
struct backend_options {
  /// CPU: worker threads the batch is split across (0: hardware threads).
  unsigned threads = 0;
  /// CPU with threads >= 2, a model without batch norm: a PPO minibatch's
  /// actor and critic run on two threads at once (ppo_part; the same floats
  /// as one thread), never row shards, and an idle worker polls for the next
  /// minibatch instead of sleeping between them. For a learner whose
  /// minibatches come back to back while nothing else runs (sync PPO).
  bool split_networks = false;
  /// CUDA: allow TF32 tensor-core GEMMs (faster, ~1e-3 relative error).
  bool allow_tf32 = false;
};

/// A whole PPO update handed to a backend at once: `epochs` passes over a
/// batch of `batch.rows` rows, each pass cut into `minibatches` minibatches
/// in the order `order` gives, each minibatch a gradient, a clip and an Adam
/// step with nobody else's weights in between.
struct ppo_update_request {
  ppo_batch<float> batch; ///< the whole batch (advantages not normalized)
  const uint32_t* order =
    nullptr;                ///< epochs x batch.rows row indices, each pass a permutation
  size_t epochs = 1;        ///< passes over the batch
  size_t minibatches = 1;   ///< per pass; minibatch m of a pass holds positions
                            ///< [rows * m / minibatches, rows * (m + 1) / minibatches)
  double lr = 0;            ///< Adam's learning rate for every step
  double max_grad_norm = 0; ///< clipping threshold (<= 0: none)
};

/// What a whole update did.
struct ppo_update_report {
  std::vector<loss_report> losses; ///< one per minibatch, in order
  std::vector<double> norms;       ///< each gradient's norm before clipping
  size_t taken = 0;                ///< steps applied
  size_t rejected = 0;             ///< gradients with a non-finite norm, not applied
  bool graphed = false;            ///< CUDA: replayed (or just captured) as one graph
  std::string graph_error;         ///< CUDA: why a capture failed (it then ran eagerly)
};

/// The compute of one learner.
class learner_backend {
public:
  virtual ~learner_backend() = default;

  /// The device it computes on.
  virtual device_kind device() const noexcept = 0;

  /// Replaces parameters and buffers (param_count and buffer_count floats).
  virtual status load(const float* params, const float* buffers) = 0;

  /// Copies parameters and buffers out.
  virtual status store(float* params, float* buffers) = 0;

  /// Global batch norm: copies the latest snapshot of each view (one per
  /// layer of actor_critic::batch_norm_layers(), in order), wait-free, into
  /// the running statistics the next steps normalize with.
  virtual status read_global_stats(const std::vector<stats_view*>& views) = 0;

  /// PPO loss of a host minibatch; the gradient stays in the backend.
  virtual result<loss_report> ppo_gradient(const ppo_batch<float>& batch,
                                           const ppo_config& config) = 0;

  /// IMPALA's V-trace loss of a host batch ((steps + 1) * envs observation
  /// rows, time-major), with targets from this forward pass held constant and
  /// the gradient kept in the backend.
  virtual result<loss_report> vtrace_gradient(const vtrace_batch<float>& batch,
                                              const vtrace_config& config) = 0;

  /// Copies the last gradient out (param_count floats).
  virtual status read_gradient(float* grad) = 0;

  /// Clips the last gradient to `max_grad_norm` (<= 0: no clipping) and
  /// applies one Adam step with learning rate `lr`, returning the norm before
  /// clipping and applying nothing when that norm is not finite.
  virtual result<double> apply_gradient(double lr, double max_grad_norm) = 0;

  /// Whether ppo_update runs the whole update on the device without the host
  /// in between (the CUDA backend: one graph per update); where it does not,
  /// the caller's own minibatch loop is as fast.
  virtual bool fuses_updates() const noexcept { return false; }

  /// Runs a whole PPO update (see ppo_update_request) on the backend's own
  /// weights and Adam state. Models with batch norm are refused (their
  /// statistics move between minibatches through the keeper). The CPU
  /// backend loops over ppo_gradient and apply_gradient
  /// (ppo_update_stepwise); the default is errc::unavailable.
  virtual result<ppo_update_report> ppo_update(const ppo_update_request& request,
                                               const ppo_config& config);

  /// Copies out Adam's first and second moments (param_count floats each)
  /// and its step counter, or errc::unavailable where the backend cannot.
  virtual status read_optimizer(float* m, float* v, int64_t* steps) = 0;

  /// Replaces Adam's state (see read_optimizer).
  virtual status write_optimizer(const float* m, const float* v, int64_t steps) = 0;

  /// Moments of each batch-norm layer's input in the last forward pass, in
  /// batch_norm_layers() order: the deltas for the statistics keeper.
  virtual const std::vector<kernels::moments>& batch_moments() const noexcept = 0;
};

/// Checks a whole-update request: at least one row, 1 <= minibatches <=
/// rows, epochs >= 1, every order entry below rows, no batch norm; the error
/// names the first rule broken and the value.
status validate_ppo_update(const model_spec& spec, const ppo_update_request& request);

/// A whole update done minibatch by minibatch through `backend`'s
/// ppo_gradient and apply_gradient: the reference the fused CUDA update is
/// compared with.
result<ppo_update_report> ppo_update_stepwise(learner_backend& backend,
                                              const model_spec& spec,
                                              const ppo_update_request& request,
                                              const ppo_config& config);

/// Copies the snapshots of `views` (one per batch-norm layer of `layout`, in
/// order) into `buffers` as float32 running statistics; the error names the
/// layer whose dimension differs.
status copy_global_stats(const model_layout& layout,
                         const std::vector<stats_view*>& views, float* buffers);

/// Checks that a batch carries the actions its head needs: discrete indices
/// in [0, n) (the error names the first bad row and value), or box actions.
status validate_actions(const model_spec& spec, const int64_t* discrete_actions,
                        const float* box_actions, size_t rows);

/// Checks a V-trace batch's shape (steps >= 1, envs >= 1) and its actions.
status validate_vtrace_batch(const model_spec& spec, const vtrace_batch<float>& batch);

/// A CPU backend for `spec` with Adam settings `adam`.
std::unique_ptr<learner_backend> make_cpu_backend(const model_spec& spec,
                                                  const adam_config& adam,
                                                  const backend_options& options = {});

/// A CUDA backend on device 0; errc::unavailable in a build without CUDA or
/// without a device.
result<std::unique_ptr<learner_backend>>
make_cuda_backend(const model_spec& spec, const adam_config& adam,
                  const backend_options& options = {});

/// The backend for a resolved device choice.
result<std::unique_ptr<learner_backend>>
make_backend(device_kind kind, const model_spec& spec, const adam_config& adam,
             const backend_options& options = {});

} // namespace troupe::learners
