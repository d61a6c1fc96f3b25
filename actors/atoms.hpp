// The actors layer's atoms, all in one place (CAF 0.17: at most 10 characters).
#pragma once

#include <caf/atom.hpp>

namespace troupe::actors {

// -- statistics keeper, views and relays ---------------------------------------
using declare_atom = caf::atom_constant<caf::atom("declare")>;     ///< declare a stream
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>; ///< a view subscribes
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;   ///< current statistics
using status_atom = caf::atom_constant<caf::atom("status")>;   ///< an actor's counters
using save_atom = caf::atom_constant<caf::atom("save")>;       ///< write state
using load_atom = caf::atom_constant<caf::atom("load")>;       ///< read state
using publish_atom = caf::atom_constant<caf::atom("publish")>; ///< publish now
using sync_atom = caf::atom_constant<caf::atom("sync")>;       ///< wait for merges

// -- at-most-once delivery across processes ------------------------------------
using ack_atom = caf::atom_constant<caf::atom("ack")>;     ///< cumulative ack
using fence_atom = caf::atom_constant<caf::atom("fence")>; ///< refuse an incarnation
using leave_atom = caf::atom_constant<caf::atom("leave")>; ///< a host leaves
using join_atom = caf::atom_constant<caf::atom("join")>;   ///< a host joins
using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>; ///< a host came back
using flush_atom = caf::atom_constant<caf::atom("flush")>; ///< resend what is unacked
using hosts_atom = caf::atom_constant<caf::atom("hosts")>; ///< per-host counters
using tally_atom = caf::atom_constant<caf::atom("tally")>; ///< a host's step tally

// -- environment runners -------------------------------------------------------
using collect_atom = caf::atom_constant<caf::atom("collect")>; ///< ask for a batch
/// A runner's message to itself between two batches (status stays answered).
using next_atom = caf::atom_constant<caf::atom("next_batch")>;

// -- training: parameter server, learners, metrics, supervisor -----------------
using gradient_atom = caf::atom_constant<caf::atom("gradient")>; ///< a gradient
using weights_atom = caf::atom_constant<caf::atom("weights")>;   ///< current weights
using state_atom = caf::atom_constant<caf::atom("state")>;       ///< an actor's state
using stop_atom = caf::atom_constant<caf::atom("stop")>;         ///< stop now
using done_atom = caf::atom_constant<caf::atom("done")>;         ///< the run ended
using ckpt_atom = caf::atom_constant<caf::atom("ckpt")>;         ///< a checkpoint
using row_atom = caf::atom_constant<caf::atom("row")>;           ///< a metrics row
using ready_atom = caf::atom_constant<caf::atom("ready")>;       ///< the cast is up
using runner_atom = caf::atom_constant<caf::atom("runner")>;     ///< a runner registers
/// To a guest runner, from a learner: (consumer_atom, uint64_t handoff), its
/// batches go to the sender from now on unless a later hand-off came first.
using consumer_atom = caf::atom_constant<caf::atom("consumer")>;
using learners_atom = caf::atom_constant<caf::atom("learners")>; ///< the live learners
/// A checkpoint's consistent cut: runners stop between batches, learners learn
/// what they were sent, then release_atom lets the cast go on.
using hold_atom = caf::atom_constant<caf::atom("hold")>;
using release_atom = caf::atom_constant<caf::atom("release")>; ///< end of a hold

} // namespace troupe::actors
