// What a learner does to a trajectory batch before a loss sees it: the
// advantages of generalized advantage estimation (GAE) over time-major
// batches with next-step autoreset, and the sampling of actions from a
// policy's outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/rng.hpp"
#include "learners/model.hpp"

namespace troupe::learners {

/// GAE over `steps` x `envs` transitions stored time-major ([t * envs + e]),
/// with Gymnasium's next-step autoreset (actors/messages.hpp,
/// trajectory_batch). `values` holds V(x_t) for t in [0, steps], the last
/// `envs` entries being the bootstrap values.
///
/// For a transition (autoreset = 0):
///   delta_t = r_t + gamma (1 - terminated_t) V(x_{t+1}) - V(x_t)
///   A_t     = delta_t + gamma lambda (1 - done_t) A_{t+1}
/// where done_t = terminated_t or truncated_t: a truncated episode is
/// bootstrapped with the value of its last observation (x_{t+1}, which
/// next-step autoreset keeps), a terminated one is not, and neither carries
/// the trace into the next episode; one both terminated and truncated is
/// terminated (Gymnasium's rule). A reset step (autoreset = 1) is no
/// transition: its advantage and return are 0 and `valid` is 0.
/// returns_t = A_t + V(x_t).
void compute_gae(size_t steps, size_t envs, const float* rewards,
                 const uint8_t* terminated, const uint8_t* truncated,
                 const uint8_t* autoreset, const float* values, double gamma,
                 double lambda, float* advantages, float* returns, uint8_t* valid);

/// What a reset step's behavior log-probability becomes in vtrace_inputs:
/// large enough that pi/mu underflows to 0 for any policy.
inline constexpr float vtrace_reset_logprob = 100.0f;

/// IMPALA's per-step inputs from `rows` steps of a batch with next-step
/// autoreset (actors/messages.hpp, trajectory_batch):
///   discounts_t = 0 where terminated_t or autoreset_t, else gamma: a
///     truncated step is bootstrapped with V(x_{t+1}), the last observation
///     of its episode, which next-step autoreset keeps;
///   masked_logp_t = behavior_logp_t, except on a reset step (no transition:
///     its action was ignored), where it is vtrace_reset_logprob, so that
///     rho_t = c_t = 0: no policy gradient, a value target equal to the
///     current value, and no trace through it.
void vtrace_inputs(size_t rows, const uint8_t* terminated, const uint8_t* autoreset,
                   const float* behavior_logp, double gamma, float* discounts,
                   float* masked_logp);

/// Draws one action per row from a categorical policy with `logits`
/// [rows x n] into `actions` (as floats, the vector env's format) and writes
/// the log-probability of each draw into `logp` (may be null).
void sample_categorical(const float* logits, size_t rows, size_t n, base::rng& gen,
                        float* actions, float* logp);

/// As above, with `scratch` (resized to n) instead of an allocation per call:
/// the game agent's per-slot draws.
void sample_categorical(const float* logits, size_t rows, size_t n, base::rng& gen,
                        float* actions, float* logp, std::vector<double>& scratch);

/// The most likely action of each row of a categorical policy's `logits`
/// [rows x n] (the first on ties, as torch.argmax), as floats.
void most_likely_categorical(const float* logits, size_t rows, size_t n, float* actions);

/// Draws one action per row from N(mean, exp(log_std)^2) (mean [rows x d],
/// log_std [d]) and writes the log-density of each draw into `logp` (may be
/// null).
void sample_gaussian(const float* mean, const float* log_std, size_t rows, size_t d,
                     base::rng& gen, float* actions, float* logp);

/// A standard normal draw (Box-Muller on two uniforms of `gen`).
double standard_normal(base::rng& gen);

} // namespace troupe::learners
