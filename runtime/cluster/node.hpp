// What every node of a run across processes shares (docs/cluster.md): the
// middleman's settings (heartbeats, connection timeout, app identifier), the
// run's token and HOST:PORT endpoints.
#pragma once

#include <cstdint>
#include <string>

#include <caf/all.hpp>

#include "kernels/error.hpp"
#include "runtime/config.hpp"

namespace troupe::cluster {

/// Name of the environment variable that holds the token when the config
/// has none (and the worker's only source of it: never on a command line).
constexpr const char* token_variable = "TROUPE_CLUSTER_TOKEN";

/// The middleman's settings of one node.
struct node_settings {
  uint64_t heartbeat_ms = 500; ///< middleman.heartbeat-interval
  uint64_t timeout_ms = 3000;  ///< middleman.connection-timeout
  std::string app_identifier;  ///< middleman.app-identifiers (one entry)
};

/// The app identifier of run `run` (the name of the coordinator's run
/// folder, cluster.json's "run"): "troupe-cluster-1:RUN". Nodes of different
/// runs refuse each other in the middleman's handshake, before any message.
std::string app_identifier(const std::string& run);

/// Whether `given` equals the non-empty `expected`, in a time that depends
/// on expected's length only (not on where they differ).
bool same_token(const std::string& given, const std::string& expected);

/// The token of the run: cluster.token, else TROUPE_CLUSTER_TOKEN; an error
/// naming both when neither is set.
result<std::string> run_token(const runtime::config& cfg);

/// The node settings from cfg's [cluster] section for run `run`; an error
/// naming the keys when timeout_ms is not larger than heartbeat_ms.
result<node_settings> node_settings_from(const runtime::config& cfg,
                                         const std::string& token);

/// Loads the middleman into `cfg` with `s` (before the system is created).
void configure_node(caf::actor_system_config& cfg, const node_settings& s);

/// A HOST:PORT pair.
struct endpoint {
  std::string host;  ///< name or address
  uint16_t port = 0; ///< 0: any free port (listening only)
};

/// Parses "HOST:PORT" (an IPv6 host in brackets); `what` names the value
/// in the error (e.g. "--listen").
result<endpoint> parse_endpoint(const std::string& text, const std::string& what);

} // namespace troupe::cluster
