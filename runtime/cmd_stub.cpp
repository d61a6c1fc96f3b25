#include "runtime/commands.hpp"
namespace troupe::runtime {
int cmd_stats_compute(const args_t&) { return fail(1, "not yet"); }
int cmd_bench(const args_t&) { return fail(1, "not yet"); }
}
