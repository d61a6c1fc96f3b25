#include "runtime/cluster/node.hpp"

#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "learners/safetensors.hpp"
#include "runtime/json.hpp"

namespace troupe::cluster {

std::string app_identifier(const std::string& run) {
  return any_run_identifier() + ":" + run;
}

std::string any_run_identifier() {
  return "troupe-cluster-1";
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
  s.app_identifiers = {app_identifier(run)};
  s.tls.certificate = cfg.get_string("cluster.tls_certificate");
  s.tls.key = cfg.get_string("cluster.tls_key");
  s.tls.ca = cfg.get_string("cluster.tls_ca");
  if (auto ok =
        check_tls(s.tls, {"cluster.tls_certificate", "cluster.tls_key", "cluster.tls_ca"},
                  {cfg.origin("cluster.tls_certificate"), cfg.origin("cluster.tls_key"),
                   cfg.origin("cluster.tls_ca")});
      !ok)
    return ok.err();
  return s;
}

namespace {

// OpenSSL's reason for the last failure, or `fallback`.
std::string openssl_reason(const char* fallback) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0)
    return fallback;
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  return buf;
}

struct file_closer {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

// Opens `path` for reading; an error naming `what` when it cannot.
result<file_ptr> open_pem(const std::string& path, const std::string& what) {
  file_ptr f{std::fopen(path.c_str(), "rb")};
  if (!f)
    return make_error(errc::bad_config, "{}: cannot read '{}': {}", what, path,
                      std::strerror(errno));
  return f;
}

} // namespace

status check_tls(const tls_files& t, const std::array<std::string, 3>& keys,
                 const std::array<std::string, 3>& origins) {
  const std::array<const std::string*, 3> values = {&t.certificate, &t.key, &t.ca};
  std::string given;
  for (size_t i = 0; i < 3; ++i)
    if (!values[i]->empty())
      given += fmt::format("{}{}{}", given.empty() ? "" : ", ", keys[i],
                           origins[i].empty() ? "" : " (" + origins[i] + ")");
  if (given.empty())
    return {};
  if (t.certificate.empty() || t.key.empty() || t.ca.empty())
    return make_error(errc::bad_config,
                      "TLS needs all three of {}, {} and {}; got only {}", keys[0],
                      keys[1], keys[2], given);
  std::array<std::string, 3> names;
  for (size_t i = 0; i < 3; ++i)
    names[i] = origins[i].empty() ? keys[i] : origins[i] + ": " + keys[i];
  ERR_clear_error();
  auto cert_file = open_pem(t.certificate, names[0]);
  if (!cert_file)
    return cert_file.err();
  std::unique_ptr<X509, decltype(&X509_free)> cert{
    PEM_read_X509(cert_file->get(), nullptr, nullptr, nullptr), X509_free};
  if (!cert)
    return make_error(errc::bad_config, "{}: '{}' is not a PEM certificate ({})",
                      names[0], t.certificate, openssl_reason("no certificate found"));
  auto key_file = open_pem(t.key, names[1]);
  if (!key_file)
    return key_file.err();
  // No passphrase callback: an encrypted key fails here instead of asking on a
  // terminal that a worker started by ssh or Slurm does not have.
  auto no_passphrase = [](char*, int, int, void*) { return 0; };
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{
    PEM_read_PrivateKey(key_file->get(), nullptr, no_passphrase, nullptr), EVP_PKEY_free};
  if (!key)
    return make_error(errc::bad_config,
                      "{}: '{}' is not an unencrypted PEM private key ({})", names[1],
                      t.key, openssl_reason("no key found"));
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return make_error(errc::bad_config, "{}: the key in '{}' is not the key of {} ('{}')",
                      names[1], t.key, names[0], t.certificate);
  ERR_clear_error();
  auto ca_file = open_pem(t.ca, names[2]);
  if (!ca_file)
    return ca_file.err();
  std::unique_ptr<X509, decltype(&X509_free)> ca{
    PEM_read_X509(ca_file->get(), nullptr, nullptr, nullptr), X509_free};
  if (!ca)
    return make_error(errc::bad_config, "{}: '{}' holds no PEM certificate ({})",
                      names[2], t.ca, openssl_reason("no certificate found"));
  ERR_clear_error();
  return {};
}

void configure_node(caf::actor_system_config& cfg, const node_settings& s) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::milliseconds(s.heartbeat_ms)});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::milliseconds(s.timeout_ms)});
  // A handshake succeeds when the two lists share an entry.
  cfg.set("middleman.app-identifiers", s.app_identifiers);
  if (s.tls.enabled()) {
    // CAF's OpenSSL module: with a certificate set, it requires a certificate
    // that chains to `cafile` from the peer on every connection, both ways
    // (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT), ciphers
    // "HIGH:!aNULL:!MD5". It does not compare host names with the
    // certificate: the run's CA is what admits a node (docs/cluster.md).
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = s.tls.certificate;
    cfg.openssl_key = s.tls.key;
    cfg.openssl_cafile = s.tls.ca;
  }
}

caf::expected<uint16_t> publish_gate(const caf::actor& gate, const endpoint& at,
                                     const node_settings& s) {
  if (s.tls.enabled())
    return caf::openssl::publish(gate, at.port, at.host.c_str(), true);
  return gate.home_system().middleman().publish(gate, at.port, at.host.c_str(), true);
}

caf::expected<uint16_t> publish_actor(const caf::actor& a, const endpoint& at,
                                      const node_settings& s, bool reuse_address) {
  if (s.tls.enabled())
    return caf::openssl::publish(a, at.port, at.host.c_str(), reuse_address);
  return a.home_system().middleman().publish(a, at.port, at.host.c_str(), reuse_address);
}

void use_run_identifier(caf::actor_system& sys, const std::string& run) {
  // CAF 0.17 reads middleman.app-identifiers from the system's config at
  // every handshake; nothing reads it while this runs (see the header).
  auto& cfg = const_cast<caf::actor_system_config&>(sys.config());
  caf::put(cfg.content, "middleman.app-identifiers",
           std::vector<std::string>{app_identifier(run)});
}

caf::expected<caf::actor> connect_gate(caf::actor_system& sys, const endpoint& at,
                                       const node_settings& s) {
  if (s.tls.enabled())
    return caf::openssl::remote_actor(sys, at.host, at.port);
  return sys.middleman().remote_actor(at.host, at.port);
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

bool wildcard_host(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

result<std::string> source_address_toward(const endpoint& to) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const auto port = std::to_string(to.port == 0 ? 9 : to.port);
  if (int rc = ::getaddrinfo(to.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return make_error(errc::unavailable, "cannot resolve '{}': {}", to.host,
                      ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  std::string last = "no address";
  for (auto* a = found; a; a = a->ai_next) {
    // A UDP socket's connect() only picks the route and the source address.
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    const bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    if (!ok)
      last = std::strerror(errno);
    ::close(fd);
    if (!ok)
      continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = local.ss_family == AF_INET6
                        ? static_cast<const void*>(
                            &reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
                        : static_cast<const void*>(
                            &reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, raw, text, sizeof text))
      return std::string(text);
    last = std::strerror(errno);
  }
  return make_error(errc::unavailable, "no route to '{}': {}", to.host, last);
}

namespace {

std::string endpoint_text(const endpoint& e) {
  return e.host.find(':') != std::string::npos ? fmt::format("[{}]:{}", e.host, e.port)
                                               : fmt::format("{}:{}", e.host, e.port);
}

} // namespace

std::string write_cluster_file(const std::string& path, const endpoint& listen,
                               uint16_t port, const std::string& run) {
  endpoint connect{listen.host, port};
  if (wildcard_host(listen.host)) {
    char name[256] = {};
    connect.host = ::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0'
                     ? std::string(name)
                     : std::string("localhost");
  }
  runtime::json j;
  j["host"] = listen.host;
  j["port"] = port;
  j["run"] = run;
  j["connect"] = endpoint_text(connect);
  const std::string text = j.dump() + "\n";
  if (auto ok = learners::write_file_atomically(path, text.data(), text.size()); !ok)
    return ok.err().message;
  return {};
}

result<cluster_file> read_cluster_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return make_error(errc::io_error, "{}: cannot open it: {}", path,
                      std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  const auto j = runtime::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return make_error(errc::bad_input,
                      "{}: not a JSON object (a coordinator's cluster.json)", path);
  cluster_file f;
  auto run = j.find("run");
  if (run == j.end() || !run->is_string() || run->get<std::string>().empty())
    return make_error(errc::bad_input,
                      "{}: \"run\" must be the run's name, a non-empty "
                      "string",
                      path);
  f.run = run->get<std::string>();
  if (auto c = j.find("connect"); c != j.end()) {
    if (!c->is_string())
      return make_error(errc::bad_input, "{}: \"connect\" must be a HOST:PORT string",
                        path);
    auto ep = parse_endpoint(c->get<std::string>(), path + ": \"connect\"");
    if (!ep)
      return ep.err();
    f.connect = *ep;
  } else {
    auto h = j.find("host");
    auto p = j.find("port");
    if (h == j.end() || !h->is_string() || p == j.end() || !p->is_number_unsigned() ||
        p->get<uint64_t>() > 65535)
      return make_error(errc::bad_input,
                        "{}: needs \"connect\" (HOST:PORT), or \"host\" (a string) and "
                        "\"port\" (0 to 65535)",
                        path);
    f.connect = {h->get<std::string>(), static_cast<uint16_t>(p->get<uint64_t>())};
  }
  if (f.connect.port == 0 || wildcard_host(f.connect.host))
    return make_error(errc::bad_input, "{}: {} is not an address to connect to", path,
                      endpoint_text(f.connect));
  return f;
}

} // namespace troupe::cluster
