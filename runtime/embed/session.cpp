// troupe::session and troupe::agent: the public face of runtime::session
// (runtime/session.hpp) and of the game-driven agent (edge/game_agent.hpp).
//
// A session made with make_agent() puts a game feeder in every runner slot of
// the cast (runtime/cast.hpp's seam, through runtime/game_cast.hpp's factory,
// which remote environments use too): the learners then learn from the
// segments the game's slots report instead of from environment runners. The
// game agent itself needs the policy store and the statistics keeper, which
// exist only once the cast is built, so it is created by the first runner
// slot the supervisor fills, and start() waits (bounded) until it exists:
// when start() returns, act() answers.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <optional>

#include <troupe/troupe.hpp>

#include "edge/game_agent.hpp"
#include "envs/registry.hpp"
#include "base/error.hpp"
#include "base/mutex.hpp"
#include "runtime/config.hpp"
#include "runtime/embed/guard.hpp"
#include "runtime/embed/log.hpp"
#include "runtime/game_cast.hpp"
#include "runtime/session.hpp"

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

// How long start() waits for the cast to make the game agent.
constexpr std::chrono::seconds agent_wait{120};

} // namespace

const char* version() noexcept {
  return TROUPE_VERSION_STRING;
}

// -- agent ------------------------------------------------------------------------

// The agent a session hands out before the cast exists: the game agent is
// filled in by the first runner slot (see the file comment). act() and
// report() load the pointer once (acquire) and call it: no lock.
struct agent::impl {
  size_t slots = 0, obs_dim = 0, action_dim = 0;
  std::atomic<edge::game_agent*> live{nullptr};
  // What the cast makes the game agent with, and the agent once made
  // (runtime/game_cast.hpp); it keeps `live` alive.
  std::shared_ptr<runtime::game_agent_source> source;

  edge::game_agent* get() const noexcept { return live.load(std::memory_order_acquire); }
};

namespace {

error not_ready(const char* call) {
  return error{errc::unavailable,
               std::string(call) +
                 ": the agent's session has not started (call session::start() first)"};
}

} // namespace

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

status agent::act(size_t slot, const float* obs, float* action) {
  if (!impl_)
    return error{errc::invalid_argument, "agent::act: the agent was moved from"};
  auto* a = impl_->get();
  if (!a)
    return not_ready("agent::act");
  try {
    return a->act(slot, obs, action);
  } catch (...) {
    return embed::escaped("agent::act");
  }
}

status agent::act_batch(size_t first_slot, size_t count, const float* obs,
                        float* actions) {
  if (!impl_)
    return error{errc::invalid_argument, "agent::act_batch: the agent was moved from"};
  auto* a = impl_->get();
  if (!a)
    return not_ready("agent::act_batch");
  try {
    return a->act_batch(first_slot, count, obs, actions);
  } catch (...) {
    return embed::escaped("agent::act_batch");
  }
}

status agent::report(size_t slot, double reward, bool terminated, bool truncated,
                     const float* final_obs) {
  if (!impl_)
    return error{errc::invalid_argument, "agent::report: the agent was moved from"};
  auto* a = impl_->get();
  if (!a)
    return not_ready("agent::report");
  try {
    return a->report(slot, reward, terminated, truncated, final_obs);
  } catch (...) {
    return embed::escaped("agent::report");
  }
}

uint64_t agent::dropped() const noexcept {
  if (!impl_)
    return 0;
  auto* a = impl_->get();
  return a ? a->dropped() : 0;
}

// -- session ----------------------------------------------------------------------

struct session::impl {
  runtime::config cfg;
  std::string resume_dir;
  session_options options;
  // One call at a time on the session's state (not progress). `inner` and
  // `game` are set under it, and read without it by progress(), wait() and
  // the other calls on a started session.
  base::mutex mutex;
  std::optional<runtime::session> inner; // from start() on
  std::shared_ptr<agent::impl> game;     // make_agent's, or null
  bool closed TROUPE_GUARDED_BY(mutex) = false;

  troupe::progress convert(const runtime::progress_info& in) const {
    troupe::progress p;
    p.env_steps = in.env_steps;
    p.updates = in.updates;
    p.episodes = in.episodes;
    p.return_mean_100 = in.return_mean_100;
    p.policy_version = in.policy_version;
    p.stats_version = in.stats_version;
    p.transitions_dropped = in.transitions_dropped;
    p.running = in.running;
    p.finished = in.finished;
    if (game) {
      if (auto* a = game->get()) {
        // The game's own episodes (the metrics see only those of segments
        // that were learned from) and its drops.
        const auto c = a->counters();
        p.episodes = c.episodes;
        p.return_mean_100 = c.episodes ? c.return_mean_100 : std::nan("");
        p.transitions_dropped = c.dropped;
      }
    }
    return p;
  }

  // A session over `cfg`, checked as far as it can be before start(): the
  // id is registered, and the internal session accepts the config (the
  // model, the resume point), so that a bad config opens nothing.
  // The probe logs nothing: start() opens the session that logs.
  static result<session> opened(runtime::config cfg, std::string resume_dir,
                                session_options options) {
    if (auto ok = check_opened(cfg); !ok)
      return ok.err();
    auto probe = runtime::session::open(cfg, resume_dir);
    if (!probe)
      return probe.err();
    auto p = std::make_unique<impl>();
    p->cfg = std::move(cfg);
    p->resume_dir = std::move(resume_dir);
    p->options = std::move(options);
    return session(std::move(p));
  }
};

session::session(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
session::session(session&&) noexcept = default;
session& session::operator=(session&&) noexcept = default;
session::~session() {
  if (!impl_)
    return;
  try {
    if (impl_->inner && !impl_->closed) {
      (void)impl_->inner->close();
      if (impl_->game)
        if (auto made = impl_->game->source->agent())
          made->close();
    }
  } catch (...) {
  }
}

result<session> session::open(const std::string& config_path,
                              const std::vector<std::string>& overrides,
                              session_options options) {
  return embed::guarded<session>("session::open", [&]() -> result<session> {
    auto cfg = runtime::load_config(config_path, overrides);
    if (!cfg)
      return cfg.err();
    return impl::opened(std::move(*cfg), {}, std::move(options));
  });
}

result<session> session::open_toml(const std::string& toml_text, const std::string& name,
                                   const std::vector<std::string>& overrides,
                                   session_options options) {
  return embed::guarded<session>("session::open_toml", [&]() -> result<session> {
    auto cfg = runtime::parse_config(toml_text, name, overrides);
    if (!cfg)
      return cfg.err();
    return impl::opened(std::move(*cfg), {}, std::move(options));
  });
}

result<session> session::resume(const std::string& run_dir,
                                const std::vector<std::string>& overrides,
                                session_options options) {
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
    return impl::opened(std::move(*cfg), run_dir, std::move(options));
  });
}

namespace {

error moved_from(const char* call) {
  return error{errc::invalid_argument,
               std::string(call) + ": the session was moved from"};
}

} // namespace

result<agent> session::make_agent(size_t slots, agent_options options) {
  return embed::guarded<agent>("session::make_agent", [&]() -> result<agent> {
    if (!impl_)
      return moved_from("session::make_agent");
    base::mutex_lock lock(impl_->mutex);
    if (impl_->closed)
      return make_error(errc::invalid_argument,
                        "session::make_agent: the session is closed");
    if (impl_->inner)
      return make_error(
        errc::invalid_argument,
        "session::make_agent: call it before start() (the agent's "
        "feeders take the learners' runner slots when the cast is built)");
    if (impl_->game)
      return make_error(
        errc::invalid_argument,
        "session::make_agent: this session already has an agent of {} slots",
        impl_->game->slots);
    if (slots == 0 || slots > (1u << 20))
      return make_error(errc::invalid_argument,
                        "session::make_agent: slots must be in [1, 1048576], got {}",
                        slots);
    auto spec = envs::find_spec(impl_->cfg.get_string("env.id"));
    if (!spec)
      return spec.err();
    auto g = std::make_shared<agent::impl>();
    g->slots = slots;
    g->obs_dim = (*spec)->observation_space.size();
    g->action_dim = (*spec)->action_space.kind == envs::space_kind::discrete
                      ? 1
                      : (*spec)->action_space.size();
    auto source = std::make_shared<runtime::game_agent_source>();
    source->slots = slots;
    source->name = "agent";
    source->env_id = (*spec)->id;
    source->queue_capacity_transitions = options.queue_capacity;
    source->block_when_full = options.block_when_full;
    std::weak_ptr<agent::impl> weak = g;
    source->on_made = [weak](const std::shared_ptr<edge::game_agent>& made) {
      if (auto handle = weak.lock())
        handle->live.store(made.get(), std::memory_order_release);
    };
    g->source = std::move(source);
    impl_->game = g;
    return agent(g);
  });
}

status session::start() {
  return embed::guarded_status("session::start", [&]() -> status {
    if (!impl_)
      return moved_from("session::start");
    base::mutex_lock lock(impl_->mutex);
    if (impl_->closed)
      return make_error(errc::invalid_argument, "session::start: the session is closed");
    if (impl_->inner)
      return make_error(errc::invalid_argument, "session::start: already started");
    if (!impl_->game) {
      // Nothing but the game can step an environment registered with its
      // spaces only: without an agent the runners would fail to make it.
      const auto& id = impl_->cfg.get_string("env.id");
      if (auto only = envs::is_spaces_only(id); only && *only)
        return make_error(
          errc::invalid_argument,
          "session::start: env.id '{}' ({}) was registered with its spaces only "
          "(register_environment_spaces), for the game-driven form: call make_agent() "
          "before start() so that the game steps it, or register '{}' with "
          "callbacks (register_environment) to have troupe step it",
          id, impl_->cfg.origin("env.id"), id);
    }
    runtime::session_options so;
    so.log = embed::session_log(impl_->options.log);
    if (impl_->game) {
      const auto learners = static_cast<size_t>(impl_->cfg.get_int("algo.num_learners"));
      so.cast.runner_factories.assign(learners,
                                      runtime::game_feeder_factory(impl_->game->source));
    }
    auto inner = runtime::session::open(impl_->cfg, impl_->resume_dir, std::move(so));
    if (!inner)
      return inner.err();
    if (auto s = inner->start(); !s.ok())
      return s;
    impl_->inner.emplace(std::move(*inner));
    if (impl_->game) {
      // act() answers once start() returns: wait for the cast to make the agent.
      auto made = impl_->game->source->wait(agent_wait);
      if (!made) {
        impl_->inner->request_stop();
        (void)impl_->inner->close();
        impl_->closed = true;
        return make_error(errc::unavailable, "session::start: {}", made.err().message);
      }
    }
    return ok_status();
  });
}

troupe::progress session::progress() const {
  if (!impl_)
    return {};
  try {
    if (!impl_->inner) {
      troupe::progress p;
      p.return_mean_100 = std::nan("");
      return p;
    }
    return impl_->convert(impl_->inner->progress());
  } catch (...) {
    return {};
  }
}

result<std::string> session::save_checkpoint() {
  return embed::guarded<std::string>(
    "session::save_checkpoint", [&]() -> result<std::string> {
      if (!impl_)
        return moved_from("session::save_checkpoint");
      if (!impl_->inner)
        return make_error(errc::invalid_argument,
                          "session::save_checkpoint: the session was not started");
      return impl_->inner->save_checkpoint();
    });
}

status session::request_stop() {
  return embed::guarded_status("session::request_stop", [&]() -> status {
    if (!impl_)
      return moved_from("session::request_stop");
    if (!impl_->inner)
      return make_error(errc::invalid_argument,
                        "session::request_stop: the session was not started");
    impl_->inner->request_stop();
    return ok_status();
  });
}

result<bool> session::wait(std::chrono::milliseconds timeout) {
  return embed::guarded<bool>("session::wait", [&]() -> result<bool> {
    if (!impl_)
      return moved_from("session::wait");
    if (!impl_->inner)
      return make_error(errc::invalid_argument,
                        "session::wait: the session was not started");
    return impl_->inner->wait(timeout);
  });
}

result<troupe::progress> session::close() {
  return embed::guarded<troupe::progress>(
    "session::close", [&]() -> result<troupe::progress> {
      if (!impl_)
        return moved_from("session::close");
      base::mutex_lock lock(impl_->mutex);
      if (impl_->closed)
        return make_error(errc::invalid_argument, "session::close: already closed");
      impl_->closed = true;
      troupe::progress p;
      p.return_mean_100 = std::nan("");
      if (!impl_->inner)
        return p; // never started: nothing trained, nothing written
      auto last = impl_->convert(impl_->inner->progress());
      auto done = impl_->inner->close();
      if (impl_->game)
        if (auto made = impl_->game->source->agent())
          made->close();
      if (!done)
        return done.err();
      p = last;
      p.env_steps = done->env_steps;
      p.updates = done->updates;
      if (!impl_->game)
        p.return_mean_100 = done->return_mean_100;
      p.running = false;
      p.finished = true;
      return p;
    });
}

std::string session::run_dir() const {
  if (!impl_)
    return {};
  try {
    if (impl_->inner)
      return impl_->inner->run_dir();
    return impl_->resume_dir;
  } catch (...) {
  }
  return {};
}

} // namespace troupe
