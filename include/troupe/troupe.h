/* troupe's C API (C99): train from a game or simulator, act from its loop,
 * ship a trained policy. A thin layer over the C++ API (troupe.hpp); nothing
 * throws across it.
 *
 * Conventions (docs/embedding.md has the whole reference):
 * - Every call returns a troupe_status; TROUPE_OK (0) is success.
 * - Error messages: a failed call stores its message (naming the call, the
 *   rule and the values) for the calling thread; troupe_last_error() reads it
 *   and troupe_last_error_copy() copies it into a caller's buffer. The message
 *   stays until the same thread's next failed call; threads never see each
 *   other's messages (errno's pattern, so that slot threads acting at once
 *   keep their own).
 * - Handles are opaque. *_close ends a handle's work (later calls on it
 *   return TROUPE_INVALID_ARGUMENT naming the closed handle); *_free releases
 *   its memory (closing it first if needed) and accepts NULL.
 * - Calls that create something take the caller's TROUPE_ABI_VERSION and
 *   return TROUPE_UNSUPPORTED_VERSION, naming both versions, when the
 *   library was built for another.
 * - Thread contract: stated per function. "Any thread" means any thread, one
 *   call at a time per handle unless "concurrent" is stated.
 */
#ifndef TROUPE_TROUPE_H
#define TROUPE_TROUPE_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TROUPE_API
#else
#define TROUPE_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The binary interface this header describes; pass it to the opening calls.
 *  2: troupe_agent_act_batch takes buffer sizes; num_actions is size_t. */
#define TROUPE_ABI_VERSION 2

/** Result of every call; mirrors troupe::errc. */
typedef enum troupe_status {
  TROUPE_OK = 0,               /**< success */
  TROUPE_INVALID_ARGUMENT = 1, /**< a value out of range, a NULL or closed handle */
  TROUPE_BAD_CONFIG = 2,       /**< a config file or override failed validation */
  TROUPE_BAD_INPUT = 3,        /**< a data file is malformed */
  TROUPE_NON_FINITE = 4,       /**< a NaN or infinity where finite numbers are required */
  TROUPE_DIMENSION_MISMATCH = 5, /**< sizes that must agree differ */
  TROUPE_NOT_FOUND = 6,    /**< a named thing (env id, file, folder) does not exist */
  TROUPE_IO_ERROR = 7,     /**< the operating system refused a read or write */
  TROUPE_CORRUPT_FILE = 8, /**< a file's checksum or structure is wrong */
  TROUPE_UNSUPPORTED_VERSION = 9, /**< ABI or file format version mismatch */
  TROUPE_DEVICE_ERROR = 10,       /**< CUDA or another device failed */
  TROUPE_UNAVAILABLE = 11 /**< not built in, not started, closed, or the peer is gone */
} troupe_status;

typedef struct troupe_session troupe_session; /**< a training run */
typedef struct troupe_agent troupe_agent;     /**< the game-driven form: N slots */
typedef struct troupe_policy troupe_policy;   /**< a deployed policy, no training */

/* -- library ------------------------------------------------------------- */

/** The library's ABI version (compare with TROUPE_ABI_VERSION). Any thread. */
TROUPE_API int troupe_abi_version(void);

/** The library's version, "MAJOR.MINOR.PATCH" (static storage). Any thread, concurrent.
 */
TROUPE_API const char* troupe_version(void);

/** Stable short name of a status: "ok" for TROUPE_OK, else the code's name
 *  ("bad_config", ...), "unknown" for a value outside the enum (static
 *  storage). Any thread, concurrent. */
TROUPE_API const char* troupe_status_name(troupe_status status);

/** Message of this thread's last failed call ("" if none); valid until this
 *  thread's next failed call. Any thread, concurrent. */
TROUPE_API const char* troupe_last_error(void);

/** Copies this thread's last message into buf (size bytes, always
 *  NUL-terminated when size > 0, truncated if needed); returns the message's
 *  full length. Any thread, concurrent. */
TROUPE_API size_t troupe_last_error_copy(char* buf, size_t size);

/* -- log ----------------------------------------------------------------- */

/** How much a log line matters, from least to most (troupe::log_level). */
typedef enum troupe_log_level {
  TROUPE_LOG_PROGRESS = 0, /**< a status line replacing the one before (not sent by
                                sessions of the C API, which log rows instead) */
  TROUPE_LOG_INFO = 1,     /**< the run's course: its folder, a metrics row every
                                run.log_every_updates updates */
  TROUPE_LOG_NOTICE = 2,   /**< normal but worth telling apart: resuming from a
                                checkpoint, a fresh start */
  TROUPE_LOG_WARNING = 3,  /**< something went wrong, training goes on: a restart,
                                a dropped message */
  TROUPE_LOG_ERROR = 4     /**< something failed: the run stops, a file is not written */
} troupe_log_level;

/** Receives one log line: its level (a troupe_log_level), the line (UTF-8,
 *  NUL-terminated, no newline, valid during the call only) and the `user`
 *  pointer given to troupe_set_log_callback. */
typedef void (*troupe_log_callback)(int level, const char* message, void* user);

/** Sets the process-wide receiver of the library's log lines (as SQLite's
 *  SQLITE_CONFIG_LOG); NULL removes it. Until one is set the library writes
 *  nothing to stdout or stderr: every line is dropped. Sessions opened by
 *  the C API and C++ sessions without a sink of their own
 *  (troupe::session_options::log) log to it. Thread contract: `callback` is
 *  called from troupe's threads (the runtime's workers, and the thread that
 *  calls troupe_session_open/start/close), never two calls at once (calls
 *  are serialized by a lock held during the call, so it must not block for
 *  long); once this returns, the previous callback is not called again. The
 *  callback may call troupe functions that do not open, start or close
 *  sessions. Any thread, concurrent. */
TROUPE_API void troupe_set_log_callback(troupe_log_callback callback, void* user);

/* -- environments -------------------------------------------------------- */

/** An environment as training sees it: Box observation of obs_dim floats;
 *  Discrete action (num_actions > 0, one float holding the index) or Box
 *  action of action_dim floats (num_actions == 0). */
typedef struct troupe_env_description {
  const char* id;           /**< registry id, new (e.g. "MyGame-v0") */
  size_t obs_dim;           /**< floats per observation (> 0) */
  const float* obs_low;     /**< obs_dim lower bounds */
  const float* obs_high;    /**< obs_dim upper bounds */
  size_t num_actions;       /**< Discrete: number of actions (<= 2^24); 0 for Box */
  size_t action_dim;        /**< Box: floats per action; ignored for Discrete */
  const float* action_low;  /**< Box: action_dim lower bounds; NULL for Discrete */
  const float* action_high; /**< Box: action_dim upper bounds; NULL for Discrete */
  int max_episode_steps;    /**< time limit (truncation); 0: none */
} troupe_env_description;

/** The callbacks of an environment. Training creates one instance per
 *  parallel environment and calls reset/step on one instance from one thread
 *  at a time (different instances may run on different threads at once). */
typedef struct troupe_env_functions {
  /** A new instance (NULL: failure). */
  void* (*create)(void* user_data);
  /** Releases an instance made by create. */
  void (*destroy)(void* instance, void* user_data);
  /** Starts an episode from seed; writes obs_dim floats to obs. */
  void (*reset)(void* instance, void* user_data, uint64_t seed, float* obs);
  /** Applies action; writes the next observation, reward and flags (0/1).
   *  Returns 0 on success, non-zero on failure (the episode then ends). */
  int (*step)(void* instance, void* user_data, const float* action, float* obs,
              double* reward, int* terminated, int* truncated);
} troupe_env_functions;

/** Registers an environment: a config's env.id = description->id then trains
 *  it like a built-in one. The description and table are copied; user_data
 *  is passed to every callback and must outlive the registration and the
 *  sessions that made instances of it. Any thread, concurrent with every
 *  call (the registry is locked), also while sessions run; register before
 *  opening the sessions that use the id. */
TROUPE_API troupe_status
troupe_register_environment(int abi_version, const troupe_env_description* description,
                            const troupe_env_functions* functions, void* user_data);

/** Registers only the spaces of an environment that the game steps itself,
 *  for the game-driven form (troupe_session_make_agent): troupe acts and
 *  learns from what the game reports and never creates, resets or steps an
 *  instance, so no callbacks are needed. A session over the id started
 *  without an agent fails with TROUPE_INVALID_ARGUMENT saying so. Same
 *  checks of the description and thread rule as troupe_register_environment. */
TROUPE_API troupe_status troupe_register_environment_spaces(
  int abi_version, const troupe_env_description* description);

/** Removes a registration (TROUPE_NOT_FOUND for an unknown id; built-in ids
 *  are refused). Sessions already open keep the instances they made. Same
 *  thread rule as troupe_register_environment. */
TROUPE_API troupe_status troupe_unregister_environment(const char* id);

/** The registered ids, one per line, into buf (always NUL-terminated when
 *  size > 0); *needed (may be NULL) gets the bytes the whole list needs,
 *  NUL included; TROUPE_INVALID_ARGUMENT when buf is too small. Any thread,
 *  concurrent. */
TROUPE_API troupe_status troupe_environment_ids(char* buf, size_t size, size_t* needed);

/* -- sessions (training) ------------------------------------------------- */

/** Where training stands (see troupe::progress). */
typedef struct troupe_progress {
  uint64_t env_steps;           /**< environment steps learned from */
  uint64_t updates;             /**< batches learned */
  uint64_t episodes;            /**< episodes finished */
  double return_mean_100;       /**< mean return of the last 100 episodes (NaN: none) */
  uint64_t policy_version;      /**< parameter server version */
  uint64_t stats_version;       /**< global statistics version */
  uint64_t transitions_dropped; /**< game-driven transitions dropped */
  int running;                  /**< 1 while training runs */
  int finished;                 /**< 1 once training ended */
} troupe_progress;

/** Opens a session from a TOML config file with n_overrides
 *  "section.key=value" overrides (overrides may be NULL when 0). A bad config
 *  opens nothing (TROUPE_BAD_CONFIG; the message names file:line, key,
 *  expected and given); a missing file is TROUPE_NOT_FOUND, an unreadable
 *  one TROUPE_IO_ERROR. Any thread. */
TROUPE_API troupe_status troupe_session_open(int abi_version, const char* config_path,
                                             const char* const* overrides,
                                             size_t n_overrides, troupe_session** out);

/** As troupe_session_open, from TOML text; name stands for the file in messages. */
TROUPE_API troupe_status troupe_session_open_toml(int abi_version, const char* toml_text,
                                                  const char* name,
                                                  const char* const* overrides,
                                                  size_t n_overrides,
                                                  troupe_session** out);

/** Reopens a run folder to continue from its newest good checkpoint. */
TROUPE_API troupe_status troupe_session_resume(int abi_version, const char* run_dir,
                                               const char* const* overrides,
                                               size_t n_overrides, troupe_session** out);

/** Starts training on the runtime's threads; returns at once. Any thread. */
TROUPE_API troupe_status troupe_session_start(troupe_session* session);

/** Where training stands. Any thread, concurrent with every session call. */
TROUPE_API troupe_status troupe_session_progress(const troupe_session* session,
                                                 troupe_progress* out);

/** Writes a checkpoint now; its folder into path (size bytes). Any thread.
 *  TROUPE_INVALID_ARGUMENT before start and after training ended. */
TROUPE_API troupe_status troupe_session_save_checkpoint(troupe_session* session,
                                                        char* path, size_t size);

/** Asks training to stop; returns at once. Any thread, concurrent. */
TROUPE_API troupe_status troupe_session_request_stop(troupe_session* session);

/** Waits up to timeout_ms for training to end; *finished = 1 when it has. Any thread. */
TROUPE_API troupe_status troupe_session_wait(troupe_session* session, int64_t timeout_ms,
                                             int* finished);

/** Stops training if it runs, writes the final checkpoint, waits for it and
 *  closes the session;
 *  *out (may be NULL) gets the final progress. Any thread, once. */
TROUPE_API troupe_status troupe_session_close(troupe_session* session,
                                              troupe_progress* out);

/** The run folder into buf (size bytes; "" before start). Any thread. */
TROUPE_API troupe_status troupe_session_run_dir(const troupe_session* session, char* buf,
                                                size_t size);

/** Closes (waiting for training) if needed and releases the session; NULL is
 *  fine. Free its agents first. One thread, after every other call returned. */
TROUPE_API void troupe_session_free(troupe_session* session);

/* -- agents (the game drives) -------------------------------------------- */

/** Options of an agent (zero-initialize for the defaults). */
typedef struct troupe_agent_options {
  size_t queue_capacity; /**< transitions buffered toward training (rounded up to whole
                            segments of algo.num_steps); 0: 64 segments */
  int block_when_full;   /**< 1: report blocks instead of dropping when full */
} troupe_agent_options;

/** An agent with `slots` slots; before troupe_session_start, once. Its calls
 *  answer TROUPE_UNAVAILABLE until the session has started. options may be NULL. */
TROUPE_API troupe_status troupe_session_make_agent(troupe_session* session, size_t slots,
                                                   const troupe_agent_options* options,
                                                   troupe_agent** out);

/** Slots, floats per observation and per action (each out may be NULL). Any thread,
 * concurrent. */
TROUPE_API troupe_status troupe_agent_info(const troupe_agent* agent, size_t* slots,
                                           size_t* obs_dim, size_t* action_dim);

/** The latest policy's action for slot's observation; never waits for
 *  training. One thread per slot; different slots concurrent. */
TROUPE_API troupe_status troupe_agent_act(troupe_agent* agent, size_t slot,
                                          const float* obs, size_t obs_size,
                                          float* action, size_t action_size);

/** act for slots [first_slot, first_slot + count), rows one after another:
 *  obs_size must be count * obs_dim and actions_size at least
 *  count * action_dim (else TROUPE_DIMENSION_MISMATCH naming both). The
 *  calling thread owns those slots for the call. */
TROUPE_API troupe_status troupe_agent_act_batch(troupe_agent* agent, size_t first_slot,
                                                size_t count, const float* obs,
                                                size_t obs_size, float* actions,
                                                size_t actions_size);

/** The outcome of slot's last action. terminated and truncated are 0 or 1
 *  (another value: TROUPE_INVALID_ARGUMENT naming the flag and the value);
 *  both 1 is accepted and terminated wins, as in Gymnasium: the episode ends
 *  without bootstrapping from final_obs. final_obs: the observation ending a
 *  truncated episode (obs_dim floats), or NULL. Never blocks unless
 *  block_when_full. Same thread rule as troupe_agent_act. */
TROUPE_API troupe_status troupe_agent_report(troupe_agent* agent, size_t slot,
                                             double reward, int terminated, int truncated,
                                             const float* final_obs);

/** Transitions dropped because training fell behind. Any thread, concurrent. */
TROUPE_API troupe_status troupe_agent_dropped(const troupe_agent* agent, uint64_t* out);

/** Ends the agent's work; later calls on it fail. One thread, after every
 *  other call on it returned. */
TROUPE_API troupe_status troupe_agent_close(troupe_agent* agent);

/** Releases the agent (closing it if needed); NULL is fine. */
TROUPE_API void troupe_agent_free(troupe_agent* agent);

/* -- deployment ---------------------------------------------------------- */

/** What a policy takes and gives. */
typedef struct troupe_policy_info {
  size_t obs_dim;     /**< floats per observation */
  size_t action_dim;  /**< floats per action (1 for Discrete) */
  size_t num_actions; /**< Discrete: number of actions; 0 for Box */
  int discrete;       /**< 1: Discrete (index as a float); 0: Box */
} troupe_policy_info;

/** Loads a policy from a run folder (newest good checkpoint), a checkpoint
 *  folder or a policy .safetensors file. Any thread. */
TROUPE_API troupe_status troupe_policy_load(int abi_version, const char* path,
                                            troupe_policy** out);

/** The policy's sizes. Any thread, concurrent. */
TROUPE_API troupe_status troupe_policy_info_get(const troupe_policy* policy,
                                                troupe_policy_info* out);

/** The action for one raw observation (normalized as the checkpoint says).
 *  deterministic = 1: most likely action or mean; 0: a draw seeded by seed.
 *  obs_size must be obs_dim and action_size at least action_dim. Any thread,
 *  concurrent (but not with troupe_policy_close/free). */
TROUPE_API troupe_status troupe_policy_act(const troupe_policy* policy, const float* obs,
                                           size_t obs_size, float* action,
                                           size_t action_size, int deterministic,
                                           uint64_t seed);

/** Releases the model; later calls on the handle fail. One thread, after
 *  every other call on it returned. */
TROUPE_API troupe_status troupe_policy_close(troupe_policy* policy);

/** Releases the handle (closing it if needed); NULL is fine. */
TROUPE_API void troupe_policy_free(troupe_policy* policy);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TROUPE_TROUPE_H */
