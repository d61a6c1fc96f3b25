// A small command-line parser: positional arguments plus declared options.
// Unknown options fail and list the valid ones.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace troupe::runtime {

/// One option a command accepts.
struct arg_spec {
  std::string name;        ///< without dashes, e.g. "batch-rows"
  bool takes_value = true; ///< false for flags such as --json
  bool repeatable = false; ///< may be given more than once (--set)
  std::string help;        ///< one line
};

/// The parsed command line of one command.
class parsed_args {
public:
  std::vector<std::string> positional;

  bool flag(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;

  /// An integer option in [min, max]; default when absent.
  result<int64_t> get_int(const std::string& name, int64_t fallback, int64_t min,
                          int64_t max) const;
  /// A float option in [min, max]; default when absent.
  result<double> get_float(const std::string& name, double fallback, double min,
                           double max) const;

  void add(const std::string& name, std::string v) {
    values_.emplace(name, std::move(v));
  }

private:
  std::multimap<std::string, std::string> values_;
};

/// Parses `args` for command `command` (used in messages), accepting
/// `--name value` and `--name=value`, with `--` ending the options.
result<parsed_args> parse_args(const std::string& command,
                               const std::vector<std::string>& args,
                               const std::vector<arg_spec>& specs);

/// "  --name VALUE   help" lines for usage messages.
std::string describe_args(const std::vector<arg_spec>& specs);

} // namespace troupe::runtime
