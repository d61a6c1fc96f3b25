// Black-box tests of a run across processes: a coordinator (`troupe train
// --listen 127.0.0.1:0`) and worker processes (`troupe worker`) on loopback,
// each case on the fixture cluster_run (tests/cluster/cluster_fixture.hpp),
// which kills and reaps every child it started, also when a check fails;
// every wait polls a condition with a bound.
#include <doctest/doctest.h>

#include <sched.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "tests/cli_support.hpp"
#include "tests/cluster/cluster_fixture.hpp"
#include "tests/seed.hpp"
#include "tests/temp_folder.hpp"

namespace fs = std::filesystem;
using namespace troupe::test;

TEST_CASE_FIXTURE(cluster_run,
                  "a coordinator and two workers train CartPole PPO async past a "
                  "100-episode mean return of 200") {
  auto& coord = start_coordinator(write_config(dir, fresh_seed() % 1000, 2000000));
  auto& w1 = start_worker("w1", {"--threads", "3"});
  // w2 names no run: it joins the run listening there and learns its name.
  auto& w2 = start("w2", {"worker", "--connect", addr, "--name", "w2", "--heartbeat-ms",
                          "200", "--timeout-ms", lost_ms});
  INFO(report());
  await([&] { return metric(run, "return_mean_100") > 200; }, std::chrono::seconds(240),
        "no 100-episode mean return above 200");
  CHECK(metric(run, "hosts") == 2);
  CHECK(metric(run, "hosts_lost") == 0);
  // The coordinator stops on SIGTERM; its workers are told and leave.
  stop_run({{"coordinator", &coord}, {"w1", &w1}, {"w2", &w2}});
  const auto log = coord.err();
  CHECK(log.find("host w1 (127.0.0.1:") != std::string::npos);
  CHECK(log.find("host w2 (127.0.0.1:") != std::string::npos);
  CHECK(log.find("lost host") == std::string::npos);
  CHECK(w2.out().find("joined the run at " + addr + " (run " + run_name + ")") !=
        std::string::npos);
  // Scheduler threads: as asked, or the CPUs the process may run on.
  CHECK(w1.out().find("; 3 scheduler thread(s)") != std::string::npos);
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(w2.out().find(fmt::format("; {} scheduler thread(s)", CPU_COUNT(&set))) !=
        std::string::npos);
}

// An environment-only worker (--learners 0 --runners 2) feeding the
// coordinator's IMPALA learner: its batches are learned, and the learner goes
// on when that host is killed.
static void environment_host_feeds_the_coordinator(cluster_run& fx) {
  const auto cfg =
    fx.dir.write("impala.toml", fmt::format(R"([run]
name = "envhost"
seed = {}
device = "cpu"
output_dir = "{}"
log_every_updates = 5
checkpoint_every_updates = 0

[env]
id = "CartPole-v1"
num_envs = 16

[algo]
name = "impala"
mode = "async"
num_learners = 1
runners_per_learner = 1
total_env_steps = 50000000
num_steps = 32
learning_rate = 2e-3
max_staleness = 8

[model]
obs_norm = true

[cluster]
heartbeat_ms = 200
timeout_ms = {}
)",
                                            fresh_seed() % 1000,
                                            (fx.dir.path / "runs").string(), lost_ms));
  auto& coord = fx.start_coordinator(cfg);
  auto& e1 = fx.start_worker("e1", {"--learners", "0", "--runners", "2"});
  INFO(fx.report());
  // Both guest runners' batches reach the coordinator's learner and are learned.
  fx.await(
    [&] {
      const auto log = coord.err();
      return log.find("first batch from guest runner 'e1.runner0'") !=
               std::string::npos &&
             log.find("first batch from guest runner 'e1.runner1'") != std::string::npos;
    },
    std::chrono::seconds(120), "no batch of e1's runners reached the learner", {&e1});
  CHECK(e1.out().find("troupe: worker e1 joined the run at " + fx.addr) !=
        std::string::npos);
  const auto log = coord.err();
  // The coordinator, a member of the group, has a feed door of its own,
  // reached through e1's connection to the gate.
  CHECK(e1.out().find("2 runners feeding the learners of 1 learner host(s)") !=
        std::string::npos);
  CHECK(e1.out().find("runner 'e1.runner0' feeds learner 0 of learner host "
                      "coordinator") != std::string::npos);
  CHECK(log.find("no learners, 2 runners feeding the learner hosts' learners") !=
        std::string::npos);
  CHECK(log.find("the data plane's group forms: 0 host(s) and the coordinator") !=
        std::string::npos);
  CHECK(log.find("learner 'learner0': guest runner 'e1.runner0' joins") !=
        std::string::npos);
  CHECK(log.find("cluster: host e1 (127.0.0.1:") != std::string::npos);

  // The environment host is lost: the learner drops its runners and goes on
  // with its own.
  e1.kill_now();
  fx.await(
    [&] {
      const auto l = coord.err();
      return l.find("guest runner 'e1.runner0' is gone") != std::string::npos &&
             l.find("guest runner 'e1.runner1' is gone") != std::string::npos;
    },
    std::chrono::seconds(60), "the learner did not drop the lost host's runners");
  const double updates_at_loss = metric(fx.run, "updates");
  fx.await([&] { return metric(fx.run, "updates") >= updates_at_loss + 20; },
           std::chrono::seconds(60), "the learner did not go on learning after the loss");
  CHECK(metric(fx.run, "hosts_lost") == 1);
  stop_run({{"coordinator", &coord}});
}

TEST_CASE_FIXTURE(cluster_run,
                  "an environment-only worker (--learners 0 --runners 2) feeds the "
                  "coordinator's IMPALA learner through the coordinator's own feed door "
                  "(a member of the data plane's group), and the learner goes on when "
                  "that host is killed") {
  environment_host_feeds_the_coordinator(*this);
}

TEST_CASE_FIXTURE(cluster_run,
                  "a worker started under the name of a frozen host that is not yet "
                  "declared lost is told to ask again, and joins once the frozen one is "
                  "declared lost") {
  auto& coord =
    start_coordinator(write_config(dir, fresh_seed() % 1000, 2000000, /*obs_norm=*/true));
  const auto args = worker_args("w1");
  auto& frozen = start("w1", args);
  INFO(report());
  await([&] { return metric(run, "updates") >= 5; }, std::chrono::seconds(120),
        "the first host never trained");
  frozen.signal(SIGSTOP);
  // Its replacement, started at once: the coordinator still counts the frozen
  // host as live (its connection is open) until cluster.timeout_ms passes.
  auto& next = start("w1b", args);
  const bool rejoined = poll_until(
    [&] {
      return !coord.running() || !next.running() ||
             (joins_of(coord.err(), "w1") == 2 &&
              next.out().find("troupe: worker w1 joined the run") != std::string::npos &&
              metric(run, "hosts_lost") == 1);
    },
    std::chrono::seconds(120));
  frozen.kill_now();
  REQUIRE_MESSAGE(coord.running(), "the coordinator ended");
  REQUIRE_MESSAGE(next.running(), "the replacement gave up instead of asking again");
  REQUIRE_MESSAGE(rejoined, "the replacement did not join within 120 s");
  CHECK(next.err().find("a live host of the run is named 'w1' already") !=
        std::string::npos);
  CHECK(next.err().find("asking again until --reconnect-s") != std::string::npos);
  CHECK(coord.err().find("lost host w1") != std::string::npos);
  // The replacement trains: updates go on.
  const double updates = metric(run, "updates");
  CHECK(
    poll_until([&] { return !coord.running() || metric(run, "updates") > updates + 5; },
               std::chrono::seconds(120)));
  stop_run({{"coordinator", &coord}, {"next", &next}});
}

TEST_CASE_FIXTURE(cluster_run,
                  "a coordinator killed and resumed on its address is joined again by a "
                  "worker that kept retrying, and a worker whose retries run out exits 1 "
                  "saying why") {
  auto& coord =
    start_coordinator(write_config(dir, fresh_seed() % 1000, 2000000, /*obs_norm=*/true));
  auto& w1 = start_worker("w1", {"--reconnect-s", "120"});
  auto& w2 = start_worker("w2", {"--reconnect-s", "0"});
  INFO(report());
  await(
    [&] {
      // w1 said it joined: its joins are counted below (under load a host is
      // counted by the coordinator before its cast is ready, and the kill
      // could come in between).
      return metric(run, "hosts") == 2 && metric(run, "updates") >= 5 &&
             count_of(w1.out(), "troupe: worker w1 joined the run") == 1;
    },
    std::chrono::seconds(120), "two hosts did not train together");
  coord.kill_now();

  // w2 gives up at once (--reconnect-s 0); w1 keeps trying.
  REQUIRE_MESSAGE(poll_until([&] { return !w2.running(); }, std::chrono::seconds(60)),
                  "w2 did not give up within 60 s of the coordinator's loss");
  CHECK(w2.status() == 1);
  CHECK(w2.err().find("w2: lost the coordinator at " + addr) != std::string::npos);
  CHECK(w2.err().find("lost the coordinator and could not reach the coordinator at " +
                      addr) != std::string::npos);
  REQUIRE_MESSAGE(poll_until(
                    [&] {
                      return !w1.running() ||
                             w1.err().find("trying to rejoin") != std::string::npos;
                    },
                    std::chrono::seconds(60)),
                  "w1 did not say it tries to rejoin within 60 s");
  REQUIRE(w1.running());

  // The coordinator resumed from its checkpoint, on the same address.
  auto& coord2 = resume_coordinator(addr, addr);
  const size_t rows_at_start = lines_of(read_text(run / "metrics.csv")).size();
  await(
    [&] {
      return joins_of(coord2.err(), "w1") == 1 &&
             count_of(w1.out(), "troupe: worker w1 joined the run") == 2 &&
             lines_of(read_text(run / "metrics.csv")).size() >= rows_at_start + 5;
    },
    std::chrono::seconds(120), "w1 did not rejoin and train after the resume", {&w1});
  CHECK(metric(run, "hosts") == 1);
  stop_run({{"resumed coordinator", &coord2}, {"w1", &w1}});
}

TEST_CASE_FIXTURE(cluster_run,
                  "a coordinator resumed on another address is followed there by a "
                  "worker given its cluster.json (--connect-file)") {
  auto& coord =
    start_coordinator(write_config(dir, fresh_seed() % 1000, 2000000, /*obs_norm=*/true));
  const auto file = (run / "cluster.json").string();
  auto& w1 =
    start("w1", {"worker", "--connect-file", file, "--name", "w1", "--heartbeat-ms",
                 "200", "--timeout-ms", lost_ms, "--reconnect-s", "120"});
  INFO(report());
  await(
    [&] {
      return metric(run, "hosts") == 1 && metric(run, "updates") >= 5 &&
             count_of(w1.out(), "troupe: worker w1 joined the run") == 1;
    },
    std::chrono::seconds(120), "w1 did not join and train", {&w1});
  coord.kill_now();
  REQUIRE_MESSAGE(poll_until(
                    [&] {
                      return !w1.running() ||
                             w1.err().find("trying to rejoin") != std::string::npos;
                    },
                    std::chrono::seconds(60)),
                  "w1 did not say it tries to rejoin within 60 s");
  REQUIRE(w1.running());

  // Resumed on another loopback address and a fresh port: only the file
  // can tell w1 where.
  auto& coord2 = resume_coordinator("127.0.0.2:0", "127.0.0.2:");
  const auto addr2 = address_of(run, "127.0.0.2");
  CHECK(addr2 != addr);
  await(
    [&] {
      return joins_of(coord2.err(), "w1") == 1 &&
             count_of(w1.out(), "troupe: worker w1 joined the run") == 2 &&
             metric(run, "hosts") == 1;
    },
    std::chrono::seconds(120), "w1 did not join the resumed coordinator", {&w1});
  CHECK(w1.out().find("joined the run at " + addr2) != std::string::npos);
  stop_run({{"resumed coordinator", &coord2}, {"w1", &w1}});
}

TEST_CASE_FIXTURE(
  cluster_run, "a worker with a wrong token is refused: it exits 1 and the coordinator "
               "logs the peer's address") {
  auto& coord = start_coordinator(write_config(dir, 1, 2000000));
  INFO(report());
  // Each subcase's worker gives up within its --reconnect-s.
  auto start_refused = [&](const std::string& run_named, const std::string& name,
                           const std::string& reconnect_s,
                           const std::vector<std::string>& env) -> child& {
    auto& w = start("w",
                    {"worker", "--connect", addr, "--run", run_named, "--name", name,
                     "--reconnect-s", reconnect_s},
                    env);
    REQUIRE(poll_until([&] { return !w.running(); }, std::chrono::seconds(60)));
    return w;
  };
  SUBCASE("a wrong token") {
    auto& w =
      start_refused(run_name, "intruder", "5", {"TROUPE_CLUSTER_TOKEN=not-the-token"});
    CHECK(w.status() == 1);
    CHECK(w.err().find("'intruder' could not join the run at " + addr) !=
          std::string::npos);
    CHECK(w.err().find("wrong token") != std::string::npos);
    CHECK(coord.err().find("refused a join from 127.0.0.1:") != std::string::npos);
    CHECK(coord.err().find("(worker 'intruder'): wrong token") != std::string::npos);
  }
  SUBCASE("no token") {
    auto& w = start_refused(run_name, "anonymous", "5", {});
    CHECK(w.status() == 1);
    CHECK(w.err().find("no token: set the environment variable TROUPE_CLUSTER_TOKEN") !=
          std::string::npos);
  }
  SUBCASE("the right token for another run") {
    // The middleman's handshake refuses another run's app identifier.
    auto& w = start_refused(run_name + "-other", "stray", "1", {token_env});
    CHECK(w.status() == 1);
    CHECK(w.err().find("cannot reach the coordinator at " + addr) != std::string::npos);
  }
  CHECK(coord.running());
  CHECK(metric(run, "hosts") != 1); // nobody joined (NaN before any row, else 0)
  stop_run({{"coordinator", &coord}});
}

TEST_CASE(
  "a coordinator refuses a config it cannot run across processes, naming the key") {
  temp_folder dir("troupe-cluster");
  const auto cfg = write_config(dir, 1, 2048);
  struct bad {
    std::string args, env, message;
  };
  const std::vector<bad> cases = {
    {"--listen 127.0.0.1:0", "", "cluster.token: a run across processes needs a token"},
    {"--listen 127.0.0.1", token_env,
     "cluster.listen: expected HOST:PORT, got '127.0.0.1'"},
    {"--listen 127.0.0.1:70000", token_env, "the port must be 0 to 65535, got '70000'"},
    {"", token_env,
     "algo.num_learners: 0 learners only on the coordinator of a run across processes"},
    {"--listen 127.0.0.1:0 --set cluster.timeout_ms=400 --set cluster.heartbeat_ms=500",
     token_env,
     "cluster.timeout_ms must be larger than cluster.heartbeat_ms (500), got 400"},
    {"--listen 127.0.0.1:0 --set env.id='\"remote\"'", token_env,
     "env.id: \"remote\" environments are served by a run in one process"},
    // A member of the data plane's group needs one address for its data port.
    {"--listen 0.0.0.0:0 --set algo.num_learners=1 --set "
     "cluster.data_plane='\"allreduce\"'",
     token_env,
     "cluster.data_interface is empty and cluster.listen = '0.0.0.0:0' (--listen) "
     "listens on every address"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    auto r =
      run_command(fmt::format("env -u TROUPE_CLUSTER_TOKEN {} timeout -k 10 {} '{}' "
                              "train '{}' {}",
                              c.env, troupe_command_limit_s, TROUPE_BINARY, cfg, c.args),
                  dir);
    CAPTURE(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(!fs::exists(dir.path / "runs")); // nothing started, nothing written
  }
}

TEST_CASE("troupe worker refuses bad arguments before it connects") {
  temp_folder dir("troupe-cluster");
  const std::vector<std::pair<std::string, std::string>> cases = {
    {"worker --run r", "usage: troupe worker (--connect HOST:PORT [--run RUN]"},
    {"worker --connect 127.0.0.1:1 --run ''", "--run: the run's name, not empty"},
    {"worker --connect 127.0.0.1:1 --connect-file c.json",
     "--connect and --connect-file: give one of them, got '127.0.0.1:1' and 'c.json'"},
    {"worker --connect-file c.json --run ''", "--run: the run's name, not empty"},
    {"worker --connect 127.0.0.1:0 --run r",
     "--connect: the port must be the coordinator's"},
    {"worker --connect localhost --run r",
     "--connect: expected HOST:PORT, got 'localhost'"},
    {"worker --connect 127.0.0.1:1 --run r --learners 65", "learners"},
    {"worker --connect 127.0.0.1:1 --run r --threads 0", "threads"},
    {"worker --connect 127.0.0.1:1 --run r --data-interface 0.0.0.0",
     "--data-interface: one address of this host, never a wildcard, got '0.0.0.0'"},
    {"worker --connect 127.0.0.1:1 --run r --threads many", "threads"},
    {"worker --connect 127.0.0.1:1 --run r --device tpu",
     "--device: expected auto, cpu or cuda, got 'tpu'"},
    {"worker --connect 127.0.0.1:1 --run r --name 'a b'", "--name: a non-empty name"},
    {"worker --connect 127.0.0.1:1 --run r --runners 2",
     "--runners: only with --learners 0"},
    {"worker --connect 127.0.0.1:1 --run r --learners 0",
     "--learners 0: give --runners N"},
    {"worker --connect 127.0.0.1:1 --run r --timeout-ms 100 --heartbeat-ms 200",
     "--timeout-ms must be larger than --heartbeat-ms"},
  };
  for (const auto& c : cases) {
    const std::string& args = c.first;
    CAPTURE(args);
    auto r = run_troupe(args, dir);
    CAPTURE(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(c.second) != std::string::npos);
  }
  // Nothing listens there: bounded retries, then status 1 and why.
  auto r = run_command(fmt::format("TROUPE_CLUSTER_TOKEN=t timeout -k 10 {} '{}' worker "
                                   "--connect 127.0.0.1:1 --run r --reconnect-s 0",
                                   troupe_command_limit_s, TROUPE_BINARY),
                       dir);
  CAPTURE(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("cannot reach the coordinator at 127.0.0.1:1 (run r) within 0 s") !=
        std::string::npos);
  // --run is optional: without it the worker tries to reach any run there.
  r = run_command(fmt::format("TROUPE_CLUSTER_TOKEN=t timeout -k 10 {} '{}' worker "
                              "--connect 127.0.0.1:1 --reconnect-s 0",
                              troupe_command_limit_s, TROUPE_BINARY),
                  dir);
  CAPTURE(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("cannot reach the coordinator at 127.0.0.1:1 (run not named: any) "
                   "within 0 s") != std::string::npos);

  // A cluster.json that is missing, malformed, names no address to connect
  // to or another run: status 1, naming the file and the rule.
  const auto file = (dir.path / "cluster.json").string();
  const std::vector<std::tuple<std::string, std::string, std::string>> files = {
    {"", "", file + ": cannot open it"},
    {"[1, 2]", "", file + ": not a JSON object"},
    {R"({"host": "127.0.0.1", "port": 9})", "",
     file + ": \"run\" must be the run's name"},
    {R"({"run": "r", "port": 9})", "", file + ": needs \"connect\" (HOST:PORT)"},
    {R"({"run": "r", "connect": "0.0.0.0:9"})", "",
     file + ": 0.0.0.0:9 is not an address to connect to"},
    {R"({"run": "r", "connect": "127.0.0.1:x"})", "",
     file + ": \"connect\": the port must be 0 to 65535, got 'x'"},
    {R"({"run": "r", "connect": "127.0.0.1:1"})", "--run other",
     "--run other: " + file + " is the coordinator's file of run r"},
    {R"({"run": "r", "connect": "127.0.0.1:1"})", "",
     "cannot reach the coordinator at 127.0.0.1:1 (run r, from " + file + ") within 0 s"},
  };
  for (const auto& f : files) {
    const std::string& text = std::get<0>(f);
    const std::string& extra = std::get<1>(f);
    const std::string& expected = std::get<2>(f);
    std::filesystem::remove(file);
    if (!text.empty()) {
      std::ofstream out(file);
      out << text;
    }
    CAPTURE(text);
    auto rf =
      run_command(fmt::format("TROUPE_CLUSTER_TOKEN=t timeout -k 10 {} '{}' worker "
                              "--connect-file '{}' {} --reconnect-s 0",
                              troupe_command_limit_s, TROUPE_BINARY, file, extra),
                  dir);
    CAPTURE(rf.err);
    CHECK(rf.status == 1);
    CHECK(rf.err.find(expected) != std::string::npos);
  }
}

namespace {

// A CA, and for each name a key and a certificate it signed (EC P-256, valid
// two days), made with the openssl command line in `dir`; the CA's files are
// NAME_ca.pem / NAME_ca.key. Returns false (and the output) when openssl fails.
bool make_certificates(const temp_folder& dir, const std::string& ca,
                       const std::vector<std::string>& names, std::string& why) {
  std::string script = fmt::format(
    "set -e; cd '{}'; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
    "-nodes -keyout {}_ca.key -out {}_ca.pem -days 2 -subj /CN={}-ca 2>&1; ",
    dir.path.string(), ca, ca, ca);
  for (const auto& n : names)
    script += fmt::format(
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "
      "{}.key "
      "-out {}.csr -subj /CN={} 2>&1; openssl x509 -req -in {}.csr -CA {}_ca.pem -CAkey "
      "{}_ca.key -CAcreateserial -out {}.pem -days 2 2>&1; ",
      n, n, n, n, ca, ca, n);
  auto r = run_command("bash -c \"" + script + "\"", dir);
  why = r.out + r.err;
  return r.status == 0;
}

} // namespace

TEST_CASE_FIXTURE(
  cluster_run, "TLS between coordinator and workers: a worker with a certificate of the "
               "run's CA joins and trains, one without TLS or with another CA's "
               "certificate never gets in") {
  std::string why;
  REQUIRE_MESSAGE(make_certificates(dir, "run", {"coord", "w1"}, why),
                  "openssl could not make the test certificates: " << why);
  REQUIRE_MESSAGE(make_certificates(dir, "other", {"stray"}, why),
                  "openssl could not make the test certificates: " << why);
  const auto p = [&](const std::string& f) { return (dir.path / f).string(); };
  auto& coord =
    start_coordinator(write_config(dir, fresh_seed() % 1000, 2000000),
                      {"--set", "cluster.tls_certificate=\"" + p("coord.pem") + "\"",
                       "--set", "cluster.tls_key=\"" + p("coord.key") + "\"", "--set",
                       "cluster.tls_ca=\"" + p("run_ca.pem") + "\""});
  INFO(report());

  // Refused first (each gives up after 2 s of retries), then the good one.
  auto& plain = start("plain", {"worker", "--connect", addr, "--run", run_name, "--name",
                                "plain", "--reconnect-s", "2"});
  auto& stray =
    start("stray", {"worker", "--connect", addr, "--run", run_name, "--name", "stray",
                    "--reconnect-s", "2", "--tls-certificate", p("stray.pem"),
                    "--tls-key", p("stray.key"), "--tls-ca", p("run_ca.pem")});
  {
    const auto hung =
      until_all_ended({{"plain", &plain}, {"stray", &stray}}, std::chrono::seconds(120));
    REQUIRE_MESSAGE(hung.empty(), hung);
  }
  CHECK(plain.status() == 1);
  CHECK(plain.err().find("cannot reach the coordinator at " + addr) != std::string::npos);
  CHECK(stray.status() == 1);
  CHECK(stray.err().find("cannot reach the coordinator at " + addr) != std::string::npos);
  CHECK(joins_of(coord.err(), "plain") == 0);
  CHECK(joins_of(coord.err(), "stray") == 0);

  auto& w1 = start_worker("w1", {"--tls-certificate", p("w1.pem"), "--tls-key",
                                 p("w1.key"), "--tls-ca", p("run_ca.pem")});
  // It trains: the run's updates pass 20 with hosts = 1.
  await([&] { return metric(run, "hosts") == 1 && metric(run, "updates") >= 20; },
        std::chrono::seconds(120), "no 20 updates with the TLS worker", {&w1});
  CHECK(joins_of(coord.err(), "w1") == 1);
  stop_run({{"coordinator", &coord}, {"w1", &w1}});
}

TEST_CASE("TLS files are checked before anything starts, naming the key or flag") {
  temp_folder dir("troupe-cluster");
  std::string why;
  REQUIRE_MESSAGE(make_certificates(dir, "run", {"coord", "w1"}, why),
                  "openssl could not make the test certificates: " << why);
  const auto p = [&](const std::string& f) { return (dir.path / f).string(); };
  const auto cfg = write_config(dir, 1, 2048);
  auto set = [&](const std::string& key, const std::string& value) {
    return fmt::format("--set cluster.{}='\"{}\"'", key, value);
  };
  struct bad {
    std::string args, message;
  };
  const std::vector<bad> cases = {
    {set("tls_certificate", p("coord.pem")),
     "TLS needs all three of cluster.tls_certificate, cluster.tls_key and "
     "cluster.tls_ca; "
     "got only cluster.tls_certificate (--set)"},
    {set("tls_certificate", p("coord.pem")) + " " + set("tls_key", p("w1.key")) + " " +
       set("tls_ca", p("run_ca.pem")),
     "--set: cluster.tls_key: the key in '" + p("w1.key") + "' is not the key of"},
    {set("tls_certificate", p("missing.pem")) + " " + set("tls_key", p("coord.key")) +
       " " + set("tls_ca", p("run_ca.pem")),
     "--set: cluster.tls_certificate: cannot read '" + p("missing.pem") + "'"},
    {set("tls_certificate", p("coord.key")) + " " + set("tls_key", p("coord.key")) + " " +
       set("tls_ca", p("run_ca.pem")),
     "cluster.tls_certificate: '" + p("coord.key") + "' is not a PEM certificate"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    auto r = run_command(fmt::format("TROUPE_CLUSTER_TOKEN=t timeout -k 10 {} '{}' train "
                                     "'{}' --listen 127.0.0.1:0 {}",
                                     troupe_command_limit_s, TROUPE_BINARY, cfg, c.args),
                         dir);
    CAPTURE(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(!fs::exists(dir.path / "runs"));
  }
  auto r =
    run_troupe(fmt::format("worker --connect 127.0.0.1:1 --run r --tls-certificate "
                           "'{}' --tls-key '{}'",
                           p("w1.pem"), p("w1.key")),
               dir);
  CAPTURE(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("TLS needs all three of --tls-certificate, --tls-key and --tls-ca") !=
        std::string::npos);
  r =
    run_troupe(fmt::format("worker --connect 127.0.0.1:1 --run r --tls-certificate '{}' "
                           "--tls-key '{}' --tls-ca '{}'",
                           p("w1.pem"), p("coord.key"), p("run_ca.pem")),
               dir);
  CAPTURE(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("--tls-key: the key in") != std::string::npos);
}
