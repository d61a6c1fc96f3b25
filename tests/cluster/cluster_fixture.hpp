// The set-up of a run across processes on loopback, shared by the cluster
// cases: `troupe` children killed and reaped by their owner, bounded waits,
// and cluster_run, the fixture of a coordinator and the workers it started.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/cli_support.hpp"
#include "tests/temp_folder.hpp"

extern char** environ;

namespace troupe::test {

namespace fs = std::filesystem;

// How long a silent host may stay before it is declared lost (the workers'
// --timeout-ms and the coordinator's cluster.timeout_ms): 2 s, times the
// sanitizer builds' TROUPE_TEST_TIMEOUT_SCALE (under ASan on two cores a
// live worker once went 2 s without a heartbeat and was declared lost).
inline const std::string lost_ms = std::to_string(2000 * TROUPE_TEST_TIMEOUT_SCALE);

// The run's token, as the environment entry of the children that know it.
inline const std::string token_env = "TROUPE_CLUSTER_TOKEN=test-token-7f3a9c1e55d04b2b";

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// One `troupe` child process with stdout and stderr in files; killed (SIGKILL)
// and reaped by the destructor when still running.
class child {
public:
  child(const std::vector<std::string>& args, const fs::path& out, const fs::path& err,
        const std::vector<std::string>& extra_env = {})
    : out_(out), err_(err) {
    std::vector<std::string> argv_s = {TROUPE_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    // In an AddressSanitizer build the coordinator and workers run without
    // LeakSanitizer: CAF 0.17.6's middleman (Debian's libcaf_io) sometimes
    // leaves its BASP broker in a reference cycle when the actor system shuts
    // down (2 of 5 runs of the two-worker case: the broker, its connection and
    // node tables, one mailbox element and one allocation of the actor
    // system's constructor, 15 objects, none of them troupe's). Every other
    // process of the suite keeps leak detection; ASan's other checks stay on.
    std::vector<std::string> env_s;
    bool asan_options = false;
    for (char** e = environ; *e; ++e) {
      std::string var(*e);
      if (var.rfind("TROUPE_CLUSTER_TOKEN=", 0) == 0)
        continue;
      if (var.rfind("ASAN_OPTIONS=", 0) == 0) {
        var += ":detect_leaks=0";
        asan_options = true;
      }
      env_s.push_back(std::move(var));
    }
    if (!asan_options)
      env_s.emplace_back("ASAN_OPTIONS=detect_leaks=0");
    env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& e : env_s)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc =
      posix_spawn(&pid_, TROUPE_BINARY, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(rc == 0, "cannot start " << TROUPE_BINARY);
  }
  ~child() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  /// Whether it still runs (reaps it when it has ended).
  bool running() {
    if (reaped_)
      return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      return false;
    }
    return true;
  }
  /// Sends `sig`.
  void signal(int sig) { ::kill(pid_, sig); }
  /// SIGKILL, then reaped.
  void kill_now() {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    reaped_ = true;
    status_ = -1;
  }
  /// Its exit status once ended (-1: by a signal).
  int status() const { return status_; }
  pid_t pid() const { return pid_; }
  std::string out() const { return read_text(out_); }
  std::string err() const { return read_text(err_); }

private:
  pid_t pid_ = 0;
  bool reaped_ = false;
  int status_ = -2;
  fs::path out_, err_;
};

// Polls `cond` until it holds or `limit` passes; false then.
inline bool poll_until(const std::function<bool()>& cond, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // polling interval
  }
  return true;
}

// The last `n` lines of `text`.
inline std::string last_lines(const std::string& text, size_t n) {
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n')
    --pos;
  for (size_t i = 0; i < n && pos != std::string::npos && pos > 0; ++i)
    pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos || pos == 0 ? text : text.substr(pos + 1);
}

// The stack frames of troupe's own code in every thread of `pid` (gdb, bounded),
// for the message of a process that did not end: which wait it hangs in.
inline std::string troupe_frames(pid_t pid) {
  const std::string cmd = fmt::format(
    "timeout 60 gdb -p {} -batch -ex 'thread apply all bt 30' 2>/dev/null", pid);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
  if (!pipe)
    return "(gdb could not be started)";
  std::string out, line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe.get())) {
    line = buf;
    if (line.rfind("Thread ", 0) == 0 ||
        (line.rfind("#", 0) == 0 && (line.find("troupe::") != std::string::npos ||
                                     line.find("~actor_system") != std::string::npos ||
                                     line.find("await_") != std::string::npos)))
      out += line.size() > 200 ? line.substr(0, 200) + "...\n" : line;
  }
  return out.empty() ? std::string{"(no stack: gdb could not attach)"} : out;
}

// Waits (at most `limit`) until every named child has ended. Empty when they
// have; else which still run, each with its last stderr lines and where its
// threads are in troupe's code.
inline std::string
until_all_ended(const std::vector<std::pair<std::string, child*>>& children,
                std::chrono::seconds limit) {
  if (poll_until(
        [&] {
          bool any = false;
          for (auto& c : children)
            any = c.second->running() || any;
          return !any;
        },
        limit))
    return {};
  std::string report;
  for (auto& [name, c] : children)
    if (c->running())
      report += fmt::format("{} still runs {} s on; its last stderr lines:\n{}\nits "
                            "threads in troupe's code:\n{}\n",
                            name, limit.count(), last_lines(c->err(), 8),
                            troupe_frames(c->pid()));
  return report;
}

// Waits until coordinator `c` says it listens on an address starting with `at`.
inline void wait_listening(child& c, const std::string& at) {
  REQUIRE_MESSAGE(poll_until(
                    [&] {
                      return !c.running() ||
                             c.out().find("listening on " + at) != std::string::npos;
                    },
                    std::chrono::seconds(120)),
                  "the coordinator did not listen on " << at << " within 120 s");
  REQUIRE(c.running());
}

// Ends a run: SIGTERM to the first of `children` (the coordinator), then
// every one of them must end within 120 s, each with exit status 0.
inline void stop_run(const std::vector<std::pair<std::string, child*>>& children) {
  children.front().second->signal(SIGTERM);
  const auto hung = until_all_ended(children, std::chrono::seconds(120));
  REQUIRE_MESSAGE(hung.empty(), hung);
  for (const auto& c : children) {
    const std::string& name = c.first;
    CAPTURE(name);
    CHECK(c.second->status() == 0);
  }
}

// The small CartPole PPO config of these tests (async unless `mode` says
// sync): no local learner. [cluster] ends the file so that keys can follow.
inline std::string write_config(const temp_folder& dir, uint64_t seed, uint64_t total,
                                bool obs_norm = false,
                                const std::string& mode = "async") {
  return dir.write("cluster.toml", fmt::format(R"([run]
name = "cluster"
seed = {}
device = "cpu"
output_dir = "{}"
log_every_updates = 1
checkpoint_every_updates = 0

[env]
id = "CartPole-v1"
num_envs = 4

[algo]
name = "ppo"
mode = "{}"
num_learners = 0
runners_per_learner = 1
total_env_steps = {}
num_steps = 128
learning_rate = 2.5e-4
max_staleness = 8

[model]
obs_norm = {}

[cluster]
heartbeat_ms = 200
timeout_ms = {}
)",
                                               seed, (dir.path / "runs").string(), mode,
                                               total, obs_norm, lost_ms));
}

// The coordinator's run folder, once its cluster.json exists.
inline fs::path wait_for_run(const temp_folder& dir, child& coord) {
  fs::path run;
  const bool ok = poll_until(
    [&] {
      std::error_code ec;
      if (!coord.running())
        return true;
      for (auto& e : fs::directory_iterator(dir.path / "runs", ec))
        if (fs::exists(e.path() / "cluster.json"))
          run = e.path();
      return !run.empty();
    },
    std::chrono::seconds(120));
  INFO("coordinator stderr: " << coord.err());
  REQUIRE_MESSAGE(ok, "no cluster.json within 120 s");
  REQUIRE_MESSAGE(!run.empty(), "the coordinator ended before writing cluster.json");
  return run;
}

inline std::string address_of(const fs::path& run,
                              const std::string& host = "127.0.0.1") {
  auto j = nlohmann::json::parse(read_text(run / "cluster.json"));
  REQUIRE(j.at("host").get<std::string>() == host);
  REQUIRE(j.at("run").get<std::string>() == run.filename().string());
  const auto port = j.at("port").get<unsigned>();
  REQUIRE(port > 0);
  const auto addr = fmt::format("{}:{}", host, port);
  REQUIRE(j.at("connect").get<std::string>() == addr);
  return addr;
}

// The named column of metrics.csv's last row; NaN when none yet.
inline std::map<std::string, double> last_metrics(const fs::path& run) {
  std::map<std::string, double> out;
  auto lines = lines_of(read_text(run / "metrics.csv"));
  if (lines.size() < 2)
    return out;
  std::vector<std::string> header, cells;
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string c;
    while (std::getline(ss, c, ','))
      v.push_back(c);
    return v;
  };
  header = split(lines.front());
  cells = split(lines.back());
  if (cells.size() != header.size())
    return out; // a row being written
  for (size_t i = 0; i < header.size(); ++i)
    out[header[i]] = std::strtod(cells[i].c_str(), nullptr);
  return out;
}

inline double metric(const fs::path& run, const std::string& name) {
  auto m = last_metrics(run);
  auto it = m.find(name);
  return it == m.end() ? NAN : it->second;
}

// The number that the first group of `pattern` matches in `text`; -1 when
// it does not match.
inline long number_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern)))
    return -1;
  return std::stol(m[1].str());
}

// How many times `what` occurs in `text`.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// How many times the coordinator's log says host `name` joined.
inline size_t joins_of(const std::string& log, const std::string& name) {
  const std::regex joined("cluster: host " + name + R"( \(127\.0\.0\.1:[0-9]+\) joined)");
  return static_cast<size_t>(std::distance(
    std::sregex_iterator(log.begin(), log.end(), joined), std::sregex_iterator()));
}

// -- the fixture --------------------------------------------------------------

/// A run across processes on loopback: a temporary folder, the coordinator
/// (`troupe train --listen 127.0.0.1:0`) and the workers a case starts, every
/// one killed and reaped when the case ends, also when a check fails.
class cluster_run {
public:
  cluster_run() = default;
  ~cluster_run() {
    // The newest first, as local children were destroyed; the folder last.
    while (!children_.empty())
      children_.pop_back();
  }
  cluster_run(const cluster_run&) = delete;
  cluster_run& operator=(const cluster_run&) = delete;

  /// Starts `troupe ARGS` with stdout and stderr in LABEL.out and LABEL.err
  /// of the folder, with the run's token unless `env` says otherwise.
  child& start(const std::string& label, const std::vector<std::string>& args,
               const std::vector<std::string>& env = {token_env}) {
    auto c = std::make_unique<child>(args, dir.path / (label + ".out"),
                                     dir.path / (label + ".err"), env);
    children_.emplace_back(label, std::move(c));
    return *children_.back().second;
  }

  /// Starts the coordinator ("coord") on 127.0.0.1:0 with `config` and
  /// `extra` arguments, and waits for its run folder and address.
  child& start_coordinator(const std::string& config,
                           const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"train", config, "--listen", "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = &start("coord", args);
    run = wait_for_run(dir, *coordinator_);
    addr = address_of(run);
    run_name = run.filename().string();
    return *coordinator_;
  }

  /// Starts a coordinator ("coord2") that resumes the run listening on
  /// `listen`, waits until it listens on an address starting with
  /// `listening_at`, and watches it from then on instead of the first.
  child& resume_coordinator(const std::string& listen, const std::string& listening_at,
                            const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"train", "--resume", run.string(), "--listen",
                                     listen};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = &start("coord2", args);
    wait_listening(*coordinator_, listening_at);
    return *coordinator_;
  }

  /// A worker's arguments joining this run as `name` (heartbeat every 200 ms,
  /// lost after lost_ms), then `extra`.
  std::vector<std::string> worker_args(const std::string& name,
                                       const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {"worker", "--connect",    addr,   "--run",
                                     run_name, "--name",       name,   "--heartbeat-ms",
                                     "200",    "--timeout-ms", lost_ms};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  /// Starts worker `name` (its files named after it) with worker_args.
  child& start_worker(const std::string& name,
                      const std::vector<std::string>& extra = {}) {
    return start(name, worker_args(name, extra));
  }

  /// Waits at most `limit` (times the sanitizer builds' TROUPE_TEST_TIMEOUT_SCALE:
  /// learning takes that much longer there) until `cond` holds; fails when the
  /// coordinator or one of `also` ends first, or with "`what` within LIMIT s"
  /// at the bound.
  void await(const std::function<bool()>& cond, std::chrono::seconds limit,
             const std::string& what, const std::vector<child*>& also = {}) {
    limit *= TROUPE_TEST_TIMEOUT_SCALE;
    REQUIRE_MESSAGE(coordinator_, "no coordinator started");
    std::vector<child*> watched = {coordinator_};
    watched.insert(watched.end(), also.begin(), also.end());
    auto any_ended = [&] {
      for (auto* c : watched)
        if (!c->running())
          return true;
      return false;
    };
    const bool held = poll_until([&] { return any_ended() || cond(); }, limit);
    for (auto* c : watched)
      REQUIRE_MESSAGE(c->running(), label_of(c) << " ended (status " << c->status()
                                                << ") before the wait was over; the "
                                                   "wait's failure: "
                                                << what);
    REQUIRE_MESSAGE(held, what << " within " << limit.count() << " s");
  }

  /// Every child started: its label, whether it runs, its last stdout lines
  /// and its stderr, for the message of a failed check.
  std::string report() const {
    std::string out;
    for (const auto& [label, c] : children_)
      out += fmt::format("{} ({}):\nstdout (last lines):\n{}\nstderr:\n{}\n", label,
                         c->running() ? std::string{"running"}
                                      : fmt::format("ended, status {}", c->status()),
                         last_lines(c->out(), 20), c->err());
    return out;
  }

  temp_folder dir{"troupe-cluster"}; ///< the case's folder: config, outputs, run folders
  fs::path run;                      ///< the coordinator's run folder
  std::string addr;                  ///< the coordinator's HOST:PORT
  std::string run_name;              ///< the run folder's name

private:
  std::string label_of(const child* c) const {
    for (const auto& [label, owned] : children_)
      if (owned.get() == c)
        return label;
    return "a child";
  }

  std::vector<std::pair<std::string, std::unique_ptr<child>>> children_;
  child* coordinator_ = nullptr;
};

} // namespace troupe::test
