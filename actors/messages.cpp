#include "actors/messages.hpp"
#include "actors/replica.hpp"

namespace troupe::actors {

caf::error to_caf_error(const troupe::error& e) {
  return caf::error(static_cast<uint8_t>(e.code), error_category,
                    caf::make_message(e.message));
}

std::string error_message(caf::actor_system& sys, const caf::error& e) {
  if (e.category() == error_category && e.context().match_elements<std::string>())
    return e.context().get_as<std::string>(0);
  return sys.render(e);
}

void register_messages(caf::actor_system_config& cfg) {
  cfg.add_message_type<moments_delta>("moments_delta");
  cfg.add_message_type<delta_ack>("delta_ack");
  cfg.add_message_type<delta_acks>("delta_acks");
  cfg.add_message_type<delta_outbox_status>("delta_outbox_status");
  cfg.add_message_type<stream_decl>("stream_decl");
  cfg.add_message_type<stream_status>("stream_status");
  cfg.add_message_type<learners::stats_snapshot>("stats_snapshot");
  cfg.add_message_type<trajectory_batch>("trajectory_batch");
  cfg.add_message_type<env_runner_status>("env_runner_status");
  cfg.add_message_type<envs::vector_env_state>("vector_env_state");
  cfg.add_message_type<env_runner_state>("env_runner_state");
  cfg.add_message_type<gradient_update>("gradient_update");
  cfg.add_message_type<weights_reply>("weights_reply");
  cfg.add_message_type<local_steps>("local_steps");
  cfg.add_message_type<parameter_server_status>("parameter_server_status");
  cfg.add_message_type<parameter_server_state>("parameter_server_state");
  cfg.add_message_type<replica_status>("replica_status");
  cfg.add_message_type<learner_report>("learner_report");
  cfg.add_message_type<std::vector<learner_report>>("std::vector<learner_report>");
  cfg.add_message_type<metrics_counters>("metrics_counters");
  cfg.add_message_type<supervisor_status>("supervisor_status");
  cfg.add_message_type<learner_state>("learner_state");
  cfg.add_message_type<held_runners>("held_runners");
  cfg.add_message_type<cast_snapshot>("cast_snapshot");
  cfg.add_message_type<std::vector<double>>("std::vector<double>");
  cfg.add_error_category(error_category,
                         [](uint8_t code, caf::atom_value, const caf::message& ctx) {
                           std::string out = "troupe: ";
                           out += to_string(static_cast<errc>(code));
                           if (ctx.match_elements<std::string>())
                             out += ": " + ctx.get_as<std::string>(0);
                           return out;
                         });
}

} // namespace troupe::actors
