// Training environments served over ZeroMQ (env.id = "remote", the protocol
// of docs/protocol.md): the [remote] section gives the spaces and the
// server's settings; the run is the game-driven cast of the embedding API
// (runtime/game_cast.hpp: game feeders in every runner slot, one game agent of
// remote.max_envs slots) with a remote server (actors/remote_server.hpp)
// driving the agent.
#pragma once

#include <memory>
#include <string>

#include "edge/remote_server.hpp"
#include "kernels/error.hpp"
#include "runtime/config.hpp"
#include "runtime/session.hpp"

namespace troupe::runtime {

/// The environment id that makes a run serve remote environments.
inline constexpr const char* remote_env_id = "remote";

/// Whether `cfg` trains remote environments (env.id = "remote").
bool is_remote(const config& cfg);

/// The spaces [remote] gives (obs_dim, num_actions or action_dim).
actors::remote::env_shape remote_shape(const config& cfg);

/// Registers the environment "remote" with the spaces of cfg's [remote]
/// section (replacing an earlier registration with other spaces), so that
/// the session finds its spec. Its environments cannot be made in-process.
status register_remote_env(const config& cfg);

/// A training run of remote environments (see the file comment).
class remote_run {
public:
  /// Checks the [remote] section, registers the environment, binds
  /// remote.bind and opens the session: nothing trains yet. An address in
  /// use or a bad value is errc::bad_config naming FILE:LINE and the key.
  /// The session's log (and the server's, and the serving and closing
  /// lines at info level) goes to `options.log`; its runner factories are
  /// the remote run's own.
  static result<std::unique_ptr<remote_run>>
  open(const config& cfg, std::string resume_dir = {}, session_options options = {});

  ~remote_run();
  remote_run(const remote_run&) = delete;
  remote_run& operator=(const remote_run&) = delete;

  /// Starts training, waits (bounded) until the game agent exists, and
  /// starts serving clients.
  status start();

  /// The training session (progress, wait, request_stop).
  session& training();

  /// The server's counters (zero before start()).
  actors::remote_server_counters server_counters() const;

  /// The endpoint the server is bound to.
  std::string endpoint() const;

  /// Stops serving (every session gets CLOSE), then closes the session
  /// (final checkpoint) and the agent.
  result<training_result> close();

  struct impl;

private:
  explicit remote_run(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace troupe::runtime
