#include "actors/server_state.hpp"

#include <cmath>

#include <fmt/format.h>

namespace troupe::actors {

std::string first_non_finite(const gradient_update& g) {
  for (size_t i = 0; i < g.grad.size(); ++i)
    if (!std::isfinite(g.grad[i]))
      return fmt::format("gradient[{}] is {}", i, g.grad[i]);
  for (size_t i = 0; i < g.buffers.size(); ++i)
    if (!std::isfinite(g.buffers[i]))
      return fmt::format("batch-norm buffer[{}] is {}", i, g.buffers[i]);
  return {};
}

parameter_server_state server_snapshot(const parameter_server_status& counters,
                                       learners::adam_optimizer& adam,
                                       const std::vector<float>& params,
                                       const std::vector<float>& buffers) {
  parameter_server_state out;
  out.version = counters.version;
  out.adam_steps = adam.steps();
  out.params = params;
  out.buffers = buffers;
  out.adam_m = adam.first_moment();
  out.adam_v = adam.second_moment();
  out.counters = counters;
  return out;
}

std::string restored_state_mismatch(const std::string& who,
                                    const parameter_server_state& in, size_t params,
                                    size_t buffers) {
  if (in.params.size() != params || in.adam_m.size() != params ||
      in.adam_v.size() != params || in.buffers.size() != buffers)
    return fmt::format("{}: restored state has {} parameters and {} buffers, expected {} "
                       "and {}",
                       who, in.params.size(), in.buffers.size(), params, buffers);
  return {};
}

} // namespace troupe::actors
