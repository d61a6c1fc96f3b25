// What the parameter server's replicas need of the hosts' data plane: an
// all-reduce and a broadcast among a fixed group, with errors as values
// (docs/cluster.md, "The data plane"). The Gloo implementation is in
// edge/gloo_collective.hpp; the actors know only this interface.
#pragma once

#include <cstddef>
#include <string>

#include "base/error.hpp"

namespace troupe::actors {

/// A fixed group of processes (ranks 0 .. size-1) that reduce and broadcast
/// buffers together. Every member calls the same operations in the same
/// order; an operation that does not complete in time fails on every member
/// that waits for it.
class collective {
public:
  virtual ~collective() = default;

  /// This member's rank, from 0.
  virtual size_t rank() const = 0;

  /// The number of members.
  virtual size_t size() const = 0;

  /// Sums `count` doubles element-wise over every member, in place; every
  /// member ends with the same bytes. An error names the operation, the
  /// group and the peer where the transport says which.
  virtual status allreduce_sum(double* data, size_t count) = 0;

  /// Copies `bytes` bytes of member `root`'s `data` into every other
  /// member's `data`.
  virtual status broadcast(void* data, size_t bytes, size_t root) = 0;

  /// The group in words for messages ("rank 1 of 3, epoch 4").
  virtual std::string describe() const = 0;

  /// Waits until the group can run operations (a group formed elsewhere
  /// first); rank() and size() hold from then on. An error when it cannot.
  virtual status ready() { return {}; }

  /// Closes this member's connections, from any thread: an operation under
  /// way here fails at once, and the other members' fail as they notice. For
  /// a group that another replaces.
  virtual void abort() {}

  /// After a failed operation (`why`): leaves the broken group and waits
  /// until the members still alive have formed the next one (new ranks, a
  /// new size). An error when that cannot happen; a fixed group cannot.
  virtual status reform(const std::string& why) {
    return make_error(errc::unavailable, "{}: this group does not form again ({})",
                      describe(), why);
  }

  /// Whether reform() can succeed: a group whose membership changes (a new
  /// epoch at each join and loss) may see any operation fail because a newer
  /// group replaced it, and then forms again.
  virtual bool forms_again() const { return false; }
};

} // namespace troupe::actors
