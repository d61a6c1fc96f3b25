// Fuzzes the runner-state file of checkpoints (actors/runner_state_file),
// a safetensors file read from a path. Invariants: no crash; an accepted
// file survives save and load unchanged; for a small state, the runner's
// checks (check_runner_state) either refuse it or the environments restore
// it and take a step.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "actors/env_runner.hpp"
#include "edge/runner_state_file.hpp"
#include "envs/registry.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::edge;

namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool same(const env_runner_state& a, const env_runner_state& b) {
  return a.runner == b.runner && a.env_id == b.env_id && a.env.env_id == b.env.env_id &&
         a.env.num_envs == b.env.num_envs && a.env.with_state == b.env.with_state &&
         a.env.rng == b.env.rng && same_bits(a.env.state, b.env.state) &&
         a.env.elapsed_steps == b.env.elapsed_steps &&
         same_bits(a.env.rewards, b.env.rewards) &&
         a.env.terminated == b.env.terminated && a.env.truncated == b.env.truncated &&
         a.env.autoreset == b.env.autoreset && a.gen == b.gen &&
         same_bits(a.episode_return, b.episode_return) &&
         a.episode_length == b.episode_length &&
         same_bits(a.discounted_return, b.discounted_return) &&
         a.status.batches == b.status.batches &&
         a.status.env_steps == b.status.env_steps &&
         a.status.episodes == b.status.episodes &&
         a.status.non_finite == b.status.non_finite &&
         a.status.deltas_sent == b.status.deltas_sent;
}

// Restores `s` into fresh environments (or starts fresh episodes, for a state
// without the environments' own) when the runner's checks accept it, then
// steps them once with an action inside the action space.
void restore_and_step(const env_runner_state& s) {
  if (s.env.num_envs > 64)
    return;
  auto env = envs::make_vector_env(s.env_id, s.env.num_envs, 1);
  TROUPE_FUZZ_EXPECT(env.ok(), "a loaded env id '{}' cannot be made", s.env_id);
  if (!check_runner_state(s, **env, "fuzz").ok())
    return;
  auto restored = continue_envs(**env, s, 1);
  TROUPE_FUZZ_EXPECT(restored.ok(), "a state that passed the checks does not restore: {}",
                     restored ? std::string{} : restored.err().message);
  TROUPE_FUZZ_EXPECT(*restored == s.env.with_state,
                     "a built-in environment's state was not used as saved");
  const auto& action_space = (*env)->spec().action_space;
  std::vector<float> actions;
  for (size_t i = 0; i < s.env.num_envs; ++i) {
    if (action_space.kind == envs::space_kind::discrete)
      actions.push_back(0.0f);
    else
      for (size_t j = 0; j < action_space.size(); ++j)
        actions.push_back(0.5f * action_space.low[j] + 0.5f * action_space.high[j]);
  }
  auto stepped = (*env)->step(actions.data());
  TROUPE_FUZZ_EXPECT(stepped.ok(), "a restored state does not step: {}",
                     stepped ? std::string{} : stepped.err().message);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::scratch_file file("runner_state");
  static fuzz::scratch_file copy("runner_state_copy");
  auto states = load_runner_states(file.write(data, size));
  if (!states) {
    TROUPE_FUZZ_EXPECT(!states.err().message.empty(), "a rejection without a message");
    return 0;
  }
  auto saved = save_runner_states(copy.path(), *states);
  TROUPE_FUZZ_EXPECT(saved.ok(), "an accepted state does not save: {}",
                     saved ? std::string{} : saved.err().message);
  auto again = load_runner_states(copy.path());
  TROUPE_FUZZ_EXPECT(again.ok(), "a saved state does not load: {}",
                     again ? std::string{} : again.err().message);
  TROUPE_FUZZ_EXPECT(again->size() == states->size(), "the number of runners changed");
  for (size_t k = 0; k < states->size(); ++k) {
    TROUPE_FUZZ_EXPECT(same((*states)[k], (*again)[k]), "runner {} changed", k);
    restore_and_step((*states)[k]);
  }
  return 0;
}
