// The remote environment server: serves the protocol of docs/protocol.md on
// a ZeroMQ ROUTER socket and drives a game agent (edge/game_agent.hpp) with
// what clients send, so that environments in other processes, languages and
// hosts train like a game that links troupe.
//
// One thread owns the socket. Each client session's N environments take N
// free slots of the agent; a STEP reports the outcomes of the previous actions
// (game_agent::report) and acts for the new observations (act_batch over runs
// of consecutive slots), and the ACT goes back at once: a client waits on
// inference only, never on training. A session that ends (CLOSE, silence for
// timeout_ms, more than max_errors malformed messages) gives its slots up with
// game_agent::abandon: the unfinished segments of its episodes in progress are
// discarded and counted (what was queued before ends where a segment ends:
// bootstrapped, never terminal), and the slots serve the next session. A malformed
// message is answered with ERROR (code, rule, values), counted for its client and logged
// with the client's name and address; the session is otherwise unchanged and the others
// are served as before. ZeroMQ's exceptions are caught here: nothing escapes the thread.
//
// With a CURVE secret key the socket is a CURVE server (libzmq's encryption and
// authentication): the same thread answers libzmq's ZAP requests
// (inproc://zeromq.zap.01 of the server's own context), letting in only the client
// public keys of the allow-list, and watches the socket's handshake events, so
// that a client with an unknown key, a wrong server key or no CURVE at all is
// refused before it can send a message, and is counted and logged.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edge/game_agent.hpp"
#include "actors/log.hpp"
#include "edge/remote_wire.hpp"
#include "base/error.hpp"

namespace troupe::edge {

/// Settings of a remote environment server.
struct remote_server_options {
  std::string bind = "tcp://127.0.0.1:5555"; ///< ZeroMQ endpoint of the ROUTER socket
  remote::env_shape shape;                   ///< the spaces trained (num_envs: unused)
  uint32_t min_envs = 1;        ///< environments asked for before the first WELCOME
  uint32_t heartbeat_ms = 1000; ///< told to clients: send at least this often
  uint32_t timeout_ms = 10000;  ///< a silent session is dropped after this
  uint32_t max_errors = 16;     ///< malformed messages tolerated per session
  /// The server's CURVE secret key, Z85 (40 characters); empty: no CURVE
  /// (plaintext, for loopback and trusted networks).
  std::string curve_secret_key;
  /// With CURVE: the Z85 public keys of the clients let in (any other is refused).
  std::vector<std::string> curve_allowed_clients;
  actors::log_sink log; ///< empty: nowhere
};

/// What a server has done (totals since it started).
struct remote_server_counters {
  uint64_t sessions = 0;         ///< sessions welcomed
  uint64_t sessions_closed = 0;  ///< ended by the client's CLOSE
  uint64_t sessions_dropped = 0; ///< dropped for silence or errors
  uint64_t envs_connected = 0;   ///< environments of the sessions open now
  uint64_t steps = 0;            ///< STEP messages answered with ACT
  uint64_t env_steps = 0;        ///< environments acted for
  uint64_t errors = 0;           ///< ERRORs sent for malformed messages
  uint64_t refused = 0; ///< CURVE: connections refused (unknown key, failed handshake)
};

/// A Z85 CURVE key is 40 characters that decode to 32 bytes; invalid_argument
/// naming `what` and the rule otherwise.
status check_z85_key(const std::string& key, const std::string& what);

/// The Z85 public key of a Z85 CURVE secret key (checked as check_z85_key).
result<std::string> curve_public_key(const std::string& secret_key);

/// A bound server (see the file comment). Movable only through its pointer.
class remote_server {
public:
  /// Binds the ROUTER socket to opts.bind for an agent of `slots` slots;
  /// errc::unavailable naming the endpoint and ZeroMQ's reason when it cannot
  /// (an address in use, a malformed endpoint). Serves nothing yet.
  static result<std::unique_ptr<remote_server>> bind(remote_server_options opts,
                                                     size_t slots);

  ~remote_server();
  remote_server(const remote_server&) = delete;
  remote_server& operator=(const remote_server&) = delete;

  /// The endpoint as bound (tcp://127.0.0.1:PORT with the port chosen when
  /// the address asked for port 0 or *).
  std::string endpoint() const;

  /// Starts serving with `agent` (its slots must be the `slots` of bind, its
  /// spaces the shape's) on a thread of its own. Once only.
  status start(std::shared_ptr<game_agent> agent);

  /// Tells every session the server is closing (CLOSE), stops the thread and
  /// closes the socket. Idempotent; also done by the destructor.
  void stop();

  /// The counters now (any thread).
  remote_server_counters counters() const;

  struct impl;

private:
  explicit remote_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace troupe::edge
