// `troupe bench AREA [--json]`: dispatches to one benchmark per area.
#include <fmt/format.h>

#include "runtime/cli/commands.hpp"
#include "runtime/config.hpp"

namespace troupe::runtime {

namespace {

struct bench_area {
  const char* name;
  int (*run)(const args_t&);
};

constexpr bench_area areas[] = {
  {"stats", bench_stats}, {"envs", bench_envs},     {"learner", bench_learner},
  {"embed", bench_embed}, {"remote", bench_remote}, {"allreduce", bench_allreduce},
};

} // namespace

int cmd_bench(const args_t& args) {
  std::vector<std::string> names;
  for (auto& a : areas)
    names.emplace_back(a.name);
  if (args.empty() || args[0].rfind("--", 0) == 0)
    return fail(exit_bad_input,
                fmt::format("usage: troupe bench AREA [--json] (areas: {})",
                            fmt::join(names, ", ")));
  for (auto& a : areas)
    if (args[0] == a.name)
      return a.run(args_t(args.begin() + 1, args.end()));
  auto hint = nearest(args[0], names);
  return fail(exit_bad_input,
              fmt::format("bench: unknown area '{}'{} (areas: {})", args[0],
                          hint.empty() ? "" : fmt::format(", did you mean '{}'?", hint),
                          fmt::join(names, ", ")));
}

} // namespace troupe::runtime
