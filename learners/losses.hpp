// The losses of the learners and their exact, hand-written gradients (PPO's
// clipped surrogate and IMPALA's V-trace; formulas and derivations in
// docs/learners.md), templated on the scalar type: float for training,
// double for the gradient checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/moments.hpp"
#include "learners/mlp.hpp"
#include "learners/model.hpp"

namespace troupe::learners {

/// Scalars a loss evaluation reports (float64 whatever the scalar type).
struct loss_report {
  double loss = 0;          ///< total loss that the gradient is of
  double policy_loss = 0;   ///< L_pi
  double value_loss = 0;    ///< L_v (before its coefficient)
  double entropy = 0;       ///< mean entropy
  double approx_kl = 0;     ///< PPO: mean((ratio - 1) - log ratio)
  double clip_fraction = 0; ///< PPO: fraction of rows with |ratio - 1| > clip
};

/// Options shared by the losses' forward passes.
struct train_options {
  /// Local batch norm: move the running statistics toward the batch's.
  bool update_running_stats = true;
  /// When set, receives the moments of every batch-norm layer's input (actor
  /// layers first): the delta a global-mode learner sends to the keeper.
  std::vector<kernels::moments>* batch_moments = nullptr;
};

/// Everything a loss evaluation reuses between calls (no allocation once grown).
template <class T>
struct loss_workspace {
  network_cache<T> actor;    ///< actor forward state
  network_cache<T> critic;   ///< critic forward state
  head_cache<T> head;        ///< log-probabilities and entropies
  std::vector<T> d_logp;     ///< per-row dL/dlogp
  std::vector<T> d_entropy;  ///< per-row dL/dH
  std::vector<T> d_value;    ///< per-row dL/dV
  std::vector<T> d_head;     ///< dL/d(actor output)
  std::vector<T> advantages; ///< normalized advantages
  std::vector<float>
    terms; ///< float PPO: per-row loss terms [rows x 5] (kernels::ppo_terms)
};

// -- PPO ---------------------------------------------------------------------

/// PPO's coefficients (CleanRL's defaults).
struct ppo_config {
  double clip_coef = 0.2;           ///< c, for the ratio and the value clip
  double vf_coef = 0.5;             ///< weight of the value loss
  double ent_coef = 0.01;           ///< weight of the entropy bonus
  bool clip_value_loss = true;      ///< clip the value loss as CleanRL does
  bool normalize_advantages = true; ///< (A - mean) / (std + 1e-8) per batch
};

/// PPO's advantage normalization over a whole batch in float64, (in - mean) /
/// (std + 1e-8) with the unbiased std (fewer than two rows are copied
/// unchanged; `out` may equal `in`).
template <class T>
void normalize_advantages(const T* in, size_t rows, T* out);

/// A PPO minibatch (row-major, not owned).
template <class T>
struct ppo_batch {
  size_t rows = 0;                           ///< number of samples
  const T* obs = nullptr;                    ///< [rows x obs_dim], already normalized
  const int64_t* discrete_actions = nullptr; ///< discrete: [rows]
  const T* box_actions = nullptr;            ///< box: [rows x act_dim]
  const T* old_logprob = nullptr;            ///< [rows] log-probability when acting
  const T* advantages = nullptr;             ///< [rows]
  const T* returns = nullptr;                ///< [rows] value targets
  const T* old_values = nullptr;             ///< [rows] values when acting
};

/// Which network's share of PPO's loss an evaluation takes. The actor's
/// (policy loss, entropy, KL, clip fraction, and the gradient of the actor's
/// parameters and log_std) and the critic's (value loss and the critic's
/// gradient) share nothing but the batch, so two threads can take them at
/// once, on two workspaces, into one gradient vector: they write disjoint
/// parameters, and each float is the one a `both` evaluation gives.
enum class ppo_part : uint8_t {
  both,   ///< the whole loss
  actor,  ///< the actor's share
  critic, ///< the critic's share
};

/// PPO's loss on `batch` and its gradient with respect to every parameter
/// (written to `grad`, param_count numbers), with the batch-norm running
/// statistics in `buffers`. With `part` actor or critic only that network's
/// parameters are written and only its share of the report (the other
/// fields stay 0; ppo_merge_parts joins two shares). A part needs float and
/// a model without batch norm (the moments and running statistics of both
/// networks go into one list); the float64 reference evaluates both.
template <class T>
loss_report ppo_loss_and_grad(const model_spec& spec, const model_layout& layout,
                              const T* params, T* buffers, const ppo_batch<T>& batch,
                              const ppo_config& config, const train_options& options,
                              loss_workspace<T>& workspace, T* grad,
                              ppo_part part = ppo_part::both);

/// The report of a `both` evaluation from the actor's and the critic's
/// shares (the same doubles).
loss_report ppo_merge_parts(const loss_report& actor, const loss_report& critic,
                            const ppo_config& config) noexcept;

// -- V-trace -----------------------------------------------------------------

/// IMPALA's coefficients.
struct vtrace_config {
  double rho_bar = 1.0;       ///< clip of the importance weights in the targets
  double pg_rho_bar = 1.0;    ///< clip of the importance weights in the advantages
  double c_bar = 1.0;         ///< clip of the trace-cutting coefficients
  double baseline_coef = 0.5; ///< weight of the value loss
  double ent_coef = 0.01;     ///< weight of the entropy bonus
  /// Trust region of the policy gradient (0: none, V-trace as published): a
  /// row whose ratio pi/mu already left [1 - policy_clip, 1 + policy_clip]
  /// in the direction its advantage pushes gets advantage 0, as PPO's
  /// clipped surrogate gives it no gradient (APPO, Petrenko et al. 2020).
  double policy_clip = 0.0;
};

/// V-trace targets v_t and policy-gradient advantages for `steps` x `envs`
/// transitions stored time-major ([t * envs + e]), bootstrapped from
/// `bootstrap` (the recursion: docs/learners.md). With
/// `config.policy_clip` > 0 the advantages of the rows outside the trust
/// region are 0 (vtrace_config::policy_clip).
template <class T>
void vtrace_targets(size_t steps, size_t envs, const T* log_rhos, const T* discounts,
                    const T* rewards, const T* values, const T* bootstrap,
                    const vtrace_config& config, T* vs, T* pg_advantages);

/// A V-trace batch: `steps` x `envs` transitions, time-major.
template <class T>
struct vtrace_batch {
  size_t steps = 0;                          ///< unroll length
  size_t envs = 0;                           ///< parallel trajectories
  const T* obs = nullptr;                    ///< [(steps + 1) * envs x obs_dim]; the last
                                             ///< envs rows are the bootstrap observations
  const int64_t* discrete_actions = nullptr; ///< discrete: [steps * envs]
  const T* box_actions = nullptr;            ///< box: [steps * envs x act_dim]
  const T* behavior_logprob = nullptr;       ///< [steps * envs] log mu(a|x)
  const T* rewards = nullptr;                ///< [steps * envs]
  const T* discounts = nullptr;              ///< [steps * envs] gamma (1 - done)
};

/// V-trace targets of one evaluation, kept so a caller can inspect them or hold them
/// fixed.
template <class T>
struct vtrace_targets_buffer {
  bool fixed = false;           ///< use vs and pg_advantages as given
  std::vector<T> vs;            ///< [steps * envs]
  std::vector<T> pg_advantages; ///< [steps * envs]
};

/// IMPALA's loss and its gradient, with the targets computed from this
/// forward pass (unless targets.fixed) and treated as constants.
template <class T>
loss_report vtrace_loss_and_grad(
  const model_spec& spec, const model_layout& layout, const T* params, T* buffers,
  const vtrace_batch<T>& batch, const vtrace_config& config, const train_options& options,
  vtrace_targets_buffer<T>& targets, loss_workspace<T>& workspace, T* grad);

} // namespace troupe::learners
