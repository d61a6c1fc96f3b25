// `troupe train CONFIG [--set section.key=value ...] [--resume RUN_DIR]
// [--listen HOST:PORT]`.
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/console_log.hpp"
#include "runtime/cli/plot.hpp"
#include "runtime/config.hpp"
#include "runtime/remote_run.hpp"
#include "runtime/session.hpp"

namespace troupe::runtime {

namespace {

// The signal that asked the run to stop (0: none). The handlers only store
// it; the waiting loop below turns it into session::request_stop().
std::atomic<int> stop_signal{0};

extern "C" void on_stop_signal(int sig) {
  stop_signal.store(sig);
}

// Installs the SIGINT and SIGTERM handlers for its lifetime.
struct stop_signals {
  using handler = void (*)(int);
  handler old_int, old_term;
  stop_signals() {
    stop_signal.store(0);
    old_int = std::signal(SIGINT, on_stop_signal);
    old_term = std::signal(SIGTERM, on_stop_signal);
  }
  ~stop_signals() {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
};

// Runs a session to its end; SIGINT or SIGTERM stop it cleanly (a final
// checkpoint, the result marked interrupted). Returns the result and the run
// folder (empty when none was created).
// With env.id = "remote" the session is a remote run's (runtime/remote_run.hpp):
// its server is bound before anything starts and stops before the session closes.
std::pair<result<training_result>, std::string>
train_until_done(const config& cfg, const std::string& resume) {
  std::unique_ptr<remote_run> remote;
  std::optional<session> local;
  // The library's lines on this terminal: the run folder, a row or a progress
  // line (on a terminal), resuming, restarts, failures.
  session_options options;
  options.log = console_log();
  options.progress_line = isatty(STDOUT_FILENO) != 0;
  if (is_remote(cfg)) {
    auto r = remote_run::open(cfg, resume, std::move(options));
    if (!r)
      return {r.err(), std::string{}};
    remote = std::move(*r);
  } else {
    auto opened = session::open(cfg, resume, std::move(options));
    if (!opened)
      return {opened.err(), std::string{}};
    local.emplace(std::move(*opened));
  }
  session* s = remote ? &remote->training() : &*local;
  stop_signals handlers;
  if (auto ok = remote ? remote->start() : s->start(); !ok)
    return {ok.err(), s->run_dir()};
  bool stop_asked = false;
  for (;;) {
    auto done = s->wait(std::chrono::milliseconds(50));
    if (!done)
      return {done.err(), s->run_dir()};
    if (*done)
      break;
    if (const int sig = stop_signal.load(); sig != 0 && !stop_asked) {
      stop_asked = true;
      std::fprintf(stderr,
                   "\ntroupe: stopped (signal %d); writing the final checkpoint\n", sig);
      s->request_stop();
    }
  }
  auto out = remote ? remote->close() : s->close();
  return {std::move(out), s->run_dir()};
}

} // namespace

int cmd_train(const args_t& args) {
  const std::vector<arg_spec> specs = {
    {"set", true, true, "override one option: --set section.key=value"},
    {"resume", true, false, "continue RUN_DIR from its newest complete checkpoint"},
    {"listen", true, false,
     "coordinate a run across processes: workers join at HOST:PORT (port 0: any "
     "free one; sets cluster.listen)"},
  };
  auto parsed = parse_args("train", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto resume = parsed->get("resume");
  if (parsed->positional.size() > 1)
    return fail(exit_bad_input, "train takes one CONFIG file, got " +
                                  std::to_string(parsed->positional.size()));
  if (parsed->positional.empty() && !resume)
    return fail(exit_bad_input,
                "usage: troupe train CONFIG [--set section.key=value ...] "
                "[--resume RUN_DIR] [--listen HOST:PORT]\n" +
                  describe_args(specs));
  // A resumed run continues with its own resolved config (overrides still apply).
  std::string path = parsed->positional.empty() ? std::string{} : parsed->positional[0];
  if (resume) {
    if (!std::filesystem::is_directory(*resume))
      return fail(exit_bad_input, "--resume " + *resume + ": not a run folder");
    path = (std::filesystem::path(*resume) / "config.toml").string();
  }
  // A run folder of an older troupe has the flat [algo] keys: its own config
  // is migrated (a config a person writes is refused with where each key went).
  std::vector<std::string> migrated;
  auto cfg = resume ? load_run_config(path, parsed->all("set"), &migrated)
                    : load_config(path, parsed->all("set"));
  if (!cfg)
    return fail(exit_bad_input, cfg.err().message);
  if (!migrated.empty())
    std::fprintf(stderr,
                 "troupe: %s: written by an older troupe; moved %zu [algo] key(s) "
                 "to [algo.%s]: %s\n",
                 path.c_str(), migrated.size(), cfg->get_string("algo.name").c_str(),
                 fmt::format("{}", fmt::join(migrated, ", ")).c_str());
  if (auto listen = parsed->get("listen"))
    cfg->set("cluster.listen", *listen, "--listen");
  auto out = train_until_done(*cfg, resume ? *resume : std::string{});
  end_console_progress_line(); // the session is closed: nothing logs any more
  // The learning curves, when the run got as far as writing metrics.
  if (!out.second.empty() &&
      std::filesystem::exists(std::filesystem::path(out.second) / "metrics.csv"))
    if (auto ok = write_curve_svg(
          out.second, (std::filesystem::path(out.second) / "curve.svg").string());
        !ok)
      std::fprintf(stderr, "troupe: curve.svg: %s\n", ok.err().message.c_str());
  if (!out.first) {
    // A config or a run folder that cannot be used (no run there, a damaged
    // or mismatched checkpoint) is bad input; a failure while training is not.
    const auto code = out.first.err().code;
    const bool bad = code == errc::not_found || code == errc::bad_config ||
                     code == errc::bad_input || code == errc::corrupt_file ||
                     code == errc::invalid_argument;
    return fail(bad ? exit_bad_input : exit_failure, out.first.err().message);
  }
  const auto& r = *out.first;
  std::printf("run folder: %s\nenv_steps %llu  updates %llu  return_mean_100 %.2f%s\n",
              r.run_dir.c_str(), static_cast<unsigned long long>(r.env_steps),
              static_cast<unsigned long long>(r.updates), r.return_mean_100,
              r.interrupted ? "  (interrupted)" : "");
  if (r.actor_system_left) {
    // A thread still waits inside the actor system's destructor (see
    // training_result): the process ends without running exit handlers
    // beside it. Everything is written and flushed.
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(0);
  }
  return 0;
}

} // namespace troupe::runtime
