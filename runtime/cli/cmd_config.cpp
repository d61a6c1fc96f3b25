// `troupe config describe` and `troupe check`.
#include <cstdio>

#include <fmt/format.h>

#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/config.hpp"

namespace troupe::runtime {

int cmd_config_describe(const args_t& args) {
  auto parsed = parse_args("troupe config describe", args, {});
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  if (!parsed->positional.empty())
    return fail(exit_bad_input, fmt::format("config describe: unexpected argument '{}'",
                                            parsed->positional[0]));
  std::fputs(describe_schema().c_str(), stdout);
  return 0;
}

int cmd_check(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"set", true, true, "override a config value: section.key=value"},
  };
  auto parsed = parse_args("troupe check", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  if (parsed->positional.size() != 1)
    return fail(exit_bad_input,
                fmt::format("usage: troupe check FILE [--set section.key=value ...]\n{}",
                            describe_args(specs)));
  auto cfg = load_config(parsed->positional[0], parsed->all("set"));
  if (!cfg) {
    // Each problem on its own line, each already naming its place.
    std::fprintf(stderr, "%s\n", cfg.err().message.c_str());
    return exit_bad_input;
  }
  std::fputs(cfg->to_toml().c_str(), stdout);
  return 0;
}

} // namespace troupe::runtime
