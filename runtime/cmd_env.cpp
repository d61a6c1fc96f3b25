// Placeholder until the environments issue lands; replaced by the real command.
#include "runtime/commands.hpp"
namespace troupe::runtime {
int cmd_env_list(const args_t&) { return fail(exit_failure, "not built yet (environments issue)"); }
int cmd_env_replay(const args_t&) { return fail(exit_failure, "not built yet (environments issue)"); }
} // namespace troupe::runtime
