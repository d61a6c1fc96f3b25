// The wire format of the remote environment protocol (docs/protocol.md):
// encoding messages into ZeroMQ frames and decoding frames into messages.
//
// Plain C++: no CAF and no ZeroMQ types, so that the decoder can be fuzzed
// (tests/fuzz/remote_wire.fuzz.cpp) and tested without sockets. A frame is a
// byte vector; a received message is a sequence of frame views (the routing
// id of a ROUTER socket already taken off).
//
// Decoding never trusts its input: every decode_* checks the sizes before it
// reads, and returns an error for every malformed message (the rule and the
// values in the message) together with the protocol's error code, which the
// server sends back in an ERROR. It never reads out of bounds, never aborts
// and never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace troupe::edge::remote {

/// The protocol's major version (must match).
constexpr uint8_t protocol_major = 1;
/// The protocol's minor version (the lower of both sides' is agreed).
constexpr uint8_t protocol_minor = 1;
/// Bytes in a header frame.
constexpr size_t header_size = 32;
/// Most environments in one session.
constexpr uint32_t max_session_envs = 1u << 20;
/// Most floats in one observation (obs_dim) or one Box action (action_dim).
constexpr uint32_t max_dim = 1u << 20;
/// Most actions of a Discrete action space.
constexpr uint32_t max_discrete_actions = 1u << 24;
/// Longest client name in a HELLO.
constexpr size_t max_client_name = 128;

/// Message kinds (the header's byte 6).
enum class kind : uint8_t {
  hello = 1,   ///< client -> troupe: the handshake
  welcome = 2, ///< troupe -> client: the session
  step = 3,    ///< client -> troupe: outcomes and observations
  act = 4,     ///< troupe -> client: actions
  ping = 5,    ///< client -> troupe: alive
  pong = 6,    ///< troupe -> client: the answer to a ping
  close = 7,   ///< either: the session ends
  error = 8,   ///< troupe -> client: a refusal
};

/// The name of a kind ("HELLO", ...), or "?" for a value outside the enum.
const char* to_string(kind k) noexcept;

/// The protocol's error codes (docs/protocol.md, "ERROR").
enum class error_code : uint32_t {
  none = 0,             ///< no error
  bad_header = 1,       ///< the header frame is not 32 bytes
  bad_magic = 2,        ///< the header does not start with TRPE
  version_mismatch = 3, ///< another major version
  unknown_kind = 4,     ///< not a kind, or a kind troupe sends
  out_of_order = 5,     ///< a kind the connection's state does not allow
  unknown_session = 6,  ///< a session not open on this connection
  bad_frame_count = 7,  ///< another number of frames than the kind has
  bad_handshake = 8,    ///< a HELLO's JSON is malformed
  space_mismatch = 9,   ///< a HELLO's spaces are not troupe's
  count_mismatch = 10,  ///< a count or array length disagrees
  bad_env_id = 11,   ///< an env id out of range, repeated, or reporting on its first step
  non_finite = 12,   ///< a NaN or infinite observation or reward
  bad_sequence = 13, ///< a sequence number not above the previous one
  too_many_errors = 14, ///< the session is dropped for its errors
  timeout = 15,         ///< the session is dropped for silence
  server_full = 16,     ///< no room for the HELLO's environments
  server_closing = 17,  ///< reserved: not sent since 1.1 (CLOSE instead)
  bad_flags = 18,       ///< undefined flag bits set in a STEP
};

/// The name of a code ("bad_magic", ...), or "unknown" for another value.
const char* to_string(error_code c) noexcept;

/// The header frame's fields (docs/protocol.md, "The header frame").
struct header {
  uint8_t major = protocol_major; ///< protocol major version
  uint8_t minor = protocol_minor; ///< protocol minor version
  kind type = kind::ping;         ///< what the message is
  uint8_t flags = 0;              ///< reserved, 0
  uint64_t sequence = 0;          ///< numbering, see docs/protocol.md
  uint32_t num_envs = 0;          ///< environments the message is about
  uint64_t session = 0;           ///< session id (0 before WELCOME)
};

/// What a session's handshake agreed on: the sizes every STEP and ACT must have.
struct env_shape {
  uint32_t num_envs = 1;    ///< N: environments of the session
  uint32_t obs_dim = 1;     ///< floats per observation
  bool discrete = true;     ///< Discrete (int32 actions) or Box (float32)
  uint32_t num_actions = 2; ///< n of a Discrete space (unused for a Box)
  uint32_t action_dim = 1;  ///< floats per Box action (1 for a Discrete space)

  /// Values per action on the wire and in act::actions (1 for Discrete).
  uint32_t action_width() const noexcept { return discrete ? 1 : action_dim; }
};

/// HELLO: who the client is and what its environments look like.
struct hello {
  std::string client; ///< a name for logs (1 to max_client_name characters)
  env_shape shape;    ///< its spaces and number of environments
};

/// WELCOME: the session and its time-outs.
struct welcome {
  uint64_t session = 0;           ///< the new session id (not 0)
  uint8_t major = protocol_major; ///< the agreed major version
  uint8_t minor = protocol_minor; ///< the agreed minor version
  uint32_t num_envs = 0;          ///< N, as the HELLO said
  uint32_t heartbeat_ms = 1000;   ///< send a STEP or PING at least this often
  uint32_t timeout_ms = 10000;    ///< silence after which a session is dropped
  uint32_t max_errors = 16;       ///< malformed messages tolerated
};

/// STEP flag bit: the previous action ended the episode in a terminal state.
constexpr uint8_t flag_terminated = 1;
/// STEP flag bit: the previous action ended the episode by truncation.
constexpr uint8_t flag_truncated = 2;

/// STEP: k environments' outcomes of their previous actions and new observations.
struct step {
  std::vector<uint32_t> env_ids; ///< k ids in [0, N), distinct
  std::vector<float> obs;        ///< [k x obs_dim] observations to act on
  std::vector<double> rewards;   ///< [k] rewards of the previous actions
  std::vector<uint8_t> flags;    ///< [k] flag_terminated | flag_truncated
  std::vector<float> final_obs; ///< [m x obs_dim] last observations of the ended episodes

  /// Environments in the message (k).
  size_t size() const noexcept { return env_ids.size(); }
};

/// ACT: the actions for the environments of one STEP.
struct act {
  std::vector<uint32_t> env_ids; ///< the STEP's ids, same order
  std::vector<float> actions;    ///< [k x action_width]; a Discrete action as its index
  uint64_t policy_version = 0;   ///< the policy that chose them
};

/// ERROR: a refusal.
struct error_reply {
  error_code code = error_code::none; ///< what rule was broken
  std::string message;                ///< the rule and the values, for people
};

/// One frame's bytes.
using frame = std::vector<uint8_t>;

/// A read-only view of one received frame.
struct frame_view {
  const uint8_t* data = nullptr; ///< the first byte (may be null when size is 0)
  size_t size = 0;               ///< bytes
};

/// Views of `frames`.
std::vector<frame_view> views_of(const std::vector<frame>& frames);

// -- encoding -------------------------------------------------------------------

/// The 32-byte header frame of `h`.
frame encode_header(const header& h);

/// HELLO (header: h's version, sequence; num_envs and session 0 filled in).
std::vector<frame> encode_hello(header h, const hello& m);
/// WELCOME (header: h's sequence; version, num_envs and session from m).
std::vector<frame> encode_welcome(header h, const welcome& m);
/// STEP (header: h's version, sequence and session; num_envs filled in).
std::vector<frame> encode_step(header h, const step& m);
/// ACT for a session of `shape` (Discrete actions are written as int32).
std::vector<frame> encode_act(header h, const act& m, const env_shape& shape);
/// ERROR.
std::vector<frame> encode_error(header h, const error_reply& m);
/// PING, PONG or CLOSE: the header alone (h.type says which).
std::vector<frame> encode_signal(header h);

// -- decoding ---------------------------------------------------------------------
// Each decode_* takes every frame of the message (the header frame first)
// and, on failure, sets `code` to the protocol's error code.

/// The header: 32 bytes, magic TRPE, major version 1, a known kind.
result<header> decode_header(const frame_view* frames, size_t count, error_code& code);

/// The sequence number of a message whose header frame has version 1's layout
/// (32 bytes, magic TRPE, major version 1), whatever its kind; 0 for any other
/// (an ERROR's sequence when decode_header refused the header).
uint64_t readable_sequence(const frame_view* frames, size_t count) noexcept;

/// A HELLO's handshake (the JSON frame; its num_envs must equal the header's).
result<hello> decode_hello(const header& h, const frame_view* frames, size_t count,
                           error_code& code);
/// A WELCOME.
result<welcome> decode_welcome(const header& h, const frame_view* frames, size_t count,
                               error_code& code);
/// A STEP of a session of `shape`: sizes, ids in range and distinct, flags,
/// finite values.
result<step> decode_step(const header& h, const frame_view* frames, size_t count,
                         const env_shape& shape, error_code& code);
/// An ACT of a session of `shape`: sizes, ids in range, Discrete actions in [0, n).
result<act> decode_act(const header& h, const frame_view* frames, size_t count,
                       const env_shape& shape, error_code& code);
/// An ERROR.
result<error_reply> decode_error(const header& h, const frame_view* frames, size_t count,
                                 error_code& code);
/// A PING, PONG or CLOSE: the header alone.
status decode_signal(const header& h, size_t count, error_code& code);

/// Whether a client may send `k` now: a connection without a session may send
/// HELLO only; one with a session STEP, PING or CLOSE; kinds that troupe
/// sends are never accepted (unknown_kind).
status check_client_kind(kind k, bool has_session, error_code& code);

/// Whether `shape` is usable: N, obs_dim, n and action_dim within the limits.
status check_shape(const env_shape& shape);

/// Whether the spaces of `offered` are those of `trained` (N aside):
/// space_mismatch naming the first difference.
status check_same_spaces(const env_shape& offered, const env_shape& trained);

} // namespace troupe::edge::remote
