// A worker process of a run across processes (docs/cluster.md): it reaches
// the coordinator's gate (bounded retries over reconnect_s), joins with its
// name, a random incarnation, what it hosts and the token, then runs its
// learners and their runners under a local supervisor that uses the
// coordinator's keeper and metrics actor and the host's own replica of the
// parameter server, a member of the data plane's group. Its runners act with
// a per-host policy store that the replica publishes to; the run's end comes
// from the coordinator (stop_atom). A worker with no learners and `runners`
// > 0 is an environment-only host: its runners feed the learner hosts'
// learners through their feed doors (trajectory batches over the wire), and
// its store takes the versions one of those doors pushes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "actors/log.hpp"
#include "base/error.hpp"
#include "runtime/cluster/node.hpp"

namespace troupe::cluster {

/// Settings of a worker.
struct worker_options {
  endpoint connect; ///< the coordinator's HOST:PORT
  std::string run;  ///< the run's name (cluster.json's "run")
  /// When set, the coordinator's cluster.json (on a file system both see):
  /// `connect` and `run` come from it, and it is read again before every
  /// attempt to reach the coordinator, so that a worker follows a
  /// coordinator resumed on another address. `run`, when also set, must be
  /// the file's.
  std::string connect_file;
  std::string name;                 ///< its name in the run (unique among live hosts)
  uint64_t learners = 1;            ///< learners it hosts
  uint64_t runners_per_learner = 0; ///< 0: the run's algo.runners_per_learner
  uint64_t runners =
    0;                ///< with learners = 0: runners feeding the learner hosts' learners
  std::string device; ///< empty: the run's run.device
  /// data_plane = "allreduce": the address this host's data port and feed
  /// door bind to; empty: the one its connection to the coordinator leaves
  /// from (source_address_toward).
  std::string data_interface;
  std::string token;           ///< empty: TROUPE_CLUSTER_TOKEN
  uint64_t heartbeat_ms = 500; ///< as the coordinator's cluster.heartbeat_ms
  uint64_t timeout_ms = 3000;  ///< as the coordinator's cluster.timeout_ms
  uint64_t reconnect_s = 60;   ///< how long it tries to reach the coordinator
  /// Scheduler threads of its actor system; 0: the CPUs this process may run
  /// on (its affinity mask, which taskset and cpusets narrow), not CAF's
  /// default of at least 4.
  uint64_t threads = 0;
  tls_files tls; ///< with a certificate: TLS (the run's cluster.tls_*)
  /// Set (milliseconds since the epoch, system clock) when this process is
  /// the restart of a worker that lost its coordinator: it tries to reach
  /// the coordinator until then instead of for reconnect_s.
  uint64_t rejoin_until_ms = 0;
  /// Where its lines go (joined, ended, lost) and its actors' logs; empty:
  /// nowhere. Why it could not connect, join or run is the steps' error
  /// value instead. `troupe worker` writes them to stdout (info) and stderr
  /// (the rest, and the errors).
  actors::log_sink log;
};

/// How a worker's run ended (the caller decides what the process does).
enum class worker_end {
  /// The coordinator ended the run (or this host's learners spent the step
  /// budget and the coordinator ended it then).
  ended,
  /// The coordinator was lost while the worker trained (it may be resumed, or
  /// this worker was declared lost while it was frozen): the caller starts the
  /// worker again as a new process (a new incarnation) that keeps trying to
  /// reach the coordinator for reconnect_s. This process's learners may wait
  /// forever on the gone server.
  rejoin,
};

/// A worker in three steps, each an error value on failure: connect() reaches
/// the coordinator's gate (bounded retries over reconnect_s), join() joins the
/// run and builds this host's cast, run() trains until the run ends. Its
/// actor system is owned by a runtime::driver: a worker that gave up before
/// run() ends it (bounded); once run() has begun it is left running
/// (system_end::leave: a learner may wait on a coordinator that is gone), so
/// the caller ends the process soon after. Movable, not copyable.
class worker {
public:
  /// Reads the token (opts.token or TROUPE_CLUSTER_TOKEN), the coordinator's
  /// address (given, or from opts.connect_file) and reaches its gate; the
  /// error names the address and why.
  static result<worker> connect(const worker_options& opts);

  worker(worker&&) noexcept;
  worker& operator=(worker&&) noexcept;
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;
  ~worker();

  /// Joins the run (asking again while a lost host of its name is not yet
  /// declared lost) and builds this host's cast from the run's config; the
  /// error names the coordinator and why. Once, after connect().
  status join();

  /// Trains until the run ends; then flushes this host's statistics deltas
  /// and says how it ended. An error when the cast failed (its message), or
  /// when called before join().
  result<worker_end> run();

  struct state; ///< the worker's state (worker.cpp)

private:
  explicit worker(std::unique_ptr<state> st);
  std::unique_ptr<state> st_;
};

} // namespace troupe::cluster
