#include "base/delivery_ledger.hpp"

namespace troupe::base {

delivery_verdict delivery_ledger::admit(const sender_id& sender,
                                        const std::string& channel, uint64_t first,
                                        uint64_t last, sequence_gaps gaps) {
  if (is_fenced(sender))
    return delivery_verdict::fenced;
  auto key = std::make_tuple(sender.first, sender.second, channel);
  auto found = accepted_.find(key);
  const uint64_t prev = found == accepted_.end() ? 0 : found->second;
  if (last <= prev)
    return delivery_verdict::duplicate;
  if (gaps == sequence_gaps::refused && first != prev + 1)
    return delivery_verdict::gap;
  if (found == accepted_.end())
    accepted_.emplace(std::move(key), last);
  else
    found->second = last;
  return delivery_verdict::accepted;
}

uint64_t delivery_ledger::last_accepted(const sender_id& sender,
                                        const std::string& channel) const {
  auto found = accepted_.find(std::make_tuple(sender.first, sender.second, channel));
  return found == accepted_.end() ? 0 : found->second;
}

std::map<std::string, uint64_t>
delivery_ledger::channels_of(const sender_id& sender) const {
  std::map<std::string, uint64_t> out;
  for (auto i = accepted_.lower_bound({sender.first, sender.second, std::string{}});
       i != accepted_.end() && std::get<0>(i->first) == sender.first &&
       std::get<1>(i->first) == sender.second;
       ++i)
    out.emplace(std::get<2>(i->first), i->second);
  return out;
}

} // namespace troupe::base
