// troupe::session and troupe::agent over the runtime of today.
//
// TODO(integrator): this is a stand-in until runtime/session.hpp (helper
// "split") and actors/game_agent.hpp (helper "agent") are merged. Here a
// session validates its config with runtime's loader and runs
// runtime::run_training on a thread it owns; the calls that need the
// internal session (request_stop, save_checkpoint, live progress counters)
// and every agent call return errc::unavailable "not wired yet".
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include <troupe/troupe.hpp>

#include "envs/registry.hpp"
#include "kernels/error.hpp"
#include "runtime/config.hpp"
#include "runtime/embed/guard.hpp"
#include "runtime/train.hpp"

namespace troupe {

namespace {

// The checks the loader leaves to run time that a session makes at open: the
// environment id must be registered.
status check_opened(const runtime::config& cfg) {
  const auto& id = cfg.get_string("env.id");
  if (auto spec = envs::find_spec(id); !spec)
    return make_error(errc::bad_config, "{}: env.id: {}", cfg.origin("env.id"),
                      spec.err().message);
  return ok_status();
}

error not_wired(const char* call) {
  return error{errc::unavailable, std::string(call) +
                                    ": not wired yet (needs the internal session or game "
                                    "agent, which this build does not have)"};
}

} // namespace

const char* version() noexcept {
  return TROUPE_VERSION_STRING;
}

// -- session ----------------------------------------------------------------------

struct session::impl {
  runtime::config cfg;
  std::string resume_dir;

  std::mutex mutex;
  std::condition_variable changed;
  bool started = false;
  bool finished = false;
  bool closed = false;
  std::optional<result<runtime::training_result>> outcome;
  std::thread worker;

  ~impl() {
    if (worker.joinable())
      worker.join();
  }

  troupe::progress snapshot() {
    std::lock_guard<std::mutex> lock(mutex);
    troupe::progress p;
    p.running = started && !finished;
    p.finished = finished;
    p.return_mean_100 = std::nan("");
    if (outcome && outcome->ok()) {
      p.env_steps = (*outcome)->env_steps;
      p.updates = (*outcome)->updates;
      p.return_mean_100 = (*outcome)->return_mean_100;
    }
    return p;
  }
};

session::session(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
session::session(session&&) noexcept = default;
session& session::operator=(session&&) noexcept = default;
session::~session() = default;

result<session> session::open(const std::string& config_path,
                              const std::vector<std::string>& overrides) {
  return embed::guarded<session>("session::open", [&]() -> result<session> {
    auto cfg = runtime::load_config(config_path, overrides);
    if (!cfg)
      return cfg.err();
    if (auto ok = check_opened(*cfg); !ok)
      return ok.err();
    auto p = std::make_unique<impl>();
    p->cfg = std::move(*cfg);
    return session(std::move(p));
  });
}

result<session> session::open_toml(const std::string& toml_text, const std::string& name,
                                   const std::vector<std::string>& overrides) {
  return embed::guarded<session>("session::open_toml", [&]() -> result<session> {
    auto cfg = runtime::parse_config(toml_text, name, overrides);
    if (!cfg)
      return cfg.err();
    if (auto ok = check_opened(*cfg); !ok)
      return ok.err();
    auto p = std::make_unique<impl>();
    p->cfg = std::move(*cfg);
    return session(std::move(p));
  });
}

result<session> session::resume(const std::string& run_dir,
                                const std::vector<std::string>& overrides) {
  return embed::guarded<session>("session::resume", [&]() -> result<session> {
    std::error_code ec;
    if (!std::filesystem::is_directory(run_dir, ec))
      return make_error(errc::not_found, "session::resume: {}: not a run folder",
                        run_dir);
    // A resumed run continues with its own resolved config, as `troupe train --resume`.
    auto cfg = runtime::load_config(
      (std::filesystem::path(run_dir) / "config.toml").string(), overrides);
    if (!cfg)
      return cfg.err();
    if (auto ok = check_opened(*cfg); !ok)
      return ok.err();
    auto p = std::make_unique<impl>();
    p->cfg = std::move(*cfg);
    p->resume_dir = run_dir;
    return session(std::move(p));
  });
}

status session::start() {
  return embed::guarded_status("session::start", [&]() -> status {
    if (!impl_)
      return make_error(errc::invalid_argument,
                        "session::start: the session was moved from");
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->closed)
      return make_error(errc::invalid_argument, "session::start: the session is closed");
    if (impl_->started)
      return make_error(errc::invalid_argument, "session::start: already started");
    impl_->started = true;
    impl* self = impl_.get();
    // TODO(integrator): runtime/session.hpp replaces this thread (and the
    // process-wide signal handlers run_training installs while it runs).
    impl_->worker = std::thread([self] {
      result<runtime::training_result> out = error{};
      try {
        out = runtime::run_training(self->cfg, self->resume_dir);
      } catch (...) {
        out = embed::escaped("session (training thread)");
      }
      std::lock_guard<std::mutex> lock(self->mutex);
      self->outcome = std::move(out);
      self->finished = true;
      self->changed.notify_all();
    });
    return ok_status();
  });
}

result<agent> session::make_agent(size_t slots, agent_options options) {
  // TODO(integrator): actors/game_agent.hpp (helper "agent").
  return not_wired("session::make_agent");
}

troupe::progress session::progress() const {
  if (!impl_)
    return {};
  try {
    return impl_->snapshot();
  } catch (...) {
    return {};
  }
}

result<std::string> session::save_checkpoint() {
  // TODO(integrator): the internal session's checkpoint call.
  return not_wired("session::save_checkpoint");
}

status session::request_stop() {
  // TODO(integrator): the internal session's stop (no signal handler).
  return not_wired("session::request_stop");
}

result<bool> session::wait(std::chrono::milliseconds timeout) {
  return embed::guarded<bool>("session::wait", [&]() -> result<bool> {
    if (!impl_)
      return make_error(errc::invalid_argument,
                        "session::wait: the session was moved from");
    std::unique_lock<std::mutex> lock(impl_->mutex);
    if (!impl_->started)
      return make_error(errc::invalid_argument,
                        "session::wait: the session was not started");
    return impl_->changed.wait_for(lock, timeout, [&] { return impl_->finished; });
  });
}

result<troupe::progress> session::close() {
  return embed::guarded<troupe::progress>(
    "session::close", [&]() -> result<troupe::progress> {
      if (!impl_)
        return make_error(errc::invalid_argument,
                          "session::close: the session was moved from");
      {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        if (impl_->closed)
          return make_error(errc::invalid_argument, "session::close: already closed");
        impl_->closed = true;
      }
      // Without a stop request (not wired yet), close waits for training to
      // reach its configured end; run_training writes the final checkpoint.
      if (impl_->worker.joinable())
        impl_->worker.join();
      std::lock_guard<std::mutex> lock(impl_->mutex);
      if (impl_->outcome && !impl_->outcome->ok())
        return impl_->outcome->err();
      troupe::progress p;
      p.finished = impl_->finished;
      p.return_mean_100 = std::nan("");
      if (impl_->outcome) {
        p.env_steps = (*impl_->outcome)->env_steps;
        p.updates = (*impl_->outcome)->updates;
        p.return_mean_100 = (*impl_->outcome)->return_mean_100;
      }
      return p;
    });
}

std::string session::run_dir() const {
  if (!impl_)
    return {};
  try {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->outcome && impl_->outcome->ok())
      return (*impl_->outcome)->run_dir;
    if (!impl_->resume_dir.empty())
      return impl_->resume_dir;
  } catch (...) {
  }
  return {};
}

// -- agent ------------------------------------------------------------------------

// TODO(integrator): actors/game_agent.hpp (helper "agent"); no agent can be
// made in this build, so these are reached only through a moved-from handle.
struct agent::impl {
  size_t slots = 0, obs_dim = 0, action_dim = 0;
};

agent::agent(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
size_t agent::slots() const noexcept {
  return impl_ ? impl_->slots : 0;
}
size_t agent::obs_dim() const noexcept {
  return impl_ ? impl_->obs_dim : 0;
}
size_t agent::action_dim() const noexcept {
  return impl_ ? impl_->action_dim : 0;
}

status agent::act(size_t, const float*, float*) {
  return not_wired("agent::act");
}

status agent::act_batch(size_t, size_t, const float*, float*) {
  return not_wired("agent::act_batch");
}

status agent::report(size_t, double, bool, bool, const float*) {
  return not_wired("agent::report");
}

uint64_t agent::dropped() const noexcept {
  return 0;
}

} // namespace troupe
