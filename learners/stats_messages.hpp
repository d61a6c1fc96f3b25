// The plain types the statistics keeper's state takes and gives: a batch's
// moments delta, a stream's declaration and counters, a sender's acks.
// Their inspect overloads and registration are in actors/messages.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe::learners {

/// The moments of one batch (never a worker's accumulated state), sent by a
/// worker to the statistics keeper. A sequenced delta (incarnation != 0)
/// covers the sender's sequence numbers [seq_first, seq_last] of its stream
/// (one batch: seq_first == seq_last; a resend merges several into one); the
/// keeper merges it at most once and in order per (worker, incarnation,
/// stream). Incarnation 0 is unsequenced: merged as it comes, never
/// deduplicated (in-process senders that talk to the keeper directly).
struct moments_delta {
  std::string stream;       ///< name of the statistics stream, e.g. "obs"
  std::string worker;       ///< who computed it (host/sender name), named in logs
  uint64_t count = 0;       ///< samples in the batch
  std::vector<double> mean; ///< per-dimension batch mean
  std::vector<double> m2;   ///< per-dimension sum of squared deviations
  uint64_t incarnation = 0; ///< random nonzero id of the sender's life; 0: unsequenced
  uint64_t seq_first = 0;   ///< first sequence number covered (from 1)
  uint64_t seq_last = 0;    ///< last sequence number covered (>= seq_first)
};

/// Every stream's cumulative ack of one (worker, incarnation): the answer to
/// (ack_atom, worker, incarnation) and (fence_atom, worker, incarnation).
struct delta_acks {
  std::string worker;       ///< sender name
  uint64_t incarnation = 0; ///< sender incarnation
  bool fenced = false;      ///< the incarnation is fenced: nothing more merges
  std::map<std::string, uint64_t> last; ///< stream -> last merged sequence number
};

/// A stream's declaration: name, dimension and mode.
struct stream_decl {
  std::string name;                ///< stream name
  uint64_t dim = 0;                ///< number of dimensions
  std::string mode = "cumulative"; ///< "cumulative" or "ema"
  double momentum = 0.99;          ///< ema only: weight of the running value
};

/// Counters of one stream, for tests, metrics and logs.
struct stream_status {
  std::string name;       ///< stream name
  uint64_t dim = 0;       ///< number of dimensions
  uint64_t version = 0;   ///< merges applied (or loaded)
  uint64_t count = 0;     ///< samples merged
  uint64_t published = 0; ///< version of the latest published snapshot
  uint64_t rejected = 0;  ///< deltas rejected
  std::map<std::string, uint64_t> rejected_by_worker; ///< worker -> rejected deltas
  uint64_t duplicates = 0; ///< sequenced deltas dropped as already merged
  std::map<std::string, uint64_t> duplicates_by_worker; ///< worker -> duplicates
  uint64_t out_of_order = 0; ///< dropped: not starting right after the last merged one
  uint64_t fenced = 0;       ///< dropped: from a fenced incarnation
  std::map<std::string, uint64_t> fenced_by_worker; ///< worker -> fenced drops
  /// The keeper's totals only: "WORKER/INCARNATION" (hex) -> samples of that
  /// sender's sequenced deltas merged, all streams, since the keeper started.
  std::map<std::string, uint64_t> samples_by_sender;
};

} // namespace troupe::learners
