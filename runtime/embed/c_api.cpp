// troupe.h over troupe.hpp. Every entry point catches every exception and
// turns failures into a status plus the calling thread's message.
#include <troupe/troupe.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <troupe/troupe.hpp>

#include "base/error.hpp"
#include "runtime/embed/guard.hpp"
#include "runtime/embed/log.hpp"

using troupe::errc;

static_assert(troupe::abi_version == TROUPE_ABI_VERSION,
              "troupe.hpp and troupe.h must state the same ABI version");

struct troupe_session {
  static constexpr const char* what = "session"; ///< its name in messages
  std::optional<troupe::session> object;         ///< empty once closed
};

struct troupe_agent {
  static constexpr const char* what = "agent"; ///< its name in messages
  std::optional<troupe::agent> object;         ///< empty once closed
};

struct troupe_policy {
  static constexpr const char* what = "policy"; ///< its name in messages
  std::optional<troupe::policy> object;         ///< empty once closed
};

namespace {

thread_local std::string last_message;

// Records `e` for this thread and returns its status.
troupe_status fail(const troupe::error& e) noexcept {
  try {
    last_message = e.message;
  } catch (...) {
  }
  return static_cast<troupe_status>(e.code);
}

troupe_status fail(errc code, const std::string& message) noexcept {
  return fail(troupe::error{code, message});
}

troupe_status done(const troupe::status& s) noexcept {
  return s.ok() ? TROUPE_OK : fail(s.err());
}

// As done(), for a C++ call whose message starts with its own name
// (`cxx_call`: "agent::act: ...", "register_environment('id'): ..."): the
// message names `call`, which the caller called, instead.
troupe_status done_as(const troupe::status& s, const char* cxx_call, const char* call) {
  if (s.ok())
    return TROUPE_OK;
  auto e = s.err();
  const size_t n = std::strlen(cxx_call);
  if (e.message.compare(0, n, cxx_call) == 0 && e.message.size() > n &&
      (e.message[n] == ':' || e.message[n] == '('))
    e.message = std::string(call) + e.message.substr(n);
  return fail(e);
}

// Runs `body` (returning troupe_status), turning an exception into a status.
template <class F>
troupe_status guarded(const char* call, F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return fail(troupe::embed::escaped(call));
  }
}

troupe_status check_abi(const char* call, int abi_version) {
  if (abi_version == TROUPE_ABI_VERSION)
    return TROUPE_OK;
  return fail(
    errc::unsupported_version,
    fmt::format("{}: the caller was built for troupe ABI version {}; this library "
                "has ABI version {}",
                call, abi_version, TROUPE_ABI_VERSION));
}

troupe_status null_argument(const char* call, const char* name) {
  return fail(errc::invalid_argument, fmt::format("{}: {} is NULL", call, name));
}

troupe_status closed(const char* call, const char* what) {
  return fail(errc::invalid_argument,
              fmt::format("{}: the {} handle is closed", call, what));
}

// Runs `body` on the object behind handle `h` (a troupe_session, troupe_agent
// or troupe_policy): the call fails naming the handle when it is NULL or
// closed, and an exception becomes a status.
template <class Handle, class F>
troupe_status with_handle(const char* call, Handle* h, F&& body) noexcept {
  return guarded(call, [&]() -> troupe_status {
    if (h == nullptr)
      return null_argument(call, Handle::what);
    if (!h->object)
      return closed(call, Handle::what);
    return body(*h->object);
  });
}

// Copies `text` into buf (size bytes); invalid_argument naming the sizes when it
// does not fit (buf then holds "").
troupe_status copy_out(const char* call, const std::string& text, char* buf,
                       size_t size) {
  if (buf == nullptr)
    return null_argument(call, "buf");
  if (text.size() + 1 > size) {
    if (size > 0)
      buf[0] = '\0';
    return fail(errc::invalid_argument,
                fmt::format("{}: the buffer holds {} bytes; {} are needed", call, size,
                            text.size() + 1));
  }
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return TROUPE_OK;
}

std::vector<std::string> to_overrides(const char* const* overrides, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i)
    out.emplace_back(overrides[i] ? overrides[i] : "");
  return out;
}

void to_c(const troupe::progress& p, troupe_progress* out) {
  out->env_steps = p.env_steps;
  out->updates = p.updates;
  out->episodes = p.episodes;
  out->return_mean_100 = p.return_mean_100;
  out->policy_version = p.policy_version;
  out->stats_version = p.stats_version;
  out->transitions_dropped = p.transitions_dropped;
  out->running = p.running ? 1 : 0;
  out->finished = p.finished ? 1 : 0;
}

// -- environments from a function table ---------------------------------------------

struct c_table {
  troupe_env_functions fns;
  void* user_data;
};

class c_environment final : public troupe::environment {
public:
  c_environment(std::shared_ptr<const c_table> table, void* instance)
    : table_(std::move(table)), instance_(instance) {}
  ~c_environment() override { table_->fns.destroy(instance_, table_->user_data); }

  void reset(uint64_t seed, float* obs) override {
    table_->fns.reset(instance_, table_->user_data, seed, obs);
  }

  troupe::status step(const float* action, float* obs, double& reward, bool& terminated,
                      bool& truncated) override {
    int term = 0, trunc = 0;
    int rc =
      table_->fns.step(instance_, table_->user_data, action, obs, &reward, &term, &trunc);
    if (rc != 0)
      return troupe::make_error(errc::unavailable, "the step callback returned {}", rc);
    terminated = term != 0;
    truncated = trunc != 0;
    return troupe::ok_status();
  }

private:
  std::shared_ptr<const c_table> table_;
  void* instance_;
};

// A null instance from create() cannot be reported through a factory of
// today's registry; it becomes an environment whose steps fail.
class failed_environment final : public troupe::environment {
public:
  void reset(uint64_t, float*) override {}
  troupe::status step(const float*, float*, double&, bool&, bool&) override {
    return troupe::make_error(errc::unavailable, "the create callback returned NULL");
  }
};

// The C description as the C++ one (d.id is set); the error names `call`,
// the id and the fields.
troupe_status to_description(const char* call, const troupe_env_description& d,
                             troupe::env_description& desc) {
  if (d.obs_dim == 0 || d.obs_low == nullptr || d.obs_high == nullptr)
    return fail(errc::invalid_argument,
                fmt::format("{}('{}'): obs_dim must be > 0 with obs_low and obs_high "
                            "given (obs_dim {}, obs_low {}, obs_high {})",
                            call, d.id, d.obs_dim, d.obs_low ? "set" : "NULL",
                            d.obs_high ? "set" : "NULL"));
  desc.id = d.id;
  desc.obs_low.assign(d.obs_low, d.obs_low + d.obs_dim);
  desc.obs_high.assign(d.obs_high, d.obs_high + d.obs_dim);
  desc.num_actions = d.num_actions;
  desc.max_episode_steps = d.max_episode_steps;
  if (d.num_actions == 0) {
    if (d.action_dim == 0 || d.action_low == nullptr || d.action_high == nullptr)
      return fail(errc::invalid_argument,
                  fmt::format("{}('{}'): a Box action (num_actions 0) needs action_dim "
                              "> 0 with action_low and action_high (action_dim {})",
                              call, d.id, d.action_dim));
    desc.action_low.assign(d.action_low, d.action_low + d.action_dim);
    desc.action_high.assign(d.action_high, d.action_high + d.action_dim);
  }
  return TROUPE_OK;
}

} // namespace

extern "C" {

int troupe_abi_version(void) {
  return TROUPE_ABI_VERSION;
}

const char* troupe_version(void) {
  return troupe::version();
}

const char* troupe_status_name(troupe_status status) {
  if (static_cast<int>(status) < 0 || static_cast<int>(status) > TROUPE_UNAVAILABLE)
    return "unknown";
  // errc::none is "none" inside (and on the wire); a status of success is "ok".
  if (status == TROUPE_OK)
    return "ok";
  return troupe::to_string(static_cast<errc>(status));
}

const char* troupe_last_error(void) {
  return last_message.c_str();
}

size_t troupe_last_error_copy(char* buf, size_t size) {
  const size_t n = last_message.size();
  if (buf != nullptr && size > 0) {
    const size_t k = n < size - 1 ? n : size - 1;
    std::memcpy(buf, last_message.data(), k);
    buf[k] = '\0';
  }
  return n;
}

void troupe_set_log_callback(troupe_log_callback callback, void* user) {
  troupe::embed::set_process_log(callback, user);
}

// -- environments -----------------------------------------------------------------

troupe_status troupe_register_environment(int abi_version,
                                          const troupe_env_description* d,
                                          const troupe_env_functions* fns,
                                          void* user_data) {
  constexpr const char* call = "troupe_register_environment";
  return guarded(call, [&] {
    if (auto s = check_abi(call, abi_version); s != TROUPE_OK)
      return s;
    if (d == nullptr)
      return null_argument(call, "description");
    if (fns == nullptr)
      return fail(errc::invalid_argument,
                  fmt::format("{}: functions is NULL (an environment that only a game "
                              "steps registers its spaces with "
                              "troupe_register_environment_spaces)",
                              call));
    if (d->id == nullptr)
      return null_argument(call, "description->id");
    if (!fns->create || !fns->destroy || !fns->reset || !fns->step)
      return fail(errc::invalid_argument,
                  fmt::format("{}('{}'): functions->{} is NULL", call, d->id,
                              !fns->create    ? "create"
                              : !fns->destroy ? "destroy"
                              : !fns->reset   ? "reset"
                                              : "step"));
    troupe::env_description desc;
    if (auto s = to_description(call, *d, desc); s != TROUPE_OK)
      return s;
    auto table = std::make_shared<const c_table>(c_table{*fns, user_data});
    return done_as(troupe::register_environment(
                     desc,
                     [table]() -> std::unique_ptr<troupe::environment> {
                       void* instance = table->fns.create(table->user_data);
                       if (instance == nullptr)
                         return std::make_unique<failed_environment>();
                       return std::make_unique<c_environment>(table, instance);
                     }),
                   "register_environment", call);
  });
}

troupe_status troupe_register_environment_spaces(int abi_version,
                                                 const troupe_env_description* d) {
  constexpr const char* call = "troupe_register_environment_spaces";
  return guarded(call, [&] {
    if (auto s = check_abi(call, abi_version); s != TROUPE_OK)
      return s;
    if (d == nullptr)
      return null_argument(call, "description");
    if (d->id == nullptr)
      return null_argument(call, "description->id");
    troupe::env_description desc;
    if (auto s = to_description(call, *d, desc); s != TROUPE_OK)
      return s;
    return done_as(troupe::register_environment_spaces(desc),
                   "register_environment_spaces", call);
  });
}

troupe_status troupe_unregister_environment(const char* id) {
  constexpr const char* call = "troupe_unregister_environment";
  return guarded(call, [&] {
    if (id == nullptr)
      return null_argument(call, "id");
    return done(troupe::unregister_environment(id));
  });
}

troupe_status troupe_environment_ids(char* buf, size_t size, size_t* needed) {
  constexpr const char* call = "troupe_environment_ids";
  return guarded(call, [&] {
    std::string text;
    for (auto& id : troupe::environment_ids()) {
      text += id;
      text += '\n';
    }
    if (needed != nullptr)
      *needed = text.size() + 1;
    return copy_out(call, text, buf, size);
  });
}

// -- sessions -----------------------------------------------------------------------

namespace {

troupe_status open_with(const char* call, int abi_version, troupe_session** out,
                        const std::function<troupe::result<troupe::session>()>& open) {
  return guarded(call, [&] {
    if (out != nullptr)
      *out = nullptr;
    if (auto s = check_abi(call, abi_version); s != TROUPE_OK)
      return s;
    if (out == nullptr)
      return null_argument(call, "out");
    auto opened = open();
    if (!opened)
      return fail(opened.err());
    auto handle = std::make_unique<troupe_session>();
    handle->object.emplace(std::move(*opened));
    *out = handle.release();
    return TROUPE_OK;
  });
}

} // namespace

troupe_status troupe_session_open(int abi_version, const char* config_path,
                                  const char* const* overrides, size_t n_overrides,
                                  troupe_session** out) {
  constexpr const char* call = "troupe_session_open";
  return open_with(call, abi_version, out, [&]() -> troupe::result<troupe::session> {
    if (config_path == nullptr)
      return troupe::error{errc::invalid_argument,
                           "troupe_session_open: config_path is NULL"};
    if (n_overrides > 0 && overrides == nullptr)
      return troupe::error{errc::invalid_argument,
                           "troupe_session_open: overrides is NULL"};
    return troupe::session::open(config_path, to_overrides(overrides, n_overrides));
  });
}

troupe_status troupe_session_open_toml(int abi_version, const char* toml_text,
                                       const char* name, const char* const* overrides,
                                       size_t n_overrides, troupe_session** out) {
  constexpr const char* call = "troupe_session_open_toml";
  return open_with(call, abi_version, out, [&]() -> troupe::result<troupe::session> {
    if (toml_text == nullptr)
      return troupe::error{errc::invalid_argument,
                           "troupe_session_open_toml: toml_text is NULL"};
    if (n_overrides > 0 && overrides == nullptr)
      return troupe::error{errc::invalid_argument,
                           "troupe_session_open_toml: overrides is NULL"};
    return troupe::session::open_toml(toml_text, name ? name : "<toml text>",
                                      to_overrides(overrides, n_overrides));
  });
}

troupe_status troupe_session_resume(int abi_version, const char* run_dir,
                                    const char* const* overrides, size_t n_overrides,
                                    troupe_session** out) {
  constexpr const char* call = "troupe_session_resume";
  return open_with(call, abi_version, out, [&]() -> troupe::result<troupe::session> {
    if (run_dir == nullptr)
      return troupe::error{errc::invalid_argument,
                           "troupe_session_resume: run_dir is NULL"};
    if (n_overrides > 0 && overrides == nullptr)
      return troupe::error{errc::invalid_argument,
                           "troupe_session_resume: overrides is NULL"};
    return troupe::session::resume(run_dir, to_overrides(overrides, n_overrides));
  });
}

troupe_status troupe_session_start(troupe_session* s) {
  constexpr const char* call = "troupe_session_start";
  return with_handle(
    call, s, [&](auto& sess) { return done_as(sess.start(), "session::start", call); });
}

troupe_status troupe_session_progress(const troupe_session* s, troupe_progress* out) {
  constexpr const char* call = "troupe_session_progress";
  return with_handle(call, s, [&](auto& sess) {
    if (out == nullptr)
      return null_argument(call, "out");
    to_c(sess.progress(), out);
    return TROUPE_OK;
  });
}

troupe_status troupe_session_save_checkpoint(troupe_session* s, char* path, size_t size) {
  constexpr const char* call = "troupe_session_save_checkpoint";
  return with_handle(call, s, [&](auto& sess) {
    auto saved = sess.save_checkpoint();
    if (!saved)
      return fail(saved.err());
    return copy_out(call, *saved, path, size);
  });
}

troupe_status troupe_session_request_stop(troupe_session* s) {
  constexpr const char* call = "troupe_session_request_stop";
  return with_handle(call, s, [&](auto& sess) { return done(sess.request_stop()); });
}

troupe_status troupe_session_wait(troupe_session* s, int64_t timeout_ms, int* finished) {
  constexpr const char* call = "troupe_session_wait";
  return with_handle(call, s, [&](auto& sess) {
    if (finished == nullptr)
      return null_argument(call, "finished");
    if (timeout_ms < 0)
      return fail(errc::invalid_argument,
                  fmt::format("{}: timeout_ms must be >= 0, got {}", call, timeout_ms));
    auto waited = sess.wait(std::chrono::milliseconds(timeout_ms));
    if (!waited)
      return fail(waited.err());
    *finished = *waited ? 1 : 0;
    return TROUPE_OK;
  });
}

troupe_status troupe_session_close(troupe_session* s, troupe_progress* out) {
  constexpr const char* call = "troupe_session_close";
  return with_handle(call, s, [&](auto& sess) {
    auto closed_progress = sess.close();
    s->object.reset();
    if (!closed_progress)
      return fail(closed_progress.err());
    if (out != nullptr)
      to_c(*closed_progress, out);
    return TROUPE_OK;
  });
}

troupe_status troupe_session_run_dir(const troupe_session* s, char* buf, size_t size) {
  constexpr const char* call = "troupe_session_run_dir";
  return with_handle(
    call, s, [&](auto& sess) { return copy_out(call, sess.run_dir(), buf, size); });
}

void troupe_session_free(troupe_session* s) {
  try {
    if (s != nullptr && s->object)
      (void)s->object->close();
  } catch (...) {
  }
  delete s;
}

// -- agents ---------------------------------------------------------------------------

troupe_status troupe_session_make_agent(troupe_session* s, size_t slots,
                                        const troupe_agent_options* options,
                                        troupe_agent** out) {
  constexpr const char* call = "troupe_session_make_agent";
  return with_handle(call, s, [&](auto& sess) {
    if (out == nullptr)
      return null_argument(call, "out");
    *out = nullptr;
    troupe::agent_options opts;
    if (options != nullptr) {
      opts.queue_capacity = options->queue_capacity;
      opts.block_when_full = options->block_when_full != 0;
    }
    auto made = sess.make_agent(slots, opts);
    if (!made)
      return fail(made.err());
    auto handle = std::make_unique<troupe_agent>();
    handle->object.emplace(std::move(*made));
    *out = handle.release();
    return TROUPE_OK;
  });
}

troupe_status troupe_agent_info(const troupe_agent* a, size_t* slots, size_t* obs_dim,
                                size_t* action_dim) {
  constexpr const char* call = "troupe_agent_info";
  return with_handle(call, a, [&](auto& ag) {
    if (slots)
      *slots = ag.slots();
    if (obs_dim)
      *obs_dim = ag.obs_dim();
    if (action_dim)
      *action_dim = ag.action_dim();
    return TROUPE_OK;
  });
}

troupe_status troupe_agent_act(troupe_agent* a, size_t slot, const float* obs,
                               size_t obs_size, float* action, size_t action_size) {
  constexpr const char* call = "troupe_agent_act";
  return with_handle(call, a, [&](auto& ag) {
    if (obs == nullptr)
      return null_argument(call, "obs");
    if (action == nullptr)
      return null_argument(call, "action");
    if (obs_size != ag.obs_dim())
      return fail(
        errc::dimension_mismatch,
        fmt::format("{}: slot {}: the observation has {} values; the agent takes "
                    "obs_dim = {}",
                    call, slot, obs_size, ag.obs_dim()));
    if (action_size < ag.action_dim())
      return fail(errc::dimension_mismatch,
                  fmt::format("{}: slot {}: the action buffer holds {} values; the agent "
                              "writes action_dim = {}",
                              call, slot, action_size, ag.action_dim()));
    return done_as(ag.act(slot, obs, action), "agent::act", call);
  });
}

troupe_status troupe_agent_act_batch(troupe_agent* a, size_t first_slot, size_t count,
                                     const float* obs, size_t obs_size, float* actions,
                                     size_t actions_size) {
  constexpr const char* call = "troupe_agent_act_batch";
  return with_handle(call, a, [&](auto& ag) {
    if (obs == nullptr)
      return null_argument(call, "obs");
    if (actions == nullptr)
      return null_argument(call, "actions");
    // count rows of obs_dim and action_dim floats; a count too large for the
    // products is out of any buffer's reach (and of the slots' range).
    const size_t od = ag.obs_dim(), ad = ag.action_dim();
    if (count > ag.slots())
      return fail(errc::invalid_argument,
                  fmt::format("{}: count must be at most the agent's {} slots, got {}",
                              call, ag.slots(), count));
    if (obs_size != count * od)
      return fail(errc::dimension_mismatch,
                  fmt::format("{}: slots [{}, {}): the observations hold {} values; "
                              "count * obs_dim = {} * {} = {} are needed",
                              call, first_slot, first_slot + count, obs_size, count, od,
                              count * od));
    if (actions_size < count * ad)
      return fail(errc::dimension_mismatch,
                  fmt::format("{}: slots [{}, {}): the action buffer holds {} values; "
                              "the agent writes count * action_dim = {} * {} = {}",
                              call, first_slot, first_slot + count, actions_size, count,
                              ad, count * ad));
    return done_as(ag.act_batch(first_slot, count, obs, actions), "agent::act_batch",
                   call);
  });
}

troupe_status troupe_agent_report(troupe_agent* a, size_t slot, double reward,
                                  int terminated, int truncated, const float* final_obs) {
  constexpr const char* call = "troupe_agent_report";
  return with_handle(call, a, [&](auto& ag) {
    // Flags are 0 or 1: another value is a caller's bug (an uninitialized
    // int, a count passed by mistake), not a truth value to guess at.
    for (auto [name, value] :
         {std::pair{"terminated", terminated}, std::pair{"truncated", truncated}})
      if (value != 0 && value != 1)
        return fail(
          errc::invalid_argument,
          fmt::format("{}: slot {}: {} must be 0 or 1, got {}", call, slot, name, value));
    return done_as(ag.report(slot, reward, terminated == 1, truncated == 1, final_obs),
                   "agent::report", call);
  });
}

troupe_status troupe_agent_dropped(const troupe_agent* a, uint64_t* out) {
  constexpr const char* call = "troupe_agent_dropped";
  return with_handle(call, a, [&](auto& ag) {
    if (out == nullptr)
      return null_argument(call, "out");
    *out = ag.dropped();
    return TROUPE_OK;
  });
}

troupe_status troupe_agent_close(troupe_agent* a) {
  constexpr const char* call = "troupe_agent_close";
  return with_handle(call, a, [&](auto& ag) {
    (void)ag;
    a->object.reset();
    return TROUPE_OK;
  });
}

void troupe_agent_free(troupe_agent* a) {
  delete a;
}

// -- policies -------------------------------------------------------------------------

troupe_status troupe_policy_load(int abi_version, const char* path, troupe_policy** out) {
  constexpr const char* call = "troupe_policy_load";
  return guarded(call, [&] {
    if (out != nullptr)
      *out = nullptr;
    if (auto s = check_abi(call, abi_version); s != TROUPE_OK)
      return s;
    if (out == nullptr)
      return null_argument(call, "out");
    if (path == nullptr)
      return null_argument(call, "path");
    auto loaded = troupe::policy::load(path);
    if (!loaded)
      return fail(loaded.err());
    auto handle = std::make_unique<troupe_policy>();
    handle->object.emplace(std::move(*loaded));
    *out = handle.release();
    return TROUPE_OK;
  });
}

troupe_status troupe_policy_info_get(const troupe_policy* p, troupe_policy_info* out) {
  constexpr const char* call = "troupe_policy_info_get";
  return with_handle(call, p, [&](auto& pol) {
    if (out == nullptr)
      return null_argument(call, "out");
    out->obs_dim = pol.obs_dim();
    out->action_dim = pol.action_dim();
    out->num_actions = pol.num_actions();
    out->discrete = pol.discrete() ? 1 : 0;
    return TROUPE_OK;
  });
}

troupe_status troupe_policy_act(const troupe_policy* p, const float* obs, size_t obs_size,
                                float* action, size_t action_size, int deterministic,
                                uint64_t seed) {
  constexpr const char* call = "troupe_policy_act";
  return with_handle(call, p, [&](auto& pol) {
    if (obs == nullptr)
      return null_argument(call, "obs");
    if (action == nullptr)
      return null_argument(call, "action");
    if (action_size < pol.action_dim())
      return fail(errc::dimension_mismatch,
                  fmt::format("{}: the action buffer holds {} values; the policy writes "
                              "action_dim = {}",
                              call, action_size, pol.action_dim()));
    return done_as(pol.act(obs, obs_size, action, deterministic != 0, seed),
                   "policy::act", call);
  });
}

troupe_status troupe_policy_close(troupe_policy* p) {
  constexpr const char* call = "troupe_policy_close";
  return with_handle(call, p, [&](auto& pol) {
    (void)pol;
    p->object.reset();
    return TROUPE_OK;
  });
}

void troupe_policy_free(troupe_policy* p) {
  delete p;
}

} // extern "C"
