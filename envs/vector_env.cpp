#include "envs/vector_env.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "base/worker_pool.hpp"

namespace troupe::envs {

// -- vector env ---------------------------------------------------------------

vector_env::vector_env(env_spec spec, size_t num_envs, size_t threads,
                       size_t min_per_thread)
  : spec_(std::move(spec)), num_envs_(num_envs), obs_dim_(spec_.observation_space.size()),
    action_dim_(spec_.action_space.size()) {
  TROUPE_CHECK(num_envs > 0, "a vector env needs at least one environment");
  observations_.assign(num_envs * obs_dim_, 0.0f);
  rewards_.assign(num_envs, 0.0f);
  terminated_.assign(num_envs, 0);
  truncated_.assign(num_envs, 0);
  autoreset_.assign(num_envs, 0);
  reward_terms_.assign(num_envs * spec_.reward_terms.size(), 0.0);
  size_t useful = std::max<size_t>(1, num_envs / std::max<size_t>(1, min_per_thread));
  chunks_ = std::max<size_t>(1, std::min(threads, useful));
  if (chunks_ > 1)
    pool_ = std::make_unique<base::worker_pool>(chunks_ - 1);
}

vector_env::~vector_env() = default;

void vector_env::counters(uint64_t* out) const {
  std::fill(out, out + spec_.counters.size(), uint64_t{0});
}

namespace {

// The range of environments of chunk k out of `chunks`.
std::pair<size_t, size_t> chunk_range(size_t n, size_t chunks, size_t k) {
  return {n * k / chunks, n * (k + 1) / chunks};
}

} // namespace

void vector_env::reset(uint64_t seed) {
  std::fill(rewards_.begin(), rewards_.end(), 0.0f);
  std::fill(terminated_.begin(), terminated_.end(), 0);
  std::fill(truncated_.begin(), truncated_.end(), 0);
  std::fill(autoreset_.begin(), autoreset_.end(), 0);
  std::fill(reward_terms_.begin(), reward_terms_.end(), 0.0);
  // Resets draw few numbers: one thread is enough.
  reset_range(0, num_envs_, seed);
  ready_ = true;
}

status vector_env::check_actions(const float* actions) const {
  const auto& as = spec_.action_space;
  if (as.kind == space_kind::discrete) {
    const float n = static_cast<float>(as.n);
    bool all_valid = true;
    for (size_t i = 0; i < num_envs_; ++i) {
      // Adding and removing 2^23 rounds a float in [0, 2^23) to an integer, so
      // the test is branch-free and the loop vectorizes; NaN fails the
      // comparisons.
      float a = actions[i];
      all_valid &= (a >= 0.0f) & (a < n) & ((a + 0x1p23f) - 0x1p23f == a);
    }
    if (all_valid)
      return {};
  }
  for (size_t i = 0; i < num_envs_; ++i)
    if (auto ok = as.check_action(actions + i * action_dim_, clip_box_actions_); !ok)
      return make_error(ok.err().code, "{}: environment {}: {}", spec_.id, i,
                        ok.err().message);
  return {};
}

status vector_env::step(const float* actions) {
  if (!ready_)
    return make_error(errc::invalid_argument, "{}: vector step() before reset()",
                      spec_.id);
  if (auto ok = check_actions(actions); !ok)
    return ok;
  if (chunks_ == 1)
    return step_range(0, num_envs_, actions);
  std::vector<status> outcomes(chunks_);
  pool_->run(chunks_, [&](size_t k) {
    auto [begin, end] = chunk_range(num_envs_, chunks_, k);
    outcomes[k] = step_range(begin, end, actions);
  });
  // Chunks are in environment order: the first failure names the lowest one.
  for (auto& outcome : outcomes)
    if (!outcome)
      return std::move(outcome);
  return {};
}

// -- state ----------------------------------------------------------------------

namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) noexcept {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

} // namespace

bool same_state(const vector_env_state& a, const vector_env_state& b) noexcept {
  return a.env_id == b.env_id && a.num_envs == b.num_envs &&
         a.with_state == b.with_state && a.rng == b.rng && same_bits(a.state, b.state) &&
         a.elapsed_steps == b.elapsed_steps && same_bits(a.rewards, b.rewards) &&
         a.terminated == b.terminated && a.truncated == b.truncated &&
         a.autoreset == b.autoreset;
}

vector_env_state vector_env::save_state() const {
  const size_t n = num_envs_, sd = spec_.state_dim();
  vector_env_state s;
  s.env_id = spec_.id;
  s.num_envs = n;
  s.rewards = rewards_;
  s.terminated = terminated_;
  s.truncated = truncated_;
  s.autoreset = autoreset_;
  if (!can_save_state()) {
    s.with_state = false;
    return s;
  }
  s.rng.resize(n * 4);
  s.state.resize(n * sd);
  s.elapsed_steps.resize(n);
  for (size_t i = 0; i < n; ++i) {
    auto words = rng_state(i);
    std::copy(words.begin(), words.end(), &s.rng[i * 4]);
    auto values = state(i);
    std::copy(values.begin(), values.end(),
              s.state.begin() + static_cast<ptrdiff_t>(i * sd));
    s.elapsed_steps[i] = elapsed_steps(i);
  }
  return s;
}

status vector_env::check_state(const vector_env_state& s) const {
  const auto& id = spec_.id;
  const size_t n = num_envs_, sd = spec_.state_dim();
  const int max_steps = spec_.max_episode_steps;
  if (s.env_id != id)
    return make_error(errc::invalid_argument,
                      "{}: vector env state: env_id must be '{}', got '{}'", id, id,
                      s.env_id);
  if (s.num_envs != n)
    return make_error(errc::dimension_mismatch,
                      "{}: vector env state: num_envs must be {}, got {}", id, n,
                      s.num_envs);
  if (!s.with_state && can_save_state())
    return make_error(errc::invalid_argument,
                      "{}: vector env state: with_state must be true (these environments "
                      "save their state), got false",
                      id);
  if (s.with_state && !can_save_state())
    return make_error(errc::invalid_argument,
                      "{}: vector env state: these environments cannot restore a saved "
                      "state (env::can_save_state() is false); start fresh episodes "
                      "(reset) instead",
                      id);
  auto check_size = [&](const char* field, size_t got, size_t width) -> status {
    if (got != n * width)
      return make_error(errc::dimension_mismatch,
                        "{}: vector env state: {} must hold {} values ({} environments x "
                        "{}), got {}",
                        id, field, n * width, n, width, got);
    return {};
  };
  // Without state, the per-environment arrays must be empty.
  const size_t with = s.with_state ? 1 : 0;
  for (auto ok : {check_size("rng", s.rng.size(), 4 * with),
                  check_size("state", s.state.size(), sd * with),
                  check_size("elapsed_steps", s.elapsed_steps.size(), with),
                  check_size("rewards", s.rewards.size(), 1),
                  check_size("terminated", s.terminated.size(), 1),
                  check_size("truncated", s.truncated.size(), 1),
                  check_size("autoreset", s.autoreset.size(), 1)})
    if (!ok)
      return ok;
  for (size_t i = 0; i < n; ++i) {
    auto bad = [&](errc code, const std::string& what) {
      return error{code,
                   fmt::format("{}: vector env state: environment {}: {}", id, i, what)};
    };
    if (s.with_state) {
      const uint64_t* words = &s.rng[i * 4];
      if ((words[0] | words[1] | words[2] | words[3]) == 0)
        return bad(errc::invalid_argument,
                   "rng must not be all zero (xoshiro256++ cannot "
                   "leave it), got 0, 0, 0, 0");
      for (size_t j = 0; j < sd; ++j)
        if (!std::isfinite(s.state[i * sd + j]))
          return bad(errc::non_finite,
                     fmt::format("state[{}] ({}) must be finite, got {}", j,
                                 spec_.state_names[j], s.state[i * sd + j]));
      const int elapsed = s.elapsed_steps[i];
      if (elapsed < 0 || elapsed > max_steps)
        return bad(
          errc::invalid_argument,
          fmt::format("elapsed_steps must be in [0, {}] (the time limit), got {}",
                      max_steps, elapsed));
    }
    if (!std::isfinite(s.rewards[i]))
      return bad(errc::non_finite,
                 fmt::format("rewards must be finite, got {}", s.rewards[i]));
    for (auto [field, flags] : {std::pair<const char*, const std::vector<uint8_t>*>{
                                  "terminated", &s.terminated},
                                {"truncated", &s.truncated},
                                {"autoreset", &s.autoreset}})
      if ((*flags)[i] > 1)
        return bad(errc::invalid_argument,
                   fmt::format("{} must be 0 or 1, got {}", field, (*flags)[i]));
    if (!s.with_state)
      continue; // no counters to check the flags against
    const int elapsed = s.elapsed_steps[i];
    // Each step sets truncated exactly when the counter reaches the limit
    // (or earlier, for an environment that truncates on its own).
    const bool at_limit = elapsed >= max_steps;
    if (spec_.early_truncation ? (at_limit && !s.truncated[i])
                               : s.truncated[i] != (at_limit ? 1 : 0))
      return bad(errc::invalid_argument,
                 fmt::format("truncated must be 1 {} elapsed_steps reaches the "
                             "time limit {}, got truncated = {} with elapsed_steps = {}",
                             spec_.early_truncation ? "when" : "exactly when", max_steps,
                             s.truncated[i], elapsed));
    if (s.autoreset[i] && (s.terminated[i] || elapsed != 0 || s.rewards[i] != 0.0f))
      return bad(
        errc::invalid_argument,
        fmt::format("autoreset = 1 requires terminated = 0, elapsed_steps = 0 and "
                    "reward 0 (a reset step), got terminated = {}, elapsed_steps "
                    "= {}, reward = {}",
                    s.terminated[i], elapsed, s.rewards[i]));
  }
  return {};
}

status vector_env::restore_state(const vector_env_state& s) {
  if (auto ok = check_state(s); !ok)
    return ok;
  if (!s.with_state)
    return make_error(
      errc::invalid_argument,
      "{}: vector env state: the environments saved no state "
      "(with_state = false); start fresh episodes with reset(seed) instead",
      spec_.id);
  const size_t n = num_envs_, sd = spec_.state_dim();
  for (size_t i = 0; i < n; ++i) {
    std::array<uint64_t, 4> words;
    std::copy(&s.rng[i * 4], &s.rng[i * 4] + 4, words.begin());
    if (auto ok = restore_env(i, words, &s.state[i * sd], s.elapsed_steps[i]); !ok) {
      ready_ = false; // environments before i hold the new state, the others the old
      return make_error(ok.err().code, "{}: vector env state: environment {}: {}",
                        spec_.id, i, ok.err().message);
    }
  }
  rewards_ = s.rewards;
  terminated_ = s.terminated;
  truncated_ = s.truncated;
  autoreset_ = s.autoreset;
  // Not part of a state: the restored step's terms are unknown.
  std::fill(reward_terms_.begin(), reward_terms_.end(), 0.0);
  ready_ = true;
  return {};
}

} // namespace troupe::envs
