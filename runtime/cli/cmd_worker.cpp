// `troupe worker (--connect HOST:PORT [--run RUN] | --connect-file CLUSTER_JSON)
// [--learners N] [--runners-per-learner M]
// [--runners R] [--device D] [--data-interface ADDR] [--name NAME] [--heartbeat-ms MS]
// [--timeout-ms MS]
// [--reconnect-s S]`: joins a run across processes (docs/cluster.md).
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>
#include <unistd.h>

#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/console_log.hpp"
#include "runtime/cluster/worker.hpp"

namespace troupe::runtime {

int cmd_worker(const args_t& args) {
  const std::vector<arg_spec> specs = {
    {"connect", true, false, "HOST:PORT of the coordinator (its cluster.json)"},
    {"run", true, false,
     "the run's name (cluster.json's \"run\"), checked when given: a coordinator of "
     "another run refuses the connection (default: any run, learned from the "
     "coordinator)"},
    {"connect-file", true, false,
     "instead of --connect and --run: the coordinator's cluster.json (its run "
     "folder's, on a file system this host sees), read again before every attempt "
     "to reach the coordinator, so the worker follows it when it is resumed on "
     "another address"},
    {"learners", true, false, "learners this worker hosts (default 1)"},
    {"runners-per-learner", true, false,
     "runners per learner (default: the run's algo.runners_per_learner)"},
    {"runners", true, false,
     "with --learners 0: runners feeding the learner hosts' learners (an "
     "environment-only host)"},
    {"device", true, false, "auto, cpu or cuda (default: the run's run.device)"},
    {"data-interface", true, false,
     "the one address this host's data port (and feed door) binds to and the other "
     "hosts reach it at, with the all-reduce data plane (default: the address its "
     "connection to the coordinator leaves from; never a wildcard)"},
    {"threads", true, false,
     "the actor system's scheduler threads (default: the CPUs this process may run "
     "on, as taskset or a cgroup's cpuset leaves them)"},
    {"name", true, false, "its name in the run (default: HOSTNAME-PID)"},
    {"heartbeat-ms", true, false, "the run's cluster.heartbeat_ms (default 500)"},
    {"timeout-ms", true, false, "the run's cluster.timeout_ms (default 3000)"},
    {"reconnect-s", true, false,
     "how long to keep trying to reach the coordinator (default 60)"},
    {"tls-certificate", true, false,
     "this worker's PEM certificate, signed by the run's CA (a coordinator with "
     "cluster.tls_* takes TLS connections only)"},
    {"tls-key", true, false, "the PEM private key of --tls-certificate (unencrypted)"},
    {"tls-ca", true, false, "the run's PEM CA certificate (cluster.tls_ca)"},
    {"rejoin-until-ms", true, false,
     "(set by a worker that restarts itself after losing the coordinator)"},
  };
  auto parsed = parse_args("worker", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto connect = parsed->get("connect");
  auto run = parsed->get("run");
  auto connect_file = parsed->get("connect-file");
  const bool by_file = connect_file.has_value();
  if (by_file && connect)
    return fail(exit_bad_input, "--connect and --connect-file: give one of them, got '" +
                                  *connect + "' and '" + *connect_file + "'");
  if ((by_file ? connect_file->empty() : !connect) || !parsed->positional.empty())
    return fail(exit_bad_input,
                "usage: troupe worker (--connect HOST:PORT [--run RUN] | --connect-file "
                "CLUSTER_JSON) [--learners N] "
                "[--runners-per-learner M | --learners 0 --runners R] [--device D] "
                "[--name NAME] [--threads N]\n" +
                  describe_args(specs) +
                  "The token comes from the environment variable TROUPE_CLUSTER_TOKEN.");
  cluster::worker_options o;
  o.log = console_log();
  if (by_file) {
    o.connect_file = *connect_file;
  } else {
    auto ep = cluster::parse_endpoint(*connect, "--connect");
    if (!ep)
      return fail(exit_bad_input, ep.err().message);
    if (ep->port == 0)
      return fail(exit_bad_input, "--connect: the port must be the coordinator's, not 0");
    o.connect = *ep;
  }
  if (run) {
    if (run->empty())
      return fail(exit_bad_input, "--run: the run's name, not empty");
    o.run = *run;
  }
  auto learners = parsed->get_int("learners", 1, 0, 64);
  auto runners = parsed->get_int("runners-per-learner", 0, 0, 64);
  auto guest_runners = parsed->get_int("runners", 0, 0, 64);
  auto heartbeat = parsed->get_int("heartbeat-ms", 500, 10, 3600000);
  auto timeout = parsed->get_int("timeout-ms", 3000, 50, 86400000);
  auto reconnect = parsed->get_int("reconnect-s", 60, 0, 86400);
  auto threads = parsed->get_int("threads", 0, 1, 1024);
  for (auto* r :
       {&learners, &runners, &guest_runners, &heartbeat, &timeout, &reconnect, &threads})
    if (!*r)
      return fail(exit_bad_input, r->err().message);
  if (*timeout <= *heartbeat)
    return fail(exit_bad_input, "--timeout-ms must be larger than --heartbeat-ms");
  o.learners = static_cast<uint64_t>(*learners);
  o.runners_per_learner = static_cast<uint64_t>(*runners);
  o.runners = static_cast<uint64_t>(*guest_runners);
  if (o.runners > 0 && o.learners > 0)
    return fail(exit_bad_input, "--runners: only with --learners 0 (an "
                                "environment-only host); with learners, use "
                                "--runners-per-learner");
  if (o.learners == 0 && o.runners == 0)
    return fail(exit_bad_input, "--learners 0: give --runners N (the runners of an "
                                "environment-only host)");
  o.heartbeat_ms = static_cast<uint64_t>(*heartbeat);
  o.timeout_ms = static_cast<uint64_t>(*timeout);
  o.reconnect_s = static_cast<uint64_t>(*reconnect);
  o.threads = static_cast<uint64_t>(*threads);
  if (auto d = parsed->get("device")) {
    if (*d != "auto" && *d != "cpu" && *d != "cuda")
      return fail(exit_bad_input,
                  "--device: expected auto, cpu or cuda, got '" + *d + "'");
    o.device = *d;
  }
  if (auto n = parsed->get("name")) {
    o.name = *n;
  } else {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0)
      std::snprintf(host, sizeof host, "worker");
    o.name = std::string(host) + "-" + std::to_string(::getpid());
  }
  if (o.name.empty() || o.name.find_first_of(" \t\n,") != std::string::npos)
    return fail(exit_bad_input,
                "--name: a non-empty name without spaces or commas, got '" + o.name +
                  "'");
  if (auto d = parsed->get("data-interface")) {
    if (cluster::wildcard_host(*d))
      return fail(exit_bad_input,
                  "--data-interface: one address of this host, never a wildcard, got '" +
                    *d + "'");
    o.data_interface = *d;
  }
  o.tls.certificate = parsed->get("tls-certificate").value_or("");
  o.tls.key = parsed->get("tls-key").value_or("");
  o.tls.ca = parsed->get("tls-ca").value_or("");
  if (auto ok = cluster::check_tls(o.tls, {"--tls-certificate", "--tls-key", "--tls-ca"});
      !ok)
    return fail(exit_bad_input, ok.err().message);
  if (auto until = parsed->get("rejoin-until-ms")) {
    char* end = nullptr;
    o.rejoin_until_ms = std::strtoull(until->c_str(), &end, 10);
    if (until->empty() || *end != '\0')
      return fail(exit_bad_input,
                  "--rejoin-until-ms: expected a number, got '" + *until + "'");
  }
  // The three steps of a worker; the exit status is decided here: 1 (with an
  // error-level line) when one fails, 0 when the run ended, and a new process
  // when the coordinator was lost. The worker is kept to the process's end:
  // its actor system is left running (runtime::system_end::leave).
  std::optional<cluster::worker> w;
  result<cluster::worker_end> ended = make_error(errc::unavailable, "not run");
  if (auto connected = cluster::worker::connect(o); !connected) {
    ended = connected.err();
  } else {
    w.emplace(std::move(*connected));
    if (auto joined = w->join(); !joined)
      ended = joined.err();
    else
      ended = w->run();
  }
  int status = 0;
  if (!ended) {
    actors::write_log(o.log, actors::log_level::error,
                      "troupe: worker: " + ended.err().message);
    status = 1;
  }
  if (ended && *ended == cluster::worker_end::rejoin) {
    // A new process with the same arguments (and pid) joins again: this
    // one's actors may wait forever on the lost coordinator's.
    const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch() +
                         std::chrono::seconds(o.reconnect_s))
                         .count();
    std::vector<std::string> argv_s = {"troupe", "worker"};
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--rejoin-until-ms") {
        ++i; // replaced below
        continue;
      }
      if (args[i].rfind("--rejoin-until-ms=", 0) == 0)
        continue;
      argv_s.push_back(args[i]);
    }
    argv_s.push_back("--rejoin-until-ms");
    argv_s.push_back(std::to_string(until));
    std::vector<char*> argv;
    for (auto& a : argv_s)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    ::execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "troupe: worker: %s: cannot start again to rejoin: %s\n",
                 o.name.c_str(), std::strerror(errno));
    std::fflush(stderr);
    std::_Exit(1);
  }
  // The worker's actors may wait on a coordinator that is gone: the process
  // ends here without waiting for them.
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}

} // namespace troupe::runtime
