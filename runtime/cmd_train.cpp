// Placeholder until the training issue lands; replaced by the real command.
#include "runtime/commands.hpp"
namespace troupe::runtime {
int cmd_train(const args_t&) { return fail(exit_failure, "not built yet (training issue)"); }
} // namespace troupe::runtime
