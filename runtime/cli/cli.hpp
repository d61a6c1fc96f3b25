// The `troupe` command line: a table of commands selected by their words.
#pragma once

#include <string>
#include <vector>

#include "runtime/cli/commands.hpp"

namespace troupe::runtime {

/// One command: the words that select it, its usage and what it does.
struct command {
  std::vector<std::string> words; ///< e.g. {"stats", "compute"}
  std::string usage;              ///< arguments after the words
  std::string summary;            ///< one line
  int (*run)(const args_t& args); ///< gets the arguments after the words
};

/// Every command, in the order `troupe help` lists them.
const std::vector<command>& commands();

/// Dispatches argv to a command; returns the exit status.
int run_cli(int argc, char** argv);

} // namespace troupe::runtime
