// Placeholder until the foundation issue lands; replaced by the real command.
#include "runtime/commands.hpp"
namespace troupe::runtime {
int cmd_stats_compute(const args_t&) { return fail(exit_failure, "not built yet (foundation issue)"); }
} // namespace troupe::runtime
