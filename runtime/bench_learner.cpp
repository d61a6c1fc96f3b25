// Placeholder until the learners issue lands; replaced by the real command.
#include "runtime/commands.hpp"
namespace troupe::runtime {
int bench_learner(const args_t&) { return fail(exit_failure, "not built yet (learners issue)"); }
} // namespace troupe::runtime
