// What a learner does to a trajectory batch before a loss sees it: GAE and
// V-trace's inputs over time-major batches with next-step autoreset
// (docs/design-notes.md, "learners/"), and action sampling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/rng.hpp"
#include "learners/model.hpp"

namespace troupe::learners {

/// GAE advantages and returns over `steps` x `envs` transitions stored
/// time-major ([t * envs + e]) with next-step autoreset, `values` holding
/// V(x_t) for t in [0, steps] (the last `envs` the bootstrap values) and
/// `valid` 0 on reset steps.
void compute_gae(size_t steps, size_t envs, const float* rewards,
                 const uint8_t* terminated, const uint8_t* truncated,
                 const uint8_t* autoreset, const float* values, double gamma,
                 double lambda, float* advantages, float* returns, uint8_t* valid);

/// What a reset step's behavior log-probability becomes in vtrace_inputs:
/// large enough that pi/mu underflows to 0 for any policy.
inline constexpr float vtrace_reset_logprob = 100.0f;

/// IMPALA's per-step discounts and masked behavior log-probabilities from
/// `rows` steps of a batch with next-step autoreset.
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
