// The hosts' data plane of a run across processes (docs/cluster.md, "The data
// plane"): every host with learners runs a replica of the parameter server, and the
// replicas all-reduce through a Gloo group that meets through a store the coordinator's
// gate serves.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <array>
#include <functional>
#include <vector>
#include <thread>
#include <utility>

#include <caf/all.hpp>

#include "actors/collective.hpp"
#include "actors/replica.hpp"
#include "actors/supervisor.hpp"
#include "base/error.hpp"
#include "base/mutex.hpp"
#include "edge/gloo_collective.hpp"
#include "runtime/config.hpp"

namespace troupe::cluster {

/// The gate's rendezvous store: set a key (value as bytes in a string).
using store_set_atom = caf::atom_constant<caf::atom("store_set")>;
/// The gate's rendezvous store: a key's value, answered once it is set.
using store_get_atom = caf::atom_constant<caf::atom("store_get")>;
/// To a host actor: form the group (epoch, rank, size).
using form_atom = caf::atom_constant<caf::atom("form")>;

/// The [cluster] keys of the data plane.
struct data_plane_settings {
  /// Worker hosts with learners the group waits for before its first round;
  /// 0: it forms with the members there are (the coordinator alone when it
  /// has learners, else the first host with learners to join) and again at
  /// each join.
  uint64_t hosts = 0;
  /// This host's data address: cluster.data_interface, else the coordinator's
  /// listen host (empty for a coordinator without learners listening on a
  /// wildcard); a worker's own (--data-interface, or the address its
  /// connection to the coordinator leaves from).
  std::string interface;
  std::chrono::milliseconds round_timeout{30000}; ///< cluster.round_timeout_ms
  /// How long the group may take to form after the coordinator starts
  /// (cluster.reconnect_s, the time a worker may take to come, plus a round).
  std::chrono::milliseconds form_timeout{90000};
};

/// The data plane's settings from cfg; an error naming the key when the
/// data interface is a wildcard, or none for a coordinator with learners.
result<data_plane_settings> data_plane_from(const runtime::config& cfg);

/// Tells the coordinator that the group of `epoch` failed (`why`).
using epoch_failed_atom = caf::atom_constant<caf::atom("epoch_fail")>;

/// A member host's replica as it leaves, to the gate: (final_state_atom,
/// token, host, parameter_server_state, replica_status); a coordinator out of
/// the group keeps the newest in its standby replica.
using final_state_atom = caf::atom_constant<caf::atom("final_st")>;

/// A collective that is formed later, and formed again in each new epoch:
/// its operations wait until a group is formed (or its forming failed, or
/// `form_timeout` passed), then run on that Gloo group. After a failed
/// operation reform() reports the failure and waits for a newer epoch's group.
class deferred_group final : public actors::collective {
public:
  /// Called by reform() with the failed epoch and why (tells the coordinator).
  using failure_report = std::function<void(uint64_t epoch, const std::string& why)>;

  /// A group that `host` (a name for messages) will join.
  deferred_group(std::string host, std::chrono::milliseconds form_timeout);
  ~deferred_group() override;
  deferred_group(const deferred_group&) = delete;
  deferred_group& operator=(const deferred_group&) = delete;

  /// Where reform() reports a failed epoch.
  void on_failure(failure_report report) TROUPE_EXCLUDES(mtx_);

  /// The host's name.
  const std::string& host_name() const { return host_; }

  /// Forms the group of `epoch` on a thread of its own: joins through `store`
  /// as `o` says. An epoch not newer than the last one asked for is ignored;
  /// an operation under way on an older group is aborted.
  void form(uint64_t epoch, std::unique_ptr<edge::rendezvous_store> store,
            edge::gloo_group_options o) TROUPE_EXCLUDES(mtx_);

  size_t rank() const override TROUPE_EXCLUDES(mtx_);
  size_t size() const override TROUPE_EXCLUDES(mtx_);
  status allreduce_sum(double* data, size_t count) override TROUPE_EXCLUDES(mtx_);
  status broadcast(void* data, size_t bytes, size_t root) override TROUPE_EXCLUDES(mtx_);
  std::string describe() const override TROUPE_EXCLUDES(mtx_);
  void abort() override TROUPE_EXCLUDES(mtx_);
  status ready() override TROUPE_EXCLUDES(mtx_);
  status reform(const std::string& why) override TROUPE_EXCLUDES(mtx_);
  bool forms_again() const override { return true; }

private:
  // The group once one newer than `after` is formed, with its epoch; an
  // error when its forming failed or the deadline passed.
  result<std::pair<std::shared_ptr<actors::collective>, uint64_t>>
  wait_formed(uint64_t after) TROUPE_EXCLUDES(mtx_);
  // The group this member works in (the first formed, then the one reform()
  // moved to); an error once a newer epoch is asked for.
  result<std::shared_ptr<actors::collective>> in_use() TROUPE_EXCLUDES(mtx_);

  std::string host_;
  std::chrono::milliseconds form_timeout_;
  mutable base::mutex mtx_;
  std::condition_variable formed_cv_;
  std::chrono::steady_clock::time_point deadline_ TROUPE_GUARDED_BY(mtx_);
  std::shared_ptr<actors::collective> group_ TROUPE_GUARDED_BY(mtx_);
  uint64_t formed_epoch_ TROUPE_GUARDED_BY(mtx_) = 0;                // group_'s epoch
  std::shared_ptr<actors::collective> used_ TROUPE_GUARDED_BY(mtx_); // in use
  uint64_t used_epoch_ TROUPE_GUARDED_BY(mtx_) = 0;                  // used_'s epoch
  uint64_t asked_epoch_ TROUPE_GUARDED_BY(mtx_) = 0;  // the newest form() call's
  uint64_t failed_epoch_ TROUPE_GUARDED_BY(mtx_) = 0; // the newest forming that failed
  std::string failure_ TROUPE_GUARDED_BY(mtx_);       // and why
  failure_report report_ TROUPE_GUARDED_BY(mtx_);
  std::vector<std::thread> threads_ TROUPE_GUARDED_BY(mtx_);
};

/// The store a host reaches through the coordinator's gate (over CAF; every
/// request carries the run's token): each get waits up to its timeout.
std::unique_ptr<edge::rendezvous_store> gate_store(caf::actor_system& sys,
                                                   caf::actor gate, std::string token);

/// The replica settings of a host from the parameter server's settings of
/// its plan (the same config on every host) and its learners.
actors::replica_options
replica_options_for(const actors::parameter_server_options& server, uint64_t learners,
                    const std::string& host);

/// What a worker host attaches its group to: the form message may come
/// before the worker has set up its replica, or after.
class host_plane {
public:
  /// The group and where to meet: forms it now if the form message came.
  void attach(std::shared_ptr<deferred_group> group, caf::actor_system* sys,
              caf::actor gate, std::string token, data_plane_settings settings,
              caf::actor replica) TROUPE_EXCLUDES(mtx_);
  /// The run ends: the replica stops (answers its learners, starts no round).
  void stop() TROUPE_EXCLUDES(mtx_);
  /// The replica once attached; null before.
  caf::actor replica() TROUPE_EXCLUDES(mtx_);
  /// The gate's form message: forms the group now if it is attached.
  void form(uint64_t epoch, uint64_t rank, uint64_t size) TROUPE_EXCLUDES(mtx_);

private:
  void start() TROUPE_REQUIRES(mtx_);
  base::mutex mtx_;
  std::shared_ptr<deferred_group> group_ TROUPE_GUARDED_BY(mtx_);
  caf::actor_system* sys_ TROUPE_GUARDED_BY(mtx_) = nullptr;
  caf::actor gate_ TROUPE_GUARDED_BY(mtx_);
  caf::actor replica_ TROUPE_GUARDED_BY(mtx_);
  std::string token_ TROUPE_GUARDED_BY(mtx_);
  data_plane_settings settings_ TROUPE_GUARDED_BY(mtx_);
  std::optional<std::array<uint64_t, 3>> told_ TROUPE_GUARDED_BY(mtx_);
};

/// The options of rank `rank` of `size` in epoch `epoch`.
edge::gloo_group_options group_options(const data_plane_settings& s, uint64_t epoch,
                                       uint64_t rank, uint64_t size);

} // namespace troupe::cluster
