// troupe::policy: a checkpoint's policy acting without a session, as
// `troupe eval` acts (runtime/cmd_eval.cpp) but for one observation at a
// time from the embedder's thread.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <troupe/troupe.hpp>

#include "base/error.hpp"
#include "base/rng.hpp"
#include "learners/checkpoint.hpp"
#include "learners/rollout.hpp"
#include "runtime/embed/guard.hpp"

namespace troupe {

struct policy::impl {
  learners::policy_checkpoint checkpoint;
  std::string source;
};

result<policy> policy::load(const std::string& path) {
  return embed::guarded<policy>("policy::load", [&]() -> result<policy> {
    auto file = learners::resolve_policy_file(path, {});
    if (!file)
      return error{file.err().code, "policy::load: " + file.err().message};
    auto loaded = learners::load_checkpoint(*file);
    if (!loaded)
      return loaded.err();
    auto p = std::make_unique<impl>(impl{std::move(*loaded), *file});
    return policy(std::move(p));
  });
}

policy::policy(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
policy::policy(policy&&) noexcept = default;
policy& policy::operator=(policy&&) noexcept = default;
policy::~policy() = default;

size_t policy::obs_dim() const noexcept {
  return static_cast<size_t>(impl_->checkpoint.model.spec().obs_dim);
}

bool policy::discrete() const noexcept {
  return impl_->checkpoint.model.spec().action == learners::action_kind::discrete;
}

size_t policy::action_dim() const noexcept {
  return discrete() ? 1 : static_cast<size_t>(impl_->checkpoint.model.spec().act_dim);
}

size_t policy::num_actions() const noexcept {
  return discrete() ? static_cast<size_t>(impl_->checkpoint.model.spec().n) : 0;
}

const std::string& policy::source() const noexcept {
  return impl_->source;
}

status policy::act(const float* obs, size_t obs_size, float* action, bool deterministic,
                   uint64_t seed) const {
  return embed::guarded_status("policy::act", [&]() -> status {
    if (!impl_)
      return make_error(errc::invalid_argument, "policy::act: the policy was moved from");
    if (obs == nullptr || action == nullptr)
      return make_error(errc::invalid_argument, "policy::act: {} is null",
                        obs == nullptr ? "obs" : "action");
    const auto& spec = impl_->checkpoint.model.spec();
    const auto dim = static_cast<size_t>(spec.obs_dim);
    if (obs_size != dim)
      return make_error(errc::dimension_mismatch,
                        "policy::act: the observation has {} values; the policy ({}) "
                        "takes obs_dim = {}",
                        obs_size, impl_->source, dim);
    for (size_t i = 0; i < dim; ++i)
      if (!std::isfinite(obs[i]))
        return make_error(errc::non_finite,
                          "policy::act: observation value {} is {} (every value must be "
                          "finite)",
                          i, obs[i]);
    // One output per thread: act() runs on several threads at once and
    // allocates nothing after a thread's first call.
    thread_local learners::policy_output out;
    const auto* obs_stats = spec.obs_norm ? &impl_->checkpoint.obs_stats : nullptr;
    if (auto ok = impl_->checkpoint.model.evaluate(obs, 1, obs_stats, out); !ok)
      return ok;
    const auto head = static_cast<size_t>(spec.head_dim());
    // The learners' action selection (learners/rollout.hpp), as the runners act.
    if (spec.action == learners::action_kind::discrete) {
      if (deterministic) {
        learners::most_likely_categorical(out.logits.data(), 1, head, action);
      } else {
        base::rng gen(seed);
        learners::sample_categorical(out.logits.data(), 1, head, gen, action, nullptr);
      }
    } else if (deterministic) {
      std::copy(out.mean.begin(), out.mean.begin() + head, action);
    } else {
      base::rng gen(seed);
      learners::sample_gaussian(out.mean.data(), out.log_std.data(), 1, head, gen, action,
                                nullptr);
    }
    return ok_status();
  });
}

} // namespace troupe
