// `troupe train` with env.id = "remote" (runtime/remote_run.hpp): an address
// in use stops the run before anything starts with exit status 2, and the
// [remote] section is validated like every other (the Python client's
// training run is the CTest case "clients: ..." in tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>

#include <zmq.hpp>

#include "envs/registry.hpp"
#include "runtime/config.hpp"
#include "runtime/remote_run.hpp"
#include "tests/cli_support.hpp"

using namespace troupe;
using namespace troupe::test;
namespace fs = std::filesystem;

namespace {

std::string remote_config() {
  return std::string(TROUPE_SOURCE_DIR) + "/config/remote_cartpole.toml";
}

} // namespace

TEST_CASE("a remote run whose address is in use exits with status 2 before anything "
          "starts, naming the key and the address") {
  temp_folder dir("remote-taken");
  zmq::context_t ctx;
  zmq::socket_t taken(ctx, zmq::socket_type::router);
  taken.set(zmq::sockopt::linger, 0);
  taken.bind("tcp://127.0.0.1:*");
  const std::string endpoint = taken.get(zmq::sockopt::last_endpoint);
  auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                  "--set remote.bind='\"{}\"'",
                                  remote_config(), endpoint),
                      dir);
  CAPTURE(r.err);
  CHECK(r.status == 2);
  // The value came from --set: the message says so where a file would give FILE:LINE.
  CHECK(r.err.find("--set: remote.bind: cannot bind " + endpoint) != std::string::npos);
  CHECK(r.err.find("Address already in use") != std::string::npos);
  CHECK(!fs::exists(dir.path / "out"));
}

TEST_CASE("the [remote] section is checked: ranges, min_envs above max_envs, a time-out "
          "not above the heartbeat") {
  temp_folder dir("remote-bad");
  auto r = run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                  "--set remote.obs_dim=0",
                                  remote_config()),
                      dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("remote.obs_dim") != std::string::npos);

  auto cfg =
    runtime::load_config(remote_config(), {"remote.min_envs=100", "remote.max_envs=10"});
  REQUIRE(cfg.ok());
  auto run = runtime::remote_run::open(*cfg);
  REQUIRE_FALSE(run.ok());
  CHECK(run.err().code == errc::bad_config);
  CHECK(run.err().message.find("remote.min_envs: must be at most remote.max_envs 10, got "
                               "100") != std::string::npos);

  cfg = runtime::load_config(remote_config(),
                             {"remote.timeout_ms=500", "remote.heartbeat_ms=500"});
  REQUIRE(cfg.ok());
  run = runtime::remote_run::open(*cfg);
  REQUIRE_FALSE(run.ok());
  CHECK(
    run.err().message.find("remote.timeout_ms: must be above remote.heartbeat_ms 500, "
                           "got 500") != std::string::npos);
}

TEST_CASE("troupe remote keygen writes a CURVE key pair (the secret mode 0600) and never "
          "overwrites one") {
  temp_folder dir("remote-keygen");
  auto r = run_troupe("remote keygen server.key", dir);
  CAPTURE(r.err);
  REQUIRE(r.status == 0);
  const auto read_line = [](const fs::path& p) {
    std::ifstream in(p);
    std::string line;
    std::getline(in, line);
    return line;
  };
  const std::string secret = read_line(dir.path / "server.key");
  const std::string pub = read_line(dir.path / "server.key.pub");
  REQUIRE(secret.size() == 40);
  char derived[41] = {};
  REQUIRE(zmq_curve_public(derived, secret.c_str()) == 0);
  CHECK(pub == derived);
  CHECK(r.out.find(pub) != std::string::npos);
  struct stat st {};
  REQUIRE(::stat((dir.path / "server.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto again = run_troupe("remote keygen server.key", dir);
  CHECK(again.status == 2);
  CHECK(again.err.find("never overwritten") != std::string::npos);
  CHECK(read_line(dir.path / "server.key") == secret);
}

TEST_CASE(
  "a remote run with a missing, malformed or half-given CURVE key file exits with "
  "status 2 before anything starts, naming the key and the file") {
  temp_folder dir("remote-curve-bad");
  REQUIRE(run_troupe("remote keygen server.key", dir).status == 0);
  REQUIRE(run_troupe("remote keygen client.key", dir).status == 0);
  const auto train = [&](const std::string& secret, const std::string& allowed) {
    return run_troupe(fmt::format("train '{}' --set run.output_dir='\"out\"' "
                                  "--set remote.bind='\"tcp://127.0.0.1:*\"' "
                                  "--set remote.curve_secret_key_file='\"{}\"' "
                                  "--set remote.curve_allowed_clients_file='\"{}\"'",
                                  remote_config(), secret, allowed),
                      dir);
  };
  auto r = train("missing.key", "client.key.pub");
  CAPTURE(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("remote.curve_secret_key_file: cannot read 'missing.key': No such "
                   "file") != std::string::npos);
  {
    std::ofstream bad(dir.path / "allowed");
    bad << "\n"
        << std::string(40, 'A') << " alice\n"
        << "short-key bob\n";
  }
  r = train("server.key", "allowed");
  CAPTURE(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("remote.curve_allowed_clients_file: allowed:3: a CURVE key is 40 Z85 "
                   "characters, got 9") != std::string::npos);
  r = train("server.key", "");
  CHECK(r.status == 2);
  CHECK(r.err.find("remote.curve_secret_key_file: CURVE needs "
                   "remote.curve_allowed_clients_file") != std::string::npos);
  r = train("client.key.pub.none", "client.key.pub");
  CHECK(r.status == 2);
  CHECK(!fs::exists(dir.path / "out"));
}

TEST_CASE("the remote environment is registered with the spaces of [remote]") {
  auto cfg = runtime::load_config(
    remote_config(), {"remote.obs_dim=7", "remote.num_actions=0", "remote.action_dim=3"});
  REQUIRE(cfg.ok());
  REQUIRE(runtime::register_remote_env(*cfg).ok());
  auto spec = envs::find_spec("remote");
  REQUIRE(spec.ok());
  CHECK((*spec)->observation_space.size() == 7);
  CHECK((*spec)->action_space.kind == envs::space_kind::box);
  CHECK((*spec)->action_space.size() == 3);
  auto made = envs::make_env("remote");
  REQUIRE_FALSE(made.ok());
  CHECK(made.err().message.find("served over ZeroMQ") != std::string::npos);
}
