// What every node of a run across processes shares (docs/cluster.md): the
// middleman's settings (heartbeats, connection timeout, app identifier), the
// run's token and HOST:PORT endpoints.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <caf/all.hpp>

#include "base/error.hpp"
#include "runtime/config.hpp"

namespace troupe::cluster {

/// Name of the environment variable that holds the token when the config
/// has none (and the worker's only source of it: never on a command line).
constexpr const char* token_variable = "TROUPE_CLUSTER_TOKEN";

/// A HOST:PORT pair.
struct endpoint {
  std::string host;  ///< name or address
  uint16_t port = 0; ///< 0: any free port (listening only)
};

/// The files of a node's TLS identity (PEM): all three set, or none (no TLS).
struct tls_files {
  std::string certificate; ///< this node's certificate (chain), signed by the run's CA
  std::string key;         ///< its private key, unencrypted
  std::string ca;          ///< the CA certificate(s) a peer's certificate must chain to
  bool enabled() const { return !certificate.empty(); }
};

/// The middleman's settings of one node.
struct node_settings {
  uint64_t heartbeat_ms = 500;              ///< middleman.heartbeat-interval
  uint64_t timeout_ms = 3000;               ///< middleman.connection-timeout
  std::vector<std::string> app_identifiers; ///< middleman.app-identifiers
  tls_files tls; ///< with a certificate: TLS on every connection
};

/// Checks a node's TLS files before anything starts (the rules:
/// docs/design-notes.md, "runtime/"), naming each by `keys` (config keys or
/// flags) and `origins` (file:line, "--set"; empty for flags).
status check_tls(const tls_files& t, const std::array<std::string, 3>& keys,
                 const std::array<std::string, 3>& origins = {});

/// The app identifier of run `run` (the name of the coordinator's run
/// folder, cluster.json's "run"): "troupe-cluster-1:RUN". Nodes of different
/// runs refuse each other in the middleman's handshake, before any message.
std::string app_identifier(const std::string& run);

/// The app identifier of a worker that names no run ("troupe-cluster-1"):
/// every coordinator accepts it beside its run's own, and the worker learns
/// the run from the welcome (the token still decides who joins).
std::string any_run_identifier();

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

/// Loads the middleman into `cfg` with `s` (before the system is created),
/// and with TLS files CAF's OpenSSL module, which then needs a valid
/// certificate of the run's CA on both ends of every connection.
void configure_node(caf::actor_system_config& cfg, const node_settings& s);

/// Publishes `gate` at host:port (SO_REUSEADDR), over TLS when `s` has it.
caf::expected<uint16_t> publish_gate(const caf::actor& gate, const endpoint& at,
                                     const node_settings& s);

/// Publishes `a` at host:port (port 0: a free one), over TLS when `s` has it;
/// the port it listens on.
caf::expected<uint16_t> publish_actor(const caf::actor& a, const endpoint& at,
                                      const node_settings& s, bool reuse_address);

/// A worker that started without knowing its run (no --run) takes the run's
/// app identifier once the welcome names it, in place of the any-run one:
/// the hosts of the run then accept each other's connections (a learner
/// host's feed door), and nodes of other runs are refused. Called before
/// this system makes or accepts any connection but the one to the gate.
void use_run_identifier(caf::actor_system& sys, const std::string& run);

/// Connects to the gate (or a learner host's feed door) at `at`, over TLS
/// when `s` has it.
caf::expected<caf::actor> connect_gate(caf::actor_system& sys, const endpoint& at,
                                       const node_settings& s);

/// Parses "HOST:PORT" (an IPv6 host in brackets); `what` names the value
/// in the error (e.g. "--listen").
result<endpoint> parse_endpoint(const std::string& text, const std::string& what);

/// Whether `host` listens on every address (0.0.0.0, ::, *): nobody can
/// connect to that name.
bool wildcard_host(const std::string& host);

/// The local address a connection to `to` leaves from (the kernel's route
/// to it; nothing is sent): where a worker's data port binds by default, so
/// that the hosts it reaches can reach it. An error names `to`.
result<std::string> source_address_toward(const endpoint& to);

/// What a coordinator's cluster.json says: where workers connect and the run.
struct cluster_file {
  endpoint connect; ///< "connect" (the listen address, a wildcard host replaced
                    ///< by this machine's name), else "host" and "port"
  std::string run;  ///< the run's name (its folder's)
};

/// Writes `path` (cluster.json: listen address, port, run name and where a
/// worker connects) whole or not at all, returning the problem or empty.
std::string write_cluster_file(const std::string& path, const endpoint& listen,
                               uint16_t port, const std::string& run);

/// Reads a cluster.json; an error naming the file and what is wrong in it.
result<cluster_file> read_cluster_file(const std::string& path);

} // namespace troupe::cluster
