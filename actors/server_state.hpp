// What the parameter server and its replica share about their state: the
// check of an incoming gradient for non-finite numbers, the snapshot a
// checkpoint keeps, and the check of a restored one.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "learners/optimizer.hpp"

namespace troupe::actors {

/// Where a gradient (or its buffers) holds a NaN or an infinity, in words;
/// empty if none.
std::string first_non_finite(const gradient_update& g);

/// Everything a server owns, for a checkpoint: `counters` (whose version is
/// the state's), the weights, the buffers and Adam's state.
parameter_server_state server_snapshot(const parameter_server_status& counters,
                                       learners::adam_optimizer& adam,
                                       const std::vector<float>& params,
                                       const std::vector<float>& buffers);

/// Why a restored state does not fit a server of `params` parameters and
/// `buffers` buffers, starting with `who`; empty if it fits.
std::string restored_state_mismatch(const std::string& who,
                                    const parameter_server_state& in, size_t params,
                                    size_t buffers);

} // namespace troupe::actors
