// The runner side of the collect protocol, written once for every actor that
// stands in a learner's runner slot: the environment runner
// (actors/env_runner.hpp) and the game feeder (actors/game_feeder.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "base/error.hpp"
#include "kernels/moments.hpp"

namespace troupe::actors {

/// The open (collect_atom, n) request of a runner slot: the batches still due
/// and the promise of the reply (the number of batches sent).
class collect_request {
public:
  /// Answers (collect_atom, batches) for the actor `who` names ("env runner
  /// 'x'"): an error while a request is open, 0 at once for 0 batches, else
  /// opens the request, calls `start` (which begins making batches) and
  /// returns the reply's promise.
  template <class Start>
  caf::result<uint64_t> open(caf::local_actor* self, uint64_t batches,
                             const std::string& who, Start&& start) {
    if (open_)
      return to_caf_error(
        make_error(errc::invalid_argument, "{} is already collecting", who));
    if (batches == 0)
      return uint64_t{0};
    open_ = true;
    remaining_ = batches;
    sent_ = 0;
    promise_ = self->make_response_promise<uint64_t>();
    std::forward<Start>(start)();
    return promise_;
  }

  /// Whether a request is open (batches are due).
  bool is_open() const noexcept { return open_; }

  /// Counts a batch sent for the open request; after its last, replies with
  /// the count and closes the request. Returns whether more batches are due.
  bool sent() {
    ++sent_;
    if (--remaining_ > 0)
      return true;
    open_ = false;
    promise_.deliver(sent_);
    return false;
  }

  /// Replies to the open request with `e` and closes it; nothing when none is open.
  void fail(const caf::error& e) {
    if (!open_)
      return;
    open_ = false;
    promise_.deliver(e);
  }

private:
  bool open_ = false;
  uint64_t remaining_ = 0;
  uint64_t sent_ = 0;
  caf::typed_response_promise<uint64_t> promise_;
};

/// Declares statistics stream `stream` to `keeper` with (declare_atom,
/// decl...) before the runner's first delta (messages between two actors keep
/// their order); a failure is logged to `log`, naming `who` and the stream.
template <class... Decl>
void declare_stream(caf::event_based_actor* self, const caf::actor& keeper,
                    const std::string& who, const std::string& stream, log_sink log,
                    Decl&&... decl) {
  self->request(keeper, caf::infinite, declare_atom::value, std::forward<Decl>(decl)...)
    .then([](uint64_t) {},
          [self, who, stream, log](caf::error& e) {
            write_log(log, fmt::format("{}: declaring stream '{}' failed: {}", who,
                                       stream, error_message(self->system(), e)));
          });
}

/// Sends the moments `m` of one batch to `keeper`'s stream `stream`, from `sender`.
void send_moments(caf::event_based_actor* self, const caf::actor& keeper,
                  const std::string& stream, const std::string& sender,
                  const kernels::moments& m);

/// A batch of `steps` x `num_envs` transitions numbered `sequence`, from
/// `runner` on `env_id`: every array sized for that shape (observations with
/// the bootstrap row, steps + 1 rows) and zero, the rest defaulted.
trajectory_batch shaped_batch(std::string runner, std::string env_id, uint64_t sequence,
                              size_t num_envs, size_t steps, size_t obs_dim,
                              size_t action_dim);

/// Counts batch `b` in `status` as sent: one batch, its steps x num_envs
/// environment steps, its finished episodes and `non_finite` bad values.
void count_batch(env_runner_status& status, const trajectory_batch& b,
                 uint64_t non_finite) noexcept;

} // namespace troupe::actors
