#include "runtime/cluster/messages.hpp"

namespace troupe::cluster {

policy_push policy_push_of(const actors::policy_snapshot& snap) {
  policy_push p;
  p.version = snap.version;
  p.params.assign(snap.model.params(), snap.model.params() + snap.model.param_count());
  p.buffers.assign(snap.model.buffers(),
                   snap.model.buffers() + snap.model.buffer_count());
  return p;
}

void register_cluster_messages(caf::actor_system_config& cfg) {
  cfg.add_message_type<join_request>("troupe::cluster::join_request");
  cfg.add_message_type<policy_push>("troupe::cluster::policy_push");
  cfg.add_message_type<door_info>("troupe::cluster::door_info");
  cfg.add_message_type<std::vector<door_info>>("std::vector<troupe::cluster::door_info>");
  cfg.add_message_type<welcome>("troupe::cluster::welcome");
}

} // namespace troupe::cluster
