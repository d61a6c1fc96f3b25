#include "runtime/cluster/node.hpp"

#include <chrono>
#include <cstdlib>

#include <caf/io/all.hpp>
#include <fmt/format.h>

namespace troupe::cluster {

std::string app_identifier(const std::string& run) {
  return "troupe-cluster-1:" + run;
}

bool same_token(const std::string& given, const std::string& expected) {
  // Every byte of `expected` is looked at, whatever `given` holds.
  unsigned diff = given.size() != expected.size() ? 1u : 0u;
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(i < given.size() ? given[i] : 0) ^
            static_cast<unsigned char>(expected[i]);
  return diff == 0 && !expected.empty();
}

result<std::string> run_token(const runtime::config& cfg) {
  if (const auto& t = cfg.get_string("cluster.token"); !t.empty())
    return t;
  if (const char* env = std::getenv(token_variable); env && *env)
    return std::string{env};
  return make_error(errc::bad_config,
                    "cluster.token: a run across processes needs a token: set "
                    "cluster.token in the config or the environment variable {}",
                    token_variable);
}

result<node_settings> node_settings_from(const runtime::config& cfg,
                                         const std::string& run) {
  node_settings s;
  s.heartbeat_ms = static_cast<uint64_t>(cfg.get_int("cluster.heartbeat_ms"));
  s.timeout_ms = static_cast<uint64_t>(cfg.get_int("cluster.timeout_ms"));
  if (s.timeout_ms <= s.heartbeat_ms)
    return make_error(errc::bad_config,
                      "{}: cluster.timeout_ms must be larger than cluster.heartbeat_ms "
                      "({}), got {}",
                      cfg.origin("cluster.timeout_ms"), s.heartbeat_ms, s.timeout_ms);
  s.app_identifier = app_identifier(run);
  return s;
}

void configure_node(caf::actor_system_config& cfg, const node_settings& s) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::milliseconds(s.heartbeat_ms)});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::milliseconds(s.timeout_ms)});
  cfg.set("middleman.app-identifiers", std::vector<std::string>{s.app_identifier});
}

result<endpoint> parse_endpoint(const std::string& text, const std::string& what) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return make_error(errc::bad_input, "{}: expected HOST:PORT, got '{}'", what, text);
  endpoint e;
  e.host = text.substr(0, colon);
  if (e.host.size() >= 2 && e.host.front() == '[' && e.host.back() == ']')
    e.host = e.host.substr(1, e.host.size() - 2);
  const auto port_text = text.substr(colon + 1);
  char* end = nullptr;
  const unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (*end != '\0' || port > 65535 ||
      port_text.find_first_not_of("0123456789") != std::string::npos)
    return make_error(errc::bad_input,
                      "{}: the port must be 0 to 65535, got '{}' in '{}'", what,
                      port_text, text);
  e.port = static_cast<uint16_t>(port);
  return e;
}

} // namespace troupe::cluster
