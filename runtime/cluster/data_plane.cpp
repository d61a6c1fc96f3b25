#include "runtime/cluster/data_plane.hpp"

#include <utility>

#include <fmt/format.h>

#include "actors/messages.hpp"
#include "runtime/cluster/node.hpp"

namespace troupe::cluster {

result<data_plane_settings> data_plane_from(const runtime::config& cfg) {
  data_plane_settings s;
  s.hosts = static_cast<uint64_t>(cfg.get_int("cluster.hosts"));
  s.interface = cfg.get_string("cluster.data_interface");
  s.round_timeout = std::chrono::milliseconds(cfg.get_int("cluster.round_timeout_ms"));
  s.form_timeout = std::chrono::seconds(cfg.get_int("cluster.reconnect_s")) +
                   std::chrono::milliseconds(cfg.get_int("cluster.round_timeout_ms"));
  if (!s.interface.empty() && wildcard_host(s.interface))
    return make_error(errc::bad_config,
                      "{}: cluster.data_interface = \"{}\": the data plane binds to one "
                      "address, never a wildcard",
                      cfg.origin("cluster.data_interface"), s.interface);
  if (s.interface.empty()) {
    // The coordinator's: the host it listens on (a worker sets its own
    // before this: --data-interface, or the address its connection to the
    // coordinator leaves from).
    const auto& listen = cfg.get_string("cluster.listen");
    if (auto ep = parse_endpoint(listen, "cluster.listen");
        ep && !wildcard_host(ep->host))
      s.interface = ep->host;
    else if (cfg.get_int("algo.num_learners") > 0)
      return make_error(
        errc::bad_config,
        "{}: cluster.data_interface is empty and cluster.listen = '{}' ({}) listens on "
        "every address: a coordinator with learners is a member of the data plane's "
        "group and needs the one address its data port binds to and the other hosts "
        "reach it at: set cluster.data_interface to it, or listen on it",
        cfg.origin("cluster.data_interface"), listen, cfg.origin("cluster.listen"));
  }
  return s;
}

edge::gloo_group_options group_options(const data_plane_settings& s, uint64_t epoch,
                                       uint64_t rank, uint64_t size) {
  edge::gloo_group_options o;
  o.rank = rank;
  o.size = size;
  o.interface_host = s.interface;
  o.prefix = fmt::format("epoch-{}", epoch);
  o.label = fmt::format("epoch {}", epoch);
  o.timeout = s.round_timeout;
  return o;
}

actors::replica_options
replica_options_for(const actors::parameter_server_options& server, uint64_t learners,
                    const std::string& host) {
  actors::replica_options o;
  o.sync = server.sync;
  o.num_learners = learners;
  o.max_staleness = server.max_staleness;
  o.max_grad_norm = server.max_grad_norm;
  o.adam = server.adam;
  o.log = server.log;
  o.host = host;
  return o;
}

// -- deferred_group -------------------------------------------------------------

deferred_group::deferred_group(std::string host, std::chrono::milliseconds form_timeout)
  : host_(std::move(host)), form_timeout_(form_timeout),
    deadline_(std::chrono::steady_clock::now() + form_timeout) {}

deferred_group::~deferred_group() {
  std::vector<std::thread> threads;
  {
    base::mutex_lock lock(mtx_);
    threads = std::move(threads_);
  }
  for (auto& t : threads)
    t.join();
}

void deferred_group::on_failure(failure_report report) {
  base::mutex_lock lock(mtx_);
  report_ = std::move(report);
}

void deferred_group::form(uint64_t epoch, std::unique_ptr<edge::rendezvous_store> store,
                          edge::gloo_group_options o) {
  base::mutex_lock lock(mtx_);
  if (epoch <= asked_epoch_)
    return;
  asked_epoch_ = epoch;
  // The old group's members are not all in the new one: an operation on it
  // must not wait for one that left (nor go on without a joiner).
  if (used_)
    used_->abort();
  threads_.emplace_back([this, epoch, store = std::move(store), o = std::move(o)] {
    auto g = edge::connect_gloo_group(*store, o);
    {
      base::mutex_lock l(mtx_);
      if (g.ok() && epoch > formed_epoch_ && epoch == asked_epoch_) {
        group_ = std::shared_ptr<actors::collective>(std::move(g).value());
        formed_epoch_ = epoch;
      } else if (!g.ok() && epoch > failed_epoch_) {
        failed_epoch_ = epoch;
        failure_ = g.err().message;
      }
    }
    formed_cv_.notify_all();
  });
}

result<std::pair<std::shared_ptr<actors::collective>, uint64_t>>
deferred_group::wait_formed(uint64_t after) {
  base::mutex_lock lock(mtx_);
  for (;;) {
    const auto left = deadline_ - std::chrono::steady_clock::now();
    lock.wait_for(formed_cv_, std::max(left, std::chrono::steady_clock::duration(0)),
                  [&]() TROUPE_REQUIRES(mtx_) {
                    return formed_epoch_ > after || failed_epoch_ > after;
                  });
    if (formed_epoch_ > after)
      return std::make_pair(group_, formed_epoch_);
    if (failed_epoch_ > after) {
      // The newest forming failed (a member of it is gone too): the
      // coordinator hears of it and opens another epoch.
      const uint64_t failed = failed_epoch_;
      const std::string why = failure_;
      if (!report_)
        return make_error(errc::unavailable, "{}", why);
      auto report = report_;
      lock.unlock();
      report(failed, why);
      lock.lock();
      after = std::max(after, failed);
      continue;
    }
    return make_error(errc::unavailable,
                      "the data plane's group of host '{}' did not form in time: {} (see "
                      "cluster.hosts, cluster.reconnect_s and cluster.round_timeout_ms)",
                      host_,
                      asked_epoch_ > after ? std::string{"its rendezvous did not finish"}
                      : failed_epoch_ > 0
                        ? fmt::format("the rendezvous of its last epoch ({}) failed: {}",
                                      failed_epoch_, failure_)
                        : std::string{"the coordinator never said to form it (with "
                                      "cluster.hosts > 0, fewer worker hosts joined than "
                                      "it names, or a lost member was not yet "
                                      "replaced)"});
  }
}

result<std::shared_ptr<actors::collective>> deferred_group::in_use() {
  {
    base::mutex_lock lock(mtx_);
    if (used_epoch_ > 0) {
      // A newer epoch formed or forming: this member must leave its group
      // (reform) and start the new one with the others' first exchange.
      if (asked_epoch_ > used_epoch_)
        return make_error(errc::unavailable,
                          "the group of epoch {} is replaced by epoch {} (rank {} of {})",
                          used_epoch_, asked_epoch_, used_->rank(), used_->size());
      return used_;
    }
  }
  auto g = wait_formed(0);
  if (!g.ok())
    return g.err();
  base::mutex_lock lock(mtx_);
  if (used_epoch_ == 0) {
    used_ = g.value().first;
    used_epoch_ = g.value().second;
  }
  return used_;
}

size_t deferred_group::rank() const {
  base::mutex_lock lock(mtx_);
  const auto& g = used_ ? used_ : group_;
  return g ? g->rank() : 0;
}

size_t deferred_group::size() const {
  base::mutex_lock lock(mtx_);
  const auto& g = used_ ? used_ : group_;
  return g ? g->size() : 0;
}

status deferred_group::allreduce_sum(double* data, size_t count) {
  auto g = in_use();
  if (!g.ok())
    return g.err();
  return g.value()->allreduce_sum(data, count);
}

status deferred_group::broadcast(void* data, size_t bytes, size_t root) {
  auto g = in_use();
  if (!g.ok())
    return g.err();
  return g.value()->broadcast(data, bytes, root);
}

std::string deferred_group::describe() const {
  base::mutex_lock lock(mtx_);
  const auto& g = used_ ? used_ : group_;
  if (g)
    return g->describe();
  return fmt::format("host '{}', group not formed yet", host_);
}

status deferred_group::ready() {
  auto g = in_use();
  if (!g.ok())
    return g.err();
  return {};
}

void deferred_group::abort() {
  base::mutex_lock lock(mtx_);
  if (used_)
    used_->abort();
}

status deferred_group::reform(const std::string& why) {
  uint64_t failed = 0;
  failure_report report;
  {
    base::mutex_lock lock(mtx_);
    failed = used_epoch_;
    if (used_)
      used_->abort(); // the others' operations on it fail now, not at their timeout
    deadline_ = std::chrono::steady_clock::now() + form_timeout_;
    report = report_;
  }
  if (!report)
    return make_error(errc::unavailable, "{}: the group of host '{}' does not form again",
                      why, host_);
  report(failed, why);
  auto g = wait_formed(failed);
  if (!g.ok())
    return g.err();
  base::mutex_lock lock(mtx_);
  used_ = g.value().first;
  used_epoch_ = g.value().second;
  return {};
}

// -- the gate's store -----------------------------------------------------------

namespace {

class caf_gate_store final : public edge::rendezvous_store {
public:
  caf_gate_store(caf::actor_system& sys, caf::actor gate, std::string token)
    : sys_(sys), gate_(std::move(gate)), token_(std::move(token)) {}

  status set(const std::string& key, const std::vector<char>& value) override {
    caf::scoped_actor self{sys_};
    status out = make_error(errc::unavailable,
                            "rendezvous: the coordinator's gate did not answer setting "
                            "key '{}'",
                            key);
    self
      ->request(gate_, std::chrono::seconds(30), store_set_atom::value, token_, key,
                std::string(value.begin(), value.end()))
      .receive([&](caf::ok_atom) { out = status{}; },
               [&](caf::error& e) {
                 out =
                   make_error(errc::unavailable,
                              "rendezvous: setting key '{}' at the coordinator's gate "
                              "failed: {}",
                              key, actors::error_message(sys_, e));
               });
    return out;
  }

  result<std::vector<char>> get(const std::string& key,
                                std::chrono::milliseconds timeout) override {
    caf::scoped_actor self{sys_};
    std::optional<std::vector<char>> value;
    std::string why;
    self->request(gate_, timeout, store_get_atom::value, token_, key)
      .receive([&](std::string& v) { value.emplace(v.begin(), v.end()); },
               [&](caf::error& e) { why = actors::error_message(sys_, e); });
    if (value)
      return std::move(*value);
    return make_error(errc::unavailable,
                      "rendezvous: key '{}' was not set at the coordinator's gate within "
                      "{} ms: {}",
                      key, timeout.count(), why);
  }

private:
  caf::actor_system& sys_;
  caf::actor gate_;
  std::string token_;
};

} // namespace

std::unique_ptr<edge::rendezvous_store> gate_store(caf::actor_system& sys,
                                                   caf::actor gate, std::string token) {
  return std::make_unique<caf_gate_store>(sys, std::move(gate), std::move(token));
}

// -- host_plane -------------------------------------------------------------------

void host_plane::attach(std::shared_ptr<deferred_group> group, caf::actor_system* sys,
                        caf::actor gate, std::string token, data_plane_settings settings,
                        caf::actor replica) {
  // A failed epoch is told to the coordinator, which opens the next one.
  group->on_failure(
    [gate, token, host = group->host_name()](uint64_t epoch, const std::string& why) {
      caf::anon_send(gate, epoch_failed_atom::value, token, epoch, host, why);
    });
  base::mutex_lock lock(mtx_);
  replica_ = std::move(replica);
  group_ = std::move(group);
  sys_ = sys;
  gate_ = std::move(gate);
  token_ = std::move(token);
  settings_ = std::move(settings);
  start();
}

void host_plane::stop() {
  base::mutex_lock lock(mtx_);
  if (replica_)
    caf::anon_send(replica_, actors::stop_atom::value);
}

caf::actor host_plane::replica() {
  base::mutex_lock lock(mtx_);
  return replica_;
}

void host_plane::form(uint64_t epoch, uint64_t rank, uint64_t size) {
  base::mutex_lock lock(mtx_);
  told_ = std::array<uint64_t, 3>{epoch, rank, size};
  start();
}

void host_plane::start() {
  if (!group_ || !told_)
    return;
  // Each epoch once: the group ignores one it was asked for before.
  const auto [epoch, rank, size] = *told_;
  group_->form(epoch, gate_store(*sys_, gate_, token_),
               group_options(settings_, epoch, rank, size));
}

} // namespace troupe::cluster
