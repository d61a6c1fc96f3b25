#include "actors/supervisor.hpp"

#include <algorithm>
#include <chrono>

namespace troupe::actors {

namespace {

using poll_atom = caf::atom_constant<caf::atom("poll")>;

struct supervisor_state {
  supervisor_options opts;
  size_t alive = 0;
  bool stopping = false;
  std::string failure;
};

using supervisor_actor = caf::stateful_actor<supervisor_state>;

void stop_run(supervisor_actor* self) {
  auto& st = self->state;
  if (st.stopping)
    return;
  st.stopping = true;
  for (auto& l : st.opts.learners)
    self->send(l, stop_atom::value);
  if (st.opts.server)
    self->send(st.opts.server, stop_atom::value);
}

caf::behavior supervisor(supervisor_actor* self, supervisor_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.alive = st.opts.learners.size();
  for (auto& l : st.opts.learners)
    self->monitor(l);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& s = self->state;
    auto it =
      std::find_if(s.opts.learners.begin(), s.opts.learners.end(),
                   [&](const caf::actor& l) { return l.address() == down.source; });
    if (it == s.opts.learners.end())
      return;
    if (down.reason && down.reason != caf::exit_reason::user_shutdown &&
        s.failure.empty())
      s.failure = self->system().render(down.reason);
    if (--s.alive == 0) {
      self->send(s.opts.owner, done_atom::value, s.stopping, s.failure);
      self->quit();
    }
  });
  if (st.alive == 0) {
    self->send(st.opts.owner, done_atom::value, false, std::string{});
    self->quit();
    return {};
  }
  if (st.opts.stop_flag)
    self->delayed_send(self, std::chrono::milliseconds(st.opts.poll_ms),
                       poll_atom::value);
  return {
    [self](ckpt_atom, uint64_t updates) {
      self->send(self->state.opts.owner, ckpt_atom::value, updates);
    },
    [](done_atom) {},
    [self](stop_atom) { stop_run(self); },
    [self](poll_atom) {
      auto& s = self->state;
      if (s.opts.stop_flag && s.opts.stop_flag->load() != 0)
        stop_run(self);
      if (!s.stopping)
        self->delayed_send(self, std::chrono::milliseconds(s.opts.poll_ms),
                           poll_atom::value);
    },
  };
}

} // namespace

caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_options opts) {
  return sys.spawn(supervisor, std::move(opts));
}

} // namespace troupe::actors
