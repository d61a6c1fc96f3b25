// A worker process of a run across processes (docs/cluster.md): it reaches
// the coordinator's gate (bounded retries over reconnect_s), joins with its
// name, a random incarnation, what it hosts and the token, then runs its
// learners and their runners under a local supervisor that uses the
// coordinator's keeper, parameter server and metrics actor. Its runners act
// with a per-host policy store that the coordinator's gate feeds (host
// actor); the run's end comes from the coordinator (stop_atom). A worker
// with no learners and `runners` > 0 is an environment-only host: its
// runners feed the coordinator's learners (trajectory batches over the wire).
#pragma once

#include <cstdint>
#include <string>

#include "actors/log.hpp"
#include "runtime/cluster/node.hpp"

namespace troupe::cluster {

/// Settings of a worker.
struct worker_options {
  endpoint connect;                 ///< the coordinator's HOST:PORT
  std::string run;                  ///< the run's name (cluster.json's "run")
  /// When set, the coordinator's cluster.json (on a file system both see):
  /// `connect` and `run` come from it, and it is read again before every
  /// attempt to reach the coordinator, so that a worker follows a
  /// coordinator resumed on another address. `run`, when also set, must be
  /// the file's.
  std::string connect_file;
  std::string name;                 ///< its name in the run (unique among live hosts)
  uint64_t learners = 1;            ///< learners it hosts
  uint64_t runners_per_learner = 0; ///< 0: the run's algo.runners_per_learner
  uint64_t runners = 0; ///< with learners = 0: runners feeding the coordinator's learners
  std::string device;               ///< empty: the run's run.device
  std::string token;                ///< empty: TROUPE_CLUSTER_TOKEN
  uint64_t heartbeat_ms = 500;      ///< as the coordinator's cluster.heartbeat_ms
  uint64_t timeout_ms = 3000;       ///< as the coordinator's cluster.timeout_ms
  uint64_t reconnect_s = 60;        ///< how long it tries to reach the coordinator
  tls_files tls;                    ///< with a certificate: TLS (the run's cluster.tls_*)
  /// Set (milliseconds since the epoch, system clock) when this process is
  /// the restart of a worker that lost its coordinator: it tries to reach
  /// the coordinator until then instead of for reconnect_s.
  uint64_t rejoin_until_ms = 0;
  /// Where its lines go (joined, ended, lost, and why it could not join) and
  /// its actors' logs; empty: nowhere. `troupe worker` writes them to stdout
  /// (info) and stderr (the rest).
  actors::log_sink log;
};

/// What run_worker returns when the coordinator was lost while the worker
/// trained: the caller starts the worker again as a new process (a new
/// incarnation) that keeps trying to reach the coordinator for reconnect_s.
constexpr int worker_rejoin = -1;

/// Runs a worker to its end and returns the process's exit status: 0 when
/// the run ended, 1 (with an error-level line to opts.log) when it could not join, or
/// worker_rejoin when the coordinator was lost while it trained (the
/// coordinator may be resumed, or this worker was declared lost while it
/// was frozen). The actor system is left running on return (a
/// learner may wait on a coordinator that is gone): the caller ends the
/// process with this status at once.
int run_worker(const worker_options& opts);

} // namespace troupe::cluster
