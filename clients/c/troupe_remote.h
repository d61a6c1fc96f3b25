/* Client of troupe's remote environment protocol (docs/protocol.md) in C99 on
 * libzmq: a game or simulator in C, or in any language that can call C (C#,
 * Rust, Lua), serves its environments to a troupe run with env.id = "remote".
 *
 *   troupe_remote* r = troupe_remote_open("tcp://127.0.0.1:5555", "my-game", 16, 4,
 *                                         2, 0, 60000, err, sizeof err);
 *   first step: troupe_remote_step(r, k, ids, obs, NULL, NULL, NULL, actions, &version,
 * ...) later:      rewards, flags (TROUPE_REMOTE_TERMINATED | _TRUNCATED) and final_obs
 *   troupe_remote_close(r);
 *
 * Every call that can fail returns 0 on success, or a negative status with a
 * message in the caller's buffer (MuJoCo's convention): TROUPE_REMOTE_ERROR
 * when troupe refused (the code is troupe_remote_last_code), _TIMEOUT when
 * nothing came back within the time-out, _CLOSED when troupe ended the
 * session, _IO for a ZeroMQ failure. One session per handle; a handle is used
 * by one thread at a time. */
#ifndef TROUPE_REMOTE_H
#define TROUPE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** STEP flag: the previous action ended the episode in a terminal state. */
#define TROUPE_REMOTE_TERMINATED 1
/** STEP flag: the previous action ended the episode by truncation. */
#define TROUPE_REMOTE_TRUNCATED 2

/** Success. */
#define TROUPE_REMOTE_OK 0
/** troupe answered with ERROR (see troupe_remote_last_code). */
#define TROUPE_REMOTE_ERROR (-1)
/** Nothing came back within the time-out. */
#define TROUPE_REMOTE_TIMEOUT (-2)
/** troupe ended the session (CLOSE). */
#define TROUPE_REMOTE_CLOSED (-3)
/** ZeroMQ failed, or a reply broke the protocol. */
#define TROUPE_REMOTE_IO (-4)
/** A bad argument. */
#define TROUPE_REMOTE_INVALID (-5)

/** An open session with troupe (opaque). */
typedef struct troupe_remote troupe_remote;

/** Optional settings of troupe_remote_open_with (a zeroed struct: the defaults). */
typedef struct {
  /** CURVE (docs/protocol.md, "Security"): troupe's public key and this
   *  client's key pair, each 40 Z85 characters; all NULL: plaintext. */
  const char* server_public_key;
  const char* public_key;
  const char* secret_key;
  /** troupe_remote_reconnect: HELLOs tried before giving up (0: 8). */
  int reconnect_attempts;
  /** The wait before the first of them, doubling after each failure up to
   *  backoff_max_ms (0: 100 and 5000). */
  int backoff_ms;
  int backoff_max_ms;
} troupe_remote_options;

/** Connects to `endpoint`, says HELLO for `num_envs` environments of `obs_dim`
 *  floats with a Discrete(`num_actions`) action space, or a Box of `action_dim`
 *  floats when num_actions is 0, and waits at most `hello_timeout_ms` for
 *  WELCOME. NULL on failure, with the message in `error` (`error_size` bytes,
 *  always terminated). */
troupe_remote* troupe_remote_open(const char* endpoint, const char* client_name,
                                  uint32_t num_envs, uint32_t obs_dim,
                                  uint32_t num_actions, uint32_t action_dim,
                                  int hello_timeout_ms, char* error, size_t error_size);

/** troupe_remote_open with `options` (NULL: the defaults): CURVE keys and the
 *  back-off of troupe_remote_reconnect. */
troupe_remote* troupe_remote_open_with(const char* endpoint, const char* client_name,
                                       uint32_t num_envs, uint32_t obs_dim,
                                       uint32_t num_actions, uint32_t action_dim,
                                       int hello_timeout_ms,
                                       const troupe_remote_options* options, char* error,
                                       size_t error_size);

/** Whether `status` (returned by a call on `r`) is worth a new session: a
 *  time-out or a transport failure (troupe gone or restarting), or troupe's
 *  ERROR unknown_session, out_of_order, timeout, too_many_errors or
 *  server_full. A refused handshake (versions, spaces) and CLOSE are not. */
int troupe_remote_retryable(const troupe_remote* r, int status);

/** A new session after a failure: closes the socket, then says HELLO again on
 *  a new one, waiting backoff_ms before each attempt (doubling up to
 *  backoff_max_ms) for at most reconnect_attempts attempts, each waiting at
 *  most the open's hello_timeout_ms for WELCOME. 0 once welcomed: the
 *  session id changes and every environment starts anew (its first STEP has
 *  no rewards or flags); else the last attempt's status and message. */
int troupe_remote_reconnect(troupe_remote* r, char* error, size_t error_size);

/** HELLOs troupe_remote_reconnect has sent. */
uint32_t troupe_remote_reconnects(const troupe_remote* r);

/** One STEP and its ACT: `k` environments `env_ids`, observations obs
 *  [k * obs_dim] to act on, rewards [k] and flags [k] of the previous actions
 *  (NULL: all 0, an environment's first step), final_obs [m * obs_dim] of the
 *  m environments whose flags are set, in order (NULL when m = 0). Writes
 *  actions [k * action width] (a Discrete action as its index, converted to
 *  float) and, when not NULL, the policy version. */
int troupe_remote_step(troupe_remote* r, uint32_t k, const uint32_t* env_ids,
                       const float* obs, const double* rewards, const uint8_t* flags,
                       const float* final_obs, float* actions, uint64_t* policy_version,
                       char* error, size_t error_size);

/** PING and its PONG: keeps a session alive that has nothing to step. */
int troupe_remote_ping(troupe_remote* r, char* error, size_t error_size);

/** The protocol's error code of the last TROUPE_REMOTE_ERROR (0: none). */
uint32_t troupe_remote_last_code(const troupe_remote* r);

/** The session id WELCOME gave. */
uint64_t troupe_remote_session(const troupe_remote* r);

/** Sends CLOSE, closes the socket and frees `r` (NULL is accepted). */
void troupe_remote_close(troupe_remote* r);

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_REMOTE_H */
