#include "runtime/driver.hpp"

#include <exception>
#include <utility>

#include <fmt/format.h>

#include "learners/stats_view.hpp"
#include "runtime/ask.hpp"

namespace troupe::runtime {

namespace {

// How long one progress question may take (a busy actor's counters just stay
// as they were until the next refresh).
constexpr auto progress_ask_timeout = std::chrono::seconds(2);

// Asks the metrics actor's counters and the observation statistics' version.
run_progress read_progress(caf::scoped_actor& self, const cast_handles& h) {
  run_progress out;
  if (auto counters = ask_for<actors::metrics_counters>(
        self, h.metrics, progress_ask_timeout, actors::state_atom::value))
    out.counters = std::move(*counters);
  if (h.obs_norm)
    if (auto snap = ask_for<learners::stats_snapshot>(
          self, h.keeper, progress_ask_timeout, actors::snapshot_atom::value,
          std::string{"obs"}))
      out.stats_version = snap->version;
  return out;
}

} // namespace

// -- events' defaults ---------------------------------------------------------

status end_status(const run_end& end) {
  if (!end.ready)
    return make_error(errc::unavailable, "the run could not start: {}", end.failure);
  if (!end.failure.empty())
    return make_error(errc::unavailable, "the run failed: {}", end.failure);
  if (!end.write_failure.empty())
    return make_error(errc::io_error, "the run stopped: {}", end.write_failure);
  return {};
}

std::string run_events::on_ready(caf::scoped_actor&, const caf::actor&,
                                 const cast_handles&) {
  return {};
}

result<std::string> run_events::on_checkpoint(caf::scoped_actor&,
                                              const actors::cast_snapshot&) {
  return std::string{};
}

void run_events::on_log(actors::log_level, const std::string&) {}

void run_events::on_progress(const run_progress&) {}

status run_events::on_end(caf::scoped_actor&, run_end& end) {
  return end_status(end);
}

void run_events::on_done(const run_end&, const status&) {}

// -- the system ---------------------------------------------------------------

driver::driver(driver_settings settings) : settings_(std::move(settings)) {}

result<std::unique_ptr<driver>> driver::create(driver_settings settings) {
  std::unique_ptr<driver> d(new driver(std::move(settings)));
  try {
    d->cfg_ = std::make_unique<caf::actor_system_config>();
    actors::register_messages(*d->cfg_);
    if (d->settings_.configure)
      d->settings_.configure(*d->cfg_);
    d->cfg_->set("logger.verbosity", caf::atom("quiet"));
    d->sys_ = std::make_unique<caf::actor_system>(*d->cfg_);
  } catch (const std::exception& e) {
    return make_error(errc::unavailable, "{}", e.what());
  }
  // The constructor leaves this thread holding the system's logger (a
  // thread-local reference), and ~actor_system waits until the logger is
  // gone: a system ended on another thread while this one lived on would
  // wait forever. Nothing logs through it on this thread.
  caf::logger::set_current_actor_system(nullptr);
  return d;
}

driver::~driver() {
  if (sys_)
    (void)end_system();
}

caf::actor_system& driver::system() {
  return *sys_;
}

void driver::set_end(system_end how, std::chrono::milliseconds limit) {
  settings_.end = how;
  settings_.end_limit = limit;
}

bool driver::end_system() {
  if (!sys_)
    return false;
  return runtime::end_system(std::move(sys_), std::move(cfg_), settings_.end,
                             settings_.end_limit);
}

// -- the loop -----------------------------------------------------------------

status driver::run(caf::scoped_actor& self, run_settings settings, run_events& events) {
  auto& sys = *sys_;
  run_end end;
  status outcome;
  try {
    end.handles = settings.handles;
    // The keeper, the server and the metrics actor of a cast that made its
    // own end with the run; a worker's are the coordinator's.
    const bool own_shared_actors =
      !(settings.plan.cluster && settings.plan.cluster->existing);
    auto stop_flag =
      settings.stop_flag ? settings.stop_flag : std::make_shared<std::atomic<int>>(0);
    actors::supervisor_options sup_opts;
    sup_opts.cast = std::move(settings.plan);
    sup_opts.owner = caf::actor_cast<caf::actor>(self);
    sup_opts.stop_flag = stop_flag;
    sup_opts.log = settings.log;
    auto sup = actors::spawn_supervisor(sys, std::move(sup_opts));
    end.supervisor = sup;
    for (auto& a : settings.watched)
      self->monitor(a);
    self->monitor(sup);
    bool done = false;
    // A checkpoint while training goes on: the supervisor holds the cast at a
    // consistent cut and collects its random states; the events read the
    // keeper, the server and the metrics actor while it is held, then it goes
    // on. The supervisor ends right after sending its final snapshot (already
    // in our mailbox then), so a checkpoint due at that moment finds it gone
    // and is left to the final checkpoint, which is written from that snapshot.
    auto checkpoint = [&] {
      std::optional<actors::cast_snapshot> snap;
      self->request(sup, caf::infinite, actors::hold_atom::value)
        .receive([&](actors::cast_snapshot& s) { snap = std::move(s); },
                 [&](caf::error& e) {
                   if (e != caf::sec::request_receiver_down)
                     events.on_log(actors::log_level::error,
                                   "troupe: checkpoint failed: " +
                                     actors::error_message(sys, e));
                 });
      if (!snap)
        return;
      auto ok = events.on_checkpoint(self, *snap);
      self->send(sup, actors::release_atom::value);
      if (!ok && end.write_failure.empty()) {
        // A run that cannot save its progress stops rather than train on
        // unsaved: the previous checkpoint stays as it was.
        end.write_failure = "checkpoint failed: " + ok.err().message;
        events.on_log(actors::log_level::error,
                      fmt::format("troupe: {}; stopping the run", end.write_failure));
        self->send(sup, actors::stop_atom::value);
      }
    };
    auto last_refresh = std::chrono::steady_clock::now();
    auto stop_deadline = std::chrono::steady_clock::time_point::max();
    while (!done) {
      self->receive(
        [&](actors::ready_atom, caf::actor& keeper, caf::actor& server,
            caf::actor& metrics) {
          end.handles.keeper = keeper;
          end.handles.server = server;
          end.handles.metrics = metrics;
          end.ready = true;
          if (auto why = events.on_ready(self, sup, end.handles); !why.empty()) {
            events.on_log(actors::log_level::error,
                          fmt::format("troupe: {}; stopping the run", why));
            if (end.failure.empty())
              end.failure = why;
            self->send(sup, actors::stop_atom::value);
          }
          // A first checkpoint at once, so that a run killed at any moment resumes.
          if (settings.first_checkpoint)
            checkpoint();
        },
        [&](actors::ckpt_atom, uint64_t) {
          if (settings.periodic_checkpoints)
            checkpoint();
        },
        [&](actors::cast_snapshot& snap) { end.last_snapshot = std::move(snap); },
        [&](actors::done_atom, bool interrupted, std::string& why) {
          done = true;
          end.interrupted = interrupted;
          if (end.failure.empty()) // a problem at ready came first
            end.failure = why;
        },
        [&](actors::stop_atom) {
          // The run's end, told from outside (a worker's coordinator).
          if (end.stop_asked)
            return;
          end.stop_asked = true;
          stop_flag->store(1);
          if (settings.stop_grace.count() > 0)
            stop_deadline = std::chrono::steady_clock::now() + settings.stop_grace;
        },
        [&](caf::down_msg& down) {
          if (down.source == sup.address()) {
            if (done)
              return;
            done = true;
            end.failure =
              "the supervisor ended: " + actors::error_message(sys, down.reason);
            return;
          }
          for (auto& a : settings.watched)
            if (down.source == a.address()) {
              end.lost = actors::error_message(sys, down.reason);
              done = true;
            }
        },
        caf::after(progress_every) >> [] {});
      const auto now = std::chrono::steady_clock::now();
      if (!done && now >= stop_deadline) {
        end.grace_spent = true;
        done = true;
      }
      if (settings.refresh_progress && end.ready && !done &&
          now - last_refresh >= progress_every) {
        events.on_progress(read_progress(self, end.handles));
        last_refresh = std::chrono::steady_clock::now();
      }
    }
    if (settings.refresh_progress && end.ready && end.lost.empty())
      events.on_progress(read_progress(self, end.handles));
    outcome = events.on_end(self, end);
    if (own_shared_actors)
      for (auto* a : {&end.handles.metrics, &end.handles.server, &end.handles.keeper})
        if (*a)
          self->send_exit(*a, caf::exit_reason::user_shutdown);
  } catch (const std::exception& e) {
    outcome = make_error(errc::unavailable, "the run failed: {}", e.what());
  }
  events.on_done(end, outcome);
  return outcome;
}

} // namespace troupe::runtime
