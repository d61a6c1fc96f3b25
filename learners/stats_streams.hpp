// The statistics keeper's state as plain C++: named streams of running
// moments, the validation and merging of deltas, snapshots, and the
// versioned, checksummed state file. The actor in actors/stats_keeper.hpp wraps it;
// checkpoints save and load it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/delivery_ledger.hpp"
#include "base/error.hpp"
#include "kernels/moments.hpp"
#include "learners/stats_messages.hpp"
#include "learners/stats_view.hpp"

namespace troupe::learners {

/// How a stream combines deltas.
enum class stats_mode : uint32_t {
  cumulative = 0, ///< exact moments of all data seen (Chan merge)
  ema = 1,        ///< running = momentum * running + (1 - momentum) * batch
};

/// Parses "cumulative" or "ema".
result<stats_mode> parse_stats_mode(const std::string& text);

/// "cumulative" or "ema".
const char* to_string(stats_mode mode) noexcept;

/// One named stream of running moments.
struct stats_stream {
  std::string name; ///< stream name
  stats_mode mode = stats_mode::cumulative;
  double momentum = 0.99;      ///< ema only
  uint64_t version = 0;        ///< merges applied
  kernels::moments acc;        ///< cumulative: exact moments; ema: count and running mean
  std::vector<double> ema_var; ///< ema only: running population variance
  uint64_t rejected = 0;       ///< deltas rejected
  std::map<std::string, uint64_t> rejected_by_worker;
  uint64_t duplicates = 0; ///< sequenced deltas dropped as already merged
  std::map<std::string, uint64_t> duplicates_by_worker;
  uint64_t out_of_order = 0; ///< dropped: gap or partial overlap
  uint64_t fenced = 0;       ///< dropped: fenced incarnation
  std::map<std::string, uint64_t> fenced_by_worker;

  size_t dim() const noexcept { return acc.dim(); }
};

/// What happened to a delta that passed validation.
enum class delta_outcome {
  merged,       ///< merged (and, if sequenced, acknowledged)
  duplicate,    ///< sequenced, every number it covers was merged already: dropped
  out_of_order, ///< sequenced, does not start right after the last merged one: dropped
  fenced,       ///< its incarnation is fenced: dropped
};

/// One sender of sequenced deltas: (worker, incarnation).
using sender_id = base::sender_id;

/// The set of streams a statistics keeper owns, and the per-sender table of
/// sequenced deltas (last merged sequence per (worker, incarnation, stream),
/// and the fenced incarnations).
class stats_streams {
public:
  /// Format version of the state file written by save() (2: with the sender
  /// table; version 1 files still load, with an empty table).
  static constexpr uint32_t file_version = 2;

  /// Declares a stream; declaring an existing stream again with the same
  /// dimension and mode is a no-op, with another one an error.
  status declare(const stream_decl& decl);

  /// Validates and merges one delta. An unknown stream, a wrong dimension, a
  /// zero count, a negative m2 or a non-finite number rejects the delta: it
  /// is counted (per stream and per worker), nothing is merged, and the error
  /// names the worker, the stream, the rule and the value.
  /// A sequenced delta (incarnation != 0) merges only when its range starts
  /// right after the last merged sequence of its (worker, incarnation,
  /// stream); otherwise it is dropped and counted as a duplicate (nothing
  /// new), out of order (a gap or a partial overlap: the sender's resend
  /// fills it) or fenced. `outcome`, when given, says which.
  status merge(const moments_delta& delta, delta_outcome* outcome = nullptr);

  /// The last merged sequence of every stream of `sender`.
  delta_acks acks_of(const sender_id& sender) const;

  /// Fences `sender`: every later delta of it is dropped and counted.
  void fence(const sender_id& sender) { ledger_.fence(sender); }

  /// Whether `sender` is fenced.
  bool is_fenced(const sender_id& sender) const { return ledger_.is_fenced(sender); }

  /// The current snapshot of a stream (var is the population variance; 1
  /// before anything is merged, so that normalizing with it is the identity).
  result<stats_snapshot> snapshot(const std::string& name) const;

  /// Writes the current snapshot of `s` into `out`, reusing its buffers.
  static void snapshot_into(const stats_stream& s, stats_snapshot& out);

  /// Counters of a stream.
  result<stream_status> status_of(const std::string& name) const;

  /// The stream named `name`, or nullptr.
  const stats_stream* find(const std::string& name) const;

  /// Names of all streams, sorted.
  std::vector<std::string> names() const;

  /// Rejected deltas that named no known stream.
  uint64_t rejected_unknown_stream() const noexcept { return rejected_unknown_; }

  /// Writes every stream to `path` (temporary file, then rename): magic,
  /// format version, payload, FNV-1a 64 checksum of the payload.
  troupe::status save(const std::string& path) const;

  /// Replaces every stream with the contents of `path`. On any error
  /// (missing file, wrong magic, other version, bad checksum, truncated or
  /// inconsistent payload) the current streams are left unchanged.
  troupe::status load(const std::string& path);

  /// The per-sender table: (worker, incarnation, stream) -> last merged sequence.
  const std::map<std::tuple<std::string, uint64_t, std::string>, uint64_t>&
  sequences() const noexcept {
    return ledger_.accepted();
  }

  /// The fenced senders.
  const std::set<sender_id>& fenced() const noexcept { return ledger_.fenced(); }

  /// Samples of the sequenced deltas of `sender` merged since these streams
  /// were created or last loaded (all streams; not part of the state file).
  uint64_t samples_merged_from(const sender_id& sender) const {
    auto it = merged_samples_.find(sender);
    return it == merged_samples_.end() ? 0 : it->second;
  }

  /// samples_merged_from of every sender that merged something.
  const std::map<sender_id, uint64_t>& samples_merged() const noexcept {
    return merged_samples_;
  }

private:
  std::unordered_map<std::string, stats_stream> streams_;
  base::delivery_ledger ledger_; // (worker, incarnation, stream): in order, at most once
  std::map<sender_id, uint64_t> merged_samples_;
  uint64_t rejected_unknown_ = 0;
};

} // namespace troupe::learners
