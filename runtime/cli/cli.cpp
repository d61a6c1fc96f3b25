#include "runtime/cli/cli.hpp"

#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "runtime/config.hpp"

namespace troupe::runtime {

namespace {

int cmd_help(const args_t&);

} // namespace

const std::vector<command>& commands() {
  static const std::vector<command> table = {
    {{"train"},
     "CONFIG [--set section.key=value ...] [--resume RUN_DIR] [--listen HOST:PORT]",
     "train from a config file into a run folder (metrics, checkpoints, curve)",
     cmd_train},
    {{"worker"},
     "(--connect HOST:PORT [--run RUN] | --connect-file CLUSTER_JSON) [--learners N] "
     "[--runners-per-learner M] "
     "[--device D] [--name NAME]",
     "join a run across processes: host learners and runners for its coordinator",
     cmd_worker},
    {{"eval"},
     "CHECKPOINT [--env ID] [--episodes N] [--seed S] [--stochastic] [--json]",
     "run evaluation episodes with a checkpoint's policy",
     cmd_eval},
    {{"plot"},
     "RUN_DIR... [--out FILE]",
     "write learning curves of one or more runs as an SVG",
     cmd_plot},
    {{"check"},
     "FILE [--set section.key=value ...]",
     "validate a config file and print the resolved config",
     cmd_check},
    {{"config", "describe"},
     "",
     "print every config option with its type, default, range and meaning",
     cmd_config_describe},
    {{"stats", "compute"},
     "FILE... [--batch-rows N] [--mode cumulative|ema] [--momentum M] [--json]",
     "normalization statistics (count, mean, variance) of CSV datasets",
     cmd_stats_compute},
    {{"env", "list"},
     "",
     "list the registered environments with their spaces and time limits",
     cmd_env_list},
    {{"env", "replay"},
     "--env ID --state=V1,V2,... [--elapsed N] --actions FILE [--json]",
     "set an environment's state and replay actions, printing each step",
     cmd_env_replay},
    {{"policy", "act"},
     "--checkpoint FILE --obs FILE.csv [--json]",
     "print a checkpoint's deterministic outputs for observations",
     cmd_policy_act},
    {{"remote", "keygen"},
     "PATH",
     "write a CURVE key pair for remote environments: the secret key to PATH (mode "
     "0600), "
     "the public key to PATH.pub",
     cmd_remote_keygen},
    {{"bench"},
     "AREA [--json] (areas: stats, envs, learner, embed, remote)",
     "measure throughput and latency; see docs/benchmarks.md",
     cmd_bench},
    {{"version"}, "", "print the version", cmd_version},
    {{"help"}, "", "list the commands", cmd_help},
  };
  return table;
}

namespace {

int cmd_help(const args_t&) {
  std::string out = "usage: troupe COMMAND [ARGS...]\n\ncommands:\n";
  for (auto& c : commands()) {
    auto head = fmt::format("{}", fmt::join(c.words, " "));
    out += fmt::format("  {:<16} {}\n  {:<16} {}\n", head, c.summary, "",
                       c.usage.empty() ? "(no arguments)" : c.usage);
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

} // namespace

int fail(int status, const std::string& message) {
  std::fprintf(stderr, "troupe: %s\n", message.c_str());
  return status;
}

int cmd_version(const args_t&) {
  std::puts("troupe 0.1.0");
  return 0;
}

int run_cli(int argc, char** argv) {
  args_t args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h")
    return commands().back().run({});
  const command* best = nullptr;
  for (auto& c : commands()) {
    if (c.words.size() > args.size())
      continue;
    bool match = true;
    for (size_t i = 0; i < c.words.size() && match; ++i)
      match = c.words[i] == args[i];
    if (match && (!best || c.words.size() > best->words.size()))
      best = &c;
  }
  if (!best) {
    std::vector<std::string> names;
    for (auto& c : commands())
      names.push_back(fmt::format("{}", fmt::join(c.words, " ")));
    std::string given = args[0];
    if (args.size() > 1)
      given += " " + args[1];
    auto hint = nearest(given, names);
    if (hint.empty())
      hint = nearest(args[0], names);
    return fail(
      exit_bad_input,
      fmt::format("unknown command '{}'{}; run 'troupe help' for the list", given,
                  hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
  }
  args_t rest(args.begin() + static_cast<std::ptrdiff_t>(best->words.size()), args.end());
  for (auto& a : rest) {
    if (a == "--")
      break;
    if (a == "--help" || a == "-h") {
      std::printf("usage: troupe %s %s\n%s\n",
                  fmt::format("{}", fmt::join(best->words, " ")).c_str(),
                  best->usage.c_str(), best->summary.c_str());
      return 0;
    }
  }
  try {
    return best->run(rest);
  } catch (const std::exception& e) {
    return fail(exit_failure, fmt::format("internal error: {}", e.what()));
  }
}

} // namespace troupe::runtime
