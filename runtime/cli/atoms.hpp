// The command line's own atoms, in one place (the actors' are in actors/atoms.hpp).
#pragma once

#include <caf/atom.hpp>

namespace troupe::runtime {

using run_atom = caf::atom_constant<caf::atom("run")>;   ///< bench stats: start a sender
using tick_atom = caf::atom_constant<caf::atom("tick")>; ///< bench stats: one more batch

} // namespace troupe::runtime
