#include "runtime/remote_run.hpp"

#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "edge/game_agent.hpp"
#include "envs/registry.hpp"
#include "runtime/game_cast.hpp"

namespace troupe::runtime {

namespace {

// How long start() waits for the cast to make the game agent.
constexpr std::chrono::seconds agent_wait{120};

error at_key(const config& cfg, const std::string& key, const std::string& message) {
  return error{errc::bad_config,
               fmt::format("{}: {}: {}", cfg.origin(key), key, message)};
}

// The keys of a key file: the first word of every non-blank line (a note may
// follow after a space), each checked as Z85; `one`: exactly one key.
result<std::vector<std::string>> read_keys(const config& cfg, const std::string& key,
                                           const std::string& path, bool one) {
  std::ifstream in(path);
  if (!in)
    return at_key(cfg, key,
                  fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  std::vector<std::string> keys;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos)
      continue;
    const std::string word = line.substr(b, line.find_first_of(" \t\r", b) - b);
    if (auto ok = edge::check_z85_key(word, fmt::format("{}:{}", path, number)); !ok)
      return at_key(cfg, key, ok.err().message);
    if (one && !keys.empty())
      return at_key(
        cfg, key,
        fmt::format("{}:{}: a second key; the file holds one secret key", path, number));
    keys.push_back(word);
  }
  if (in.bad())
    return at_key(cfg, key,
                  fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  if (keys.empty())
    return at_key(cfg, key, fmt::format("'{}' holds no key", path));
  return keys;
}

// remote.curve_*: both files or neither, read and checked before anything starts.
status curve_settings(const config& cfg, edge::remote_server_options& so) {
  const auto& secret_file = cfg.get_string("remote.curve_secret_key_file");
  const auto& allowed_file = cfg.get_string("remote.curve_allowed_clients_file");
  if (secret_file.empty() && allowed_file.empty())
    return ok_status();
  if (secret_file.empty())
    return at_key(cfg, "remote.curve_allowed_clients_file",
                  "an allow-list of client keys needs remote.curve_secret_key_file (the "
                  "server's CURVE key)");
  if (allowed_file.empty())
    return at_key(cfg, "remote.curve_secret_key_file",
                  "CURVE needs remote.curve_allowed_clients_file, the client public keys "
                  "let in");
  auto secret = read_keys(cfg, "remote.curve_secret_key_file", secret_file, true);
  if (!secret)
    return secret.err();
  auto allowed = read_keys(cfg, "remote.curve_allowed_clients_file", allowed_file, false);
  if (!allowed)
    return allowed.err();
  so.curve_secret_key = secret->front();
  so.curve_allowed_clients = std::move(*allowed);
  return ok_status();
}

envs::env_spec remote_spec(const config& cfg) {
  const auto shape = remote_shape(cfg);
  envs::env_spec spec;
  spec.id = remote_env_id;
  spec.observation_space =
    envs::space::box(shape.obs_dim, -std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::infinity());
  // Box actions go to the clients as sampled (unclipped): the bounds are
  // nominal, the client clips to its own.
  spec.action_space = shape.discrete ? envs::space::discrete(shape.num_actions)
                                     : envs::space::box(shape.action_dim, -1.0f, 1.0f);
  spec.max_episode_steps = 1 << 30; // the clients end their episodes
  spec.early_truncation = true;
  return spec;
}

bool same_spaces(const envs::env_spec& a, const envs::env_spec& b) {
  return a.observation_space.size() == b.observation_space.size() &&
         a.action_space.kind == b.action_space.kind &&
         a.action_space.n == b.action_space.n &&
         a.action_space.size() == b.action_space.size();
}

} // namespace

bool is_remote(const config& cfg) {
  return cfg.get_string("env.id") == remote_env_id;
}

edge::remote::env_shape remote_shape(const config& cfg) {
  edge::remote::env_shape s;
  s.num_envs = static_cast<uint32_t>(cfg.get_int("remote.max_envs"));
  s.obs_dim = static_cast<uint32_t>(cfg.get_int("remote.obs_dim"));
  const auto n = cfg.get_int("remote.num_actions");
  s.discrete = n > 0;
  s.num_actions = static_cast<uint32_t>(n);
  s.action_dim = s.discrete ? 1 : static_cast<uint32_t>(cfg.get_int("remote.action_dim"));
  return s;
}

status register_remote_env(const config& cfg) {
  const auto spec = remote_spec(cfg);
  if (auto found = envs::find_spec(remote_env_id)) {
    if (same_spaces(**found, spec))
      return ok_status();
    if (auto ok = envs::unregister_env(remote_env_id); !ok)
      return ok;
  }
  envs::registration r;
  r.spec = spec;
  r.make = []() -> std::unique_ptr<envs::env> {
    throw std::runtime_error("the environment 'remote' is served over ZeroMQ "
                             "(docs/protocol.md); it cannot be made in-process");
  };
  return envs::register_env(std::move(r));
}

struct remote_run::impl {
  config cfg;
  std::shared_ptr<game_agent_source> source = std::make_shared<game_agent_source>();
  std::unique_ptr<edge::remote_server> server;
  std::optional<session> inner;
  actors::log_sink log;
  bool started = false, closed = false;
};

remote_run::remote_run(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

remote_run::~remote_run() {
  if (impl_ && !impl_->closed)
    (void)close();
}

result<std::unique_ptr<remote_run>>
remote_run::open(const config& cfg, std::string resume_dir, session_options opts) {
  if (!is_remote(cfg))
    return at_key(cfg, "env.id",
                  fmt::format("a remote run needs env.id = \"remote\", got \"{}\"",
                              cfg.get_string("env.id")));
  // Only the process that binds remote.bind serves remote environments, and a
  // worker of a run across processes has no server: refused, not half served.
  if (const auto& listen = cfg.get_string("cluster.listen"); !listen.empty())
    return at_key(cfg, "env.id",
                  fmt::format("\"remote\" environments are served by a run in one "
                              "process; a run across processes (cluster.listen '{}') "
                              "cannot serve them yet",
                              listen));
  const auto min_envs = cfg.get_int("remote.min_envs");
  const auto max_envs = cfg.get_int("remote.max_envs");
  if (min_envs > max_envs)
    return at_key(
      cfg, "remote.min_envs",
      fmt::format("must be at most remote.max_envs {}, got {}", max_envs, min_envs));
  const auto heartbeat = cfg.get_int("remote.heartbeat_ms");
  const auto timeout = cfg.get_int("remote.timeout_ms");
  if (timeout <= heartbeat)
    return at_key(
      cfg, "remote.timeout_ms",
      fmt::format("must be above remote.heartbeat_ms {}, got {}", heartbeat, timeout));
  if (auto ok = register_remote_env(cfg); !ok)
    return at_key(cfg, "env.id", ok.err().message);

  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  p->log = opts.log;
  p->source->slots = static_cast<size_t>(max_envs);
  p->source->name = "remote";
  p->source->env_id = remote_env_id;
  // The address first: a port in use stops the run before anything starts.
  edge::remote_server_options so;
  so.bind = cfg.get_string("remote.bind");
  so.shape = remote_shape(cfg);
  so.min_envs = static_cast<uint32_t>(min_envs);
  so.heartbeat_ms = static_cast<uint32_t>(heartbeat);
  so.timeout_ms = static_cast<uint32_t>(timeout);
  so.max_errors = static_cast<uint32_t>(cfg.get_int("remote.max_errors"));
  so.log = opts.log;
  if (auto ok = curve_settings(cfg, so); !ok)
    return ok.err();
  auto server = edge::remote_server::bind(so, p->source->slots);
  if (!server)
    return at_key(cfg, "remote.bind", server.err().message);
  p->server = std::move(*server);

  const auto learners = static_cast<size_t>(cfg.get_int("algo.num_learners"));
  opts.cast.runner_factories.assign(learners, game_feeder_factory(p->source));
  auto s = session::open(cfg, std::move(resume_dir), std::move(opts));
  if (!s)
    return s.err();
  p->inner.emplace(std::move(*s));
  return std::unique_ptr<remote_run>(new remote_run(std::move(p)));
}

status remote_run::start() {
  auto& m = *impl_;
  if (m.started || m.closed)
    return make_error(errc::invalid_argument, "remote run: started or closed already");
  m.started = true;
  if (auto ok = m.inner->start(); !ok)
    return ok;
  auto agent = m.source->wait(agent_wait);
  if (!agent)
    return make_error(errc::unavailable, "remote run: {}", agent.err().message);
  if (auto ok = m.server->start(*agent); !ok)
    return ok;
  actors::write_log(
    m.log, actors::log_level::info,
    fmt::format("troupe: serving remote environments on {} (docs/protocol.md){}",
                m.server->endpoint(),
                m.cfg.get_string("remote.curve_secret_key_file").empty()
                  ? ""
                  : " with CURVE: clients of remote.curve_allowed_clients_file only"));
  return ok_status();
}

session& remote_run::training() {
  return *impl_->inner;
}

edge::remote_server_counters remote_run::server_counters() const {
  return impl_->server ? impl_->server->counters() : edge::remote_server_counters{};
}

std::string remote_run::endpoint() const {
  return impl_->server ? impl_->server->endpoint() : std::string{};
}

result<training_result> remote_run::close() {
  auto& m = *impl_;
  if (m.closed)
    return make_error(errc::invalid_argument, "remote run: closed already");
  m.closed = true;
  if (m.server)
    m.server->stop();
  auto out = m.inner->close();
  auto agent = m.source->agent();
  if (agent) {
    const auto c = agent->counters();
    actors::write_log(m.log, actors::log_level::info,
                      fmt::format("troupe: remote environments: {} env steps served, {} "
                                  "transitions dropped (training behind), {} discarded "
                                  "with sessions that ended",
                                  c.env_steps, c.dropped, c.abandoned));
    agent->close();
  }
  return out;
}

} // namespace troupe::runtime
