// At-most-once delivery with fencing: which sequence numbers each sender's
// life delivered on each channel, and which lives are fenced.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

namespace troupe::base {

/// One life of a sender: its name and the nonzero incarnation it drew.
using sender_id = std::pair<std::string, uint64_t>;

/// (sender name, incarnation, channel): one ordered series of deliveries.
using delivery_key = std::tuple<std::string, uint64_t, std::string>;

/// What became of a delivery.
enum class delivery_verdict {
  accepted,  ///< new: recorded as the channel's last accepted number
  duplicate, ///< every number it covers was accepted already
  gap,       ///< gaps refused, and it does not start right after the last accepted one
  fenced,    ///< its sender's incarnation is fenced
};

/// Whether a channel accepts a delivery that skips sequence numbers.
enum class sequence_gaps {
  allowed, ///< anything above the last accepted number (a resend replaces nothing)
  refused, ///< only the number right after the last accepted one (resends fill gaps)
};

/// Accepts (sender, incarnation, sequence) at most once per channel, refuses
/// fenced incarnations, and holds both tables for checkpoints.
class delivery_ledger {
public:
  /// Judges the delivery of sequence numbers [first, last] on `channel` of
  /// `sender`, in this order: fenced, duplicate (last at or below the last
  /// accepted), gap (gaps refused and first is not the next number); an
  /// accepted delivery's `last` becomes the channel's last accepted number.
  delivery_verdict admit(const sender_id& sender, const std::string& channel,
                         uint64_t first, uint64_t last, sequence_gaps gaps);

  /// The last accepted number of `channel` of `sender`; 0 when none.
  [[nodiscard]] uint64_t last_accepted(const sender_id& sender,
                                       const std::string& channel) const;

  /// The last accepted number of every channel of `sender`.
  [[nodiscard]] std::map<std::string, uint64_t>
  channels_of(const sender_id& sender) const;

  /// Fences `sender`: every later delivery of it is refused; false if it was already.
  bool fence(const sender_id& sender) { return fenced_.insert(sender).second; }

  /// Whether `sender` is fenced.
  [[nodiscard]] bool is_fenced(const sender_id& sender) const {
    return fenced_.count(sender) > 0;
  }

  /// Every channel's last accepted number, in key order (for checkpoints).
  [[nodiscard]] const std::map<delivery_key, uint64_t>& accepted() const noexcept {
    return accepted_;
  }

  /// The fenced senders, in order (for checkpoints).
  [[nodiscard]] const std::set<sender_id>& fenced() const noexcept { return fenced_; }

  /// Replaces both tables (a checkpoint's, validated by its reader).
  void restore(std::map<delivery_key, uint64_t> accepted, std::set<sender_id> fenced) {
    accepted_ = std::move(accepted);
    fenced_ = std::move(fenced);
  }

private:
  std::map<delivery_key, uint64_t> accepted_;
  std::set<sender_id> fenced_;
};

} // namespace troupe::base
