// The steps of a worker in one process (cluster::worker): the errors of
// connect() and join() are values naming the address, the file, the variable
// or the coordinator's reason, never exit statuses.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "runtime/cluster/gate.hpp"
#include "runtime/cluster/messages.hpp"
#include "runtime/cluster/node.hpp"
#include "runtime/cluster/worker.hpp"
#include "runtime/system_shutdown.hpp"
#include "tests/cluster/gate_fixture.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe;

namespace {

// A loopback port that was free a moment ago and has no listener now: bound
// to 127.0.0.1:0, read back, and closed again.
uint16_t closed_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Sets TROUPE_CLUSTER_TOKEN to `value` (unset when empty) for its lifetime.
class token_env {
public:
  explicit token_env(const std::string& value) {
    if (const char* was = std::getenv(cluster::token_variable))
      saved_ = was;
    if (value.empty())
      ::unsetenv(cluster::token_variable);
    else
      ::setenv(cluster::token_variable, value.c_str(), 1);
  }
  ~token_env() {
    if (saved_)
      ::setenv(cluster::token_variable, saved_->c_str(), 1);
    else
      ::unsetenv(cluster::token_variable);
  }
  token_env(const token_env&) = delete;
  token_env& operator=(const token_env&) = delete;

private:
  std::optional<std::string> saved_;
};

cluster::worker_options options_for(uint16_t port) {
  cluster::worker_options o;
  o.connect = cluster::endpoint{"127.0.0.1", port};
  o.name = "w-test";
  o.token = fmt::format("token-{:x}", test::fresh_seed());
  o.reconnect_s = 0; // one attempt
  o.heartbeat_ms = 100;
  o.timeout_ms = 1000;
  return o;
}

} // namespace

TEST_CASE("a worker's data address is the one its connection to the coordinator "
          "leaves from, and a name that does not resolve is an error naming it") {
  auto loop = cluster::source_address_toward(cluster::endpoint{"127.0.0.1", 7400});
  REQUIRE_MESSAGE(loop.ok(), (loop ? std::string() : loop.err().message));
  CHECK(*loop == "127.0.0.1");
  // Any loopback destination leaves from a loopback address.
  auto other = cluster::source_address_toward(cluster::endpoint{"127.0.0.2", 0});
  REQUIRE(other.ok());
  CHECK(other->rfind("127.", 0) == 0);
  auto bad = cluster::source_address_toward(cluster::endpoint{"no-such-host.invalid", 1});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().message.find("'no-such-host.invalid'") != std::string::npos);
}

TEST_CASE("worker connect to a closed loopback port is an error naming the address") {
  const uint16_t port = closed_loopback_port();
  CAPTURE(port);
  auto o = options_for(port);
  std::string lines; // the log gets nothing but notices here
  o.log = actors::log_sink(
    [&](actors::log_level, const std::string& line) { lines += line + "\n"; });
  auto w = cluster::worker::connect(o);
  REQUIRE_FALSE(w.ok());
  const auto& message = w.err().message;
  CAPTURE(message);
  CHECK(message.find(
          fmt::format("cannot reach the coordinator at 127.0.0.1:{} ", port)) == 0);
  CHECK(message.find("within 0 s (--reconnect-s") != std::string::npos);
  CHECK(lines.empty());
}

TEST_CASE("worker connect without a token is an error naming the variable") {
  token_env unset("");
  auto o = options_for(closed_loopback_port());
  o.token.clear();
  auto w = cluster::worker::connect(o);
  REQUIRE_FALSE(w.ok());
  CAPTURE(w.err().message);
  CHECK(w.err().message ==
        fmt::format("no token: set the environment variable {} to the run's "
                    "cluster.token",
                    cluster::token_variable));
}

TEST_CASE("worker connect with a coordinator file that does not exist names the file") {
  test::temp_folder tmp("worker-connect-file");
  auto o = options_for(0);
  o.connect = {};
  o.connect_file = (tmp.path / "cluster.json").string();
  auto w = cluster::worker::connect(o);
  REQUIRE_FALSE(w.ok());
  const auto& message = w.err().message;
  CAPTURE(message);
  CHECK(message.find("cannot read the coordinator's address within 0 s "
                     "(--reconnect-s): ") == 0);
  CHECK(message.find(o.connect_file) != std::string::npos);
}

TEST_CASE("worker join refused for a wrong token is an error naming the coordinator "
          "and the reason") {
  // A coordinator's gate in this process, published on loopback.
  cluster::node_settings ns;
  ns.heartbeat_ms = 100;
  ns.timeout_ms = 1000;
  ns.app_identifiers = {cluster::any_run_identifier()};
  auto sys_cfg = std::make_unique<caf::actor_system_config>();
  actors::register_messages(*sys_cfg);
  cluster::register_cluster_messages(*sys_cfg);
  cluster::configure_node(*sys_cfg, ns);
  sys_cfg->set("scheduler.max-threads", 2);
  sys_cfg->set("logger.verbosity", caf::atom("quiet"));
  auto sys = std::make_unique<caf::actor_system>(*sys_cfg);
  test::gate_log refusals;
  std::optional<uint16_t> port;
  {
    caf::scoped_actor supervisor{*sys};
    cluster::gate_options go;
    go.token = fmt::format("right-{:x}", test::fresh_seed());
    go.store = test::cartpole_policy_store();
    go.supervisor = caf::actor_cast<caf::actor>(supervisor);
    go.log = refusals.sink();
    auto gate = cluster::spawn_gate(*sys, std::move(go));
    auto published = cluster::publish_gate(gate, cluster::endpoint{"127.0.0.1", 0}, ns);
    REQUIRE_MESSAGE(published,
                    "cannot publish the gate: " << to_string(published.error()));
    port = *published;
    {
      auto o = options_for(*port);
      o.token = "not-the-token";
      o.reconnect_s = 5;
      auto w = cluster::worker::connect(o);
      REQUIRE_MESSAGE(w.ok(), (w.ok() ? std::string{} : w.err().message));
      auto joined = w->join();
      REQUIRE_FALSE(joined.ok());
      const auto& message = joined.err().message;
      CAPTURE(message);
      CHECK(message.find(fmt::format("'w-test' could not join the run at 127.0.0.1:{} "
                                     "(run not named: any): ",
                                     *port)) == 0);
      CHECK(message.find("wrong token") != std::string::npos);
      // Once only, and nothing to run.
      auto again = w->join();
      REQUIRE_FALSE(again.ok());
      CHECK(again.err().code == errc::invalid_argument);
      auto ran = w->run();
      REQUIRE_FALSE(ran.ok());
      CHECK(ran.err().code == errc::invalid_argument);
    }
    {
      const auto lines = refusals.lines();
      REQUIRE(lines.size() == 1);
      CHECK(lines.front().find("(worker 'w-test'): wrong token") != std::string::npos);
    }
    (void)sys->middleman().unpublish(gate);
    supervisor->send_exit(gate, caf::exit_reason::user_shutdown);
  }
  // A system with a middleman that had a peer: its end is bounded (as a
  // coordinator's is).
  CHECK(runtime::destroy_within(std::move(sys), std::move(sys_cfg),
                                std::chrono::seconds(20)));
}
