// troupe's C++ embedding API: a game or simulator links troupe and trains
// (session), acts from its own loop (agent) or ships a trained policy
// (policy). Self-contained: the standard library and troupe/error.hpp only.
// Errors are values (troupe::result, troupe::status); no function of this
// header throws. docs/embedding.md describes the forms, the thread contract
// and the error rules.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <troupe/error.hpp>

namespace troupe {

/// Version of the binary interface; the C API checks it at open (troupe.h).
inline constexpr int abi_version = 2;

/// The library's version, "MAJOR.MINOR.PATCH".
const char* version() noexcept;

// -- environments ----------------------------------------------------------------

/// What an embedder's environment looks like to training: a float32 Box
/// observation, and either a Discrete action (num_actions > 0) or a Box action.
struct env_description {
  std::string id;                 ///< registry id, e.g. "MyGame-v0"; must be new
  std::vector<float> obs_low;     ///< Box observation lower bounds (size obs_dim)
  std::vector<float> obs_high;    ///< Box observation upper bounds (size obs_dim)
  size_t num_actions = 0;         ///< Discrete: number of actions (<= 2^24); 0: Box
  std::vector<float> action_low;  ///< Box action lower bounds (empty when Discrete)
  std::vector<float> action_high; ///< Box action upper bounds (empty when Discrete)
  int max_episode_steps = 0;      ///< time limit (truncation); 0: none
};

/// One instance of an embedder's environment. Training makes one per
/// parallel environment through the registered factory and steps each from
/// one thread at a time.
class environment {
public:
  virtual ~environment() = default;
  /// Starts an episode from `seed` and writes the first observation (obs_dim floats).
  virtual void reset(uint64_t seed, float* obs) = 0;
  /// Applies `action` (1 float holding the index for Discrete, else action_dim
  /// floats), writes the next observation and the outcome. An error stops training.
  virtual status step(const float* action, float* obs, double& reward, bool& terminated,
                      bool& truncated) = 0;
};

/// Makes one environment; may carry the embedder's context (captures).
using environment_factory = std::function<std::unique_ptr<environment>()>;

/// Registers an environment under `description.id`, so that a config's
/// env.id trains it like a built-in one. Call before opening sessions that
/// use it; any thread, concurrent with every call (the registry is locked),
/// also while sessions run. errc::invalid_argument (id taken, bad bounds)
/// names the id and field.
status register_environment(const env_description& description,
                            environment_factory factory);

/// Registers the spaces of an environment that the game steps itself: for
/// the game-driven form (session::make_agent), where troupe only acts and
/// learns and never makes, resets or steps an instance. A session over the
/// id that is started without an agent fails with errc::invalid_argument
/// saying so. Same checks, errors and thread rule as register_environment.
status register_environment_spaces(const env_description& description);

/// Removes an environment registered with register_environment or
/// register_environment_spaces; sessions already open keep the environments
/// they made. errc::not_found for an unknown id; built-in environments
/// cannot be removed. Any thread, concurrent.
status unregister_environment(const std::string& id);

/// The ids of every registered environment, built-in ones first.
std::vector<std::string> environment_ids();

// -- log -----------------------------------------------------------------------

/// How much a log line matters, from least to most (troupe.h's TROUPE_LOG_*).
enum class log_level : int {
  progress =
    0,        ///< a status line replacing the one before (not sent by embedded sessions)
  info = 1,   ///< the run's course: its folder, a metrics row every run.log_every_updates
  notice = 2, ///< normal but worth telling apart: resuming from a checkpoint
  warning =
    3,       ///< something went wrong and training goes on: a restart, a dropped message
  error = 4, ///< something failed: the run stops, a file is not written
};

/// Receives one log line (no newline) and its level. Called from troupe's
/// threads, possibly several at once: it must be safe to call concurrently.
using log_sink = std::function<void(log_level level, const std::string& message)>;

// -- sessions (training) ---------------------------------------------------------

/// Where a session stands. Counters are 0 until the session reports them.
struct progress {
  uint64_t env_steps = 0;           ///< environment steps learned from
  uint64_t updates = 0;             ///< batches learned
  uint64_t episodes = 0;            ///< episodes finished
  double return_mean_100 = 0;       ///< mean return of the last 100 episodes (NaN: none)
  uint64_t policy_version = 0;      ///< parameter server version
  uint64_t stats_version = 0;       ///< global statistics version
  uint64_t transitions_dropped = 0; ///< game-driven transitions dropped (queue full)
  bool running = false;             ///< started and not finished
  bool finished = false;            ///< training ended (limit reached, stopped or failed)
};

/// Options of a game-driven agent.
struct agent_options {
  size_t queue_capacity = 0; ///< transitions buffered toward training (whole segments of
                             ///< algo.num_steps); 0: 64 segments
  bool block_when_full = false; ///< block report() instead of dropping when full
};

class agent;

/// Choices of the program that opens a session, beyond the config.
struct session_options {
  /// Where the session's log lines go; empty: to the process-wide callback of
  /// troupe_set_log_callback (troupe.h) when one is set, else nowhere. The
  /// library never writes to stdout or stderr.
  log_sink log;
};

/// A training run opened from a config. Movable, not copyable; every member
/// may be called from any thread, one call at a time per session unless stated.
class session {
public:
  /// Opens a session from the TOML file `config_path` with `--set`-style
  /// overrides ("section.key=value"). A bad config opens nothing: the error
  /// (errc::bad_config) names file:line, key, expected and given; a missing
  /// file is errc::not_found, an unreadable one errc::io_error.
  static result<session> open(const std::string& config_path,
                              const std::vector<std::string>& overrides = {},
                              session_options options = {});

  /// As open(), from TOML text; `name` stands for the file in messages.
  static result<session> open_toml(const std::string& toml_text, const std::string& name,
                                   const std::vector<std::string>& overrides = {},
                                   session_options options = {});

  /// Reopens the run folder `run_dir` to continue from its newest good checkpoint.
  static result<session> resume(const std::string& run_dir,
                                const std::vector<std::string>& overrides = {},
                                session_options options = {});

  session(session&&) noexcept;
  session& operator=(session&&) noexcept;
  /// Closes a session that was not closed (stops training and writes the
  /// final checkpoint; the result is dropped).
  ~session();

  /// Starts training on the runtime's threads and returns at once (with an
  /// agent: once the agent answers act()).
  status start();

  /// A game-driven agent with `slots` slots; call before start(), once. Its
  /// feeders take the learners' runner slots: the learners learn from what
  /// the game reports instead of from environments the runtime steps.
  result<agent> make_agent(size_t slots, agent_options options = {});

  /// Where training stands now; returns at once (the counters are refreshed
  /// a few times per second; the policy version and drops are read at the call).
  troupe::progress progress() const;

  /// Writes a checkpoint now (the periodic ones' format); its folder. An
  /// error before start() and after training ended.
  result<std::string> save_checkpoint();

  /// Asks training to stop after the batches under way; returns at once
  /// (wait() or close() to join). Any thread.
  status request_stop();

  /// Waits up to `timeout` for training to end; true when it has.
  result<bool> wait(std::chrono::milliseconds timeout);

  /// Stops training if needed, waits for the run to write its final
  /// checkpoint and returns the final progress; the session is closed
  /// afterwards. A session never started returns zero counters.
  result<troupe::progress> close();

  /// The run folder (empty until start()).
  std::string run_dir() const;

  struct impl;

private:
  explicit session(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The game-driven form: N slots, each acted and reported from one thread.
/// A shared handle (copies refer to the same agent). act() reads the latest
/// policy wait-free; report() hands a transition to training and never
/// blocks unless agent_options::block_when_full.
class agent {
public:
  size_t slots() const noexcept;      ///< number of slots
  size_t obs_dim() const noexcept;    ///< floats per observation
  size_t action_dim() const noexcept; ///< floats per action (1 for Discrete)

  /// The latest policy's action for `slot`'s observation (obs_dim floats).
  status act(size_t slot, const float* obs, float* action);

  /// act() for slots [first_slot, first_slot + count), observations and
  /// actions stored row after row.
  status act_batch(size_t first_slot, size_t count, const float* obs, float* actions);

  /// The outcome of `slot`'s last action; `final_obs` is the observation that
  /// ended a truncated episode (for bootstrapping), else may be null. Both
  /// flags set: terminated wins, as in Gymnasium (no bootstrapping).
  status report(size_t slot, double reward, bool terminated, bool truncated,
                const float* final_obs = nullptr);

  /// Transitions dropped because training fell behind.
  uint64_t dropped() const noexcept;

  struct impl;
  explicit agent(std::shared_ptr<impl> p);

private:
  std::shared_ptr<impl> impl_;
};

// -- deployment ------------------------------------------------------------------

/// A trained policy loaded from a checkpoint, acting without a session (no
/// actors, no training). Movable, not copyable. act() may run on several
/// threads at once (each call uses its own scratch space).
class policy {
public:
  /// Loads `path`: a run folder (its newest good checkpoint), a checkpoint
  /// folder (holding policy.safetensors) or a policy .safetensors file.
  static result<policy> load(const std::string& path);

  policy(policy&&) noexcept;
  policy& operator=(policy&&) noexcept;
  ~policy();

  size_t obs_dim() const noexcept;     ///< floats per observation
  size_t action_dim() const noexcept;  ///< floats per action (1 for Discrete)
  bool discrete() const noexcept;      ///< Discrete action (index as a float) or Box
  size_t num_actions() const noexcept; ///< Discrete: number of actions; 0 for Box
  const std::string& source() const noexcept; ///< the policy file it was read from

  /// The action for one raw observation (normalized here as the checkpoint
  /// says). Deterministic: the most likely action (Discrete) or the mean (Box);
  /// otherwise a draw seeded by `seed`. Box actions are not clipped.
  /// errc::dimension_mismatch for a wrong `obs_size`, errc::non_finite for a
  /// NaN or infinite value (the message names the index and value).
  status act(const float* obs, size_t obs_size, float* action, bool deterministic = true,
             uint64_t seed = 0) const;

  struct impl;

private:
  explicit policy(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace troupe
