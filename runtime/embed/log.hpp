// The embedding API's log: the process-wide callback of
// troupe_set_log_callback, and the sink a session hands to the runtime.
#pragma once

#include <troupe/troupe.h>
#include <troupe/troupe.hpp>

#include "actors/log.hpp"

namespace troupe::embed {

/// Sets the process-wide callback (NULL: none); see troupe_set_log_callback.
void set_process_log(troupe_log_callback callback, void* user) noexcept;

/// The runtime sink of a session: `own` when set (an exception it throws is
/// dropped), else the process-wide callback, read at each line.
actors::log_sink session_log(const log_sink& own);

} // namespace troupe::embed
