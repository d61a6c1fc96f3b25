// `troupe bench allreduce [--json] [--members LIST] [--doubles N] [--rounds R]`:
// the data plane's round measured (docs/cluster.md, "The data plane"). For
// each member count, that many threads of this process form a Gloo group on
// loopback TCP (edge/gloo_collective) and all-reduce N doubles R times, as
// the replicas do once per round; rank 0 times each all-reduce. The floor, in
// the same run: the same threads moving the same bytes around a ring of raw
// loopback TCP sockets in the same 2(members-1) steps a ring all-reduce takes
// (a chunk of N/members doubles to the next member, one from the previous),
// with no reduction and no framing. Reports p50, p99 and mean microseconds
// per round and the ratio of the floor's mean to Gloo's.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "edge/gloo_collective.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

using bench_clock = std::chrono::steady_clock;

struct round_figures {
  size_t members = 0;
  double p50_us = 0, p99_us = 0, mean_us = 0;                   // Gloo
  double floor_p50_us = 0, floor_p99_us = 0, floor_mean_us = 0; // raw TCP ring
};

struct spread {
  double p50 = 0, p99 = 0, mean = 0;
};

spread spread_of(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  spread s;
  s.p50 = us[us.size() / 2];
  s.p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  double sum = 0;
  for (double x : us)
    sum += x;
  s.mean = sum / static_cast<double>(us.size());
  return s;
}

// Gloo: `members` threads, `rounds` all-reduces of `doubles` after 10 to warm
// up; rank 0's time of each.
result<spread> measure_gloo(size_t members, size_t doubles, size_t rounds) {
  edge::memory_store store;
  std::vector<std::vector<double>> times(members);
  std::vector<std::string> errors(members);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < members; ++r)
    threads.emplace_back([&, r] {
      edge::gloo_group_options o;
      o.rank = r;
      o.size = members;
      o.prefix = "bench";
      o.timeout = std::chrono::seconds(60);
      auto g = edge::connect_gloo_group(store, o);
      if (!g.ok()) {
        errors[r] = g.err().message;
        return;
      }
      std::vector<double> buf(doubles, 1.0 + static_cast<double>(r));
      for (size_t k = 0; k < rounds + 10; ++k) {
        const auto t0 = bench_clock::now();
        if (auto s = g.value()->allreduce_sum(buf.data(), buf.size()); !s.ok()) {
          errors[r] = s.err().message;
          return;
        }
        if (k >= 10)
          times[r].push_back(
            std::chrono::duration<double, std::micro>(bench_clock::now() - t0).count());
      }
    });
  for (auto& t : threads)
    t.join();
  for (auto& e : errors)
    if (!e.empty())
      return make_error(errc::unavailable, "{}", e);
  return spread_of(times[0]);
}

// Writes `out` to `to` and reads `in` from `from` at once (non-blocking, so
// that two neighbours both sending a chunk larger than a socket buffer never
// wait on each other).
bool exchange(int to, const char* out, int from, char* in, size_t bytes) {
  size_t sent = 0, got = 0;
  while (sent < bytes || got < bytes) {
    pollfd fds[2] = {{to, static_cast<short>(sent < bytes ? POLLOUT : 0), 0},
                     {from, static_cast<short>(got < bytes ? POLLIN : 0), 0}};
    if (::poll(fds, 2, 10000) <= 0)
      return false;
    if (sent < bytes && (fds[0].revents & POLLOUT)) {
      const ssize_t n = ::send(to, out + sent, bytes - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN)
        return false;
      sent += n > 0 ? static_cast<size_t>(n) : 0;
    }
    if (got < bytes && (fds[1].revents & (POLLIN | POLLHUP))) {
      const ssize_t n = ::recv(from, in + got, bytes - got, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN))
        return false;
      got += n > 0 ? static_cast<size_t>(n) : 0;
    }
  }
  return true;
}

// The floor: a ring of loopback TCP connections, member i sending to i+1.
result<spread> measure_floor(size_t members, size_t doubles, size_t rounds) {
  if (members == 1)
    return spread{};
  std::vector<int> to(members, -1), from(members, -1);
  auto close_all = [&] {
    for (int fd : to)
      if (fd >= 0)
        ::close(fd);
    for (int fd : from)
      if (fd >= 0)
        ::close(fd);
  };
  for (size_t i = 0; i < members; ++i) {
    // Member i+1 listens; member i connects.
    const int lis = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (lis < 0 || ::bind(lis, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(lis, 1) != 0 ||
        ::getsockname(lis, reinterpret_cast<sockaddr*>(&a), &len)) {
      close_all();
      return make_error(errc::unavailable, "bench allreduce: loopback socket: {}",
                        std::strerror(errno));
    }
    to[i] = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(to[i], reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(lis);
      close_all();
      return make_error(errc::unavailable, "bench allreduce: connect: {}",
                        std::strerror(errno));
    }
    from[(i + 1) % members] = ::accept(lis, nullptr, nullptr);
    ::close(lis);
    const int one = 1;
    for (int fd : {to[i], from[(i + 1) % members]}) {
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
  }
  const size_t chunk = (doubles + members - 1) / members * sizeof(double);
  std::vector<std::vector<double>> times(members);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (size_t r = 0; r < members; ++r)
    threads.emplace_back([&, r] {
      std::vector<char> out(chunk, 1), in(chunk);
      for (size_t k = 0; k < rounds + 10 && !failed; ++k) {
        const auto t0 = bench_clock::now();
        for (size_t step = 0; step < 2 * (members - 1); ++step)
          if (!exchange(to[r], out.data(), from[r], in.data(), chunk)) {
            failed = true;
            return;
          }
        if (k >= 10)
          times[r].push_back(
            std::chrono::duration<double, std::micro>(bench_clock::now() - t0).count());
      }
    });
  for (auto& t : threads)
    t.join();
  close_all();
  if (failed)
    return make_error(errc::unavailable, "bench allreduce: the raw TCP ring failed");
  return spread_of(times[0]);
}

} // namespace

int bench_allreduce(const args_t& args) {
  std::vector<arg_spec> specs{
    {"json", false, false, "print one JSON object instead of a table"},
    {"members", true, false, "group sizes to measure, comma-separated (default 2,3,4)"},
    {"doubles", true, false,
     "doubles per all-reduce (default 9168: the CartPole model's round)"},
    {"rounds", true, false, "all-reduces timed per group size (default 2000)"}};
  auto parsed = parse_args("bench allreduce", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto doubles = parsed->get_int("doubles", 9168, 1, int64_t{1} << 28);
  if (!doubles)
    return fail(exit_bad_input, doubles.err().message);
  auto rounds = parsed->get_int("rounds", 2000, 10, 10000000);
  if (!rounds)
    return fail(exit_bad_input, rounds.err().message);
  std::vector<size_t> counts;
  {
    std::stringstream in(parsed->get("members").value_or("2,3,4"));
    std::string item;
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      const long n = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || n < 1 || n > 64)
        return fail(exit_bad_input,
                    fmt::format("bench allreduce: --members takes numbers in [1, 64] "
                                "separated by commas, got '{}'",
                                item));
      counts.push_back(static_cast<size_t>(n));
    }
  }
  std::vector<round_figures> rows;
  for (size_t m : counts) {
    auto g = measure_gloo(m, static_cast<size_t>(*doubles), static_cast<size_t>(*rounds));
    if (!g)
      return fail(exit_failure, fmt::format("bench allreduce: {}", g.err().message));
    auto f =
      measure_floor(m, static_cast<size_t>(*doubles), static_cast<size_t>(*rounds));
    if (!f)
      return fail(exit_failure, f.err().message);
    rows.push_back({m, g->p50, g->p99, g->mean, f->p50, f->p99, f->mean});
  }
  if (parsed->flag("json")) {
    runtime::json out;
    out["doubles"] = *doubles;
    out["rounds"] = *rounds;
    runtime::json list = runtime::json::array();
    for (auto& r : rows) {
      runtime::json j;
      j["members"] = r.members;
      j["round_us_p50"] = rounded(r.p50_us, 1);
      j["round_us_p99"] = rounded(r.p99_us, 1);
      j["round_us_mean"] = rounded(r.mean_us, 1);
      j["floor_us_p50"] = rounded(r.floor_p50_us, 1);
      j["floor_us_p99"] = rounded(r.floor_p99_us, 1);
      j["floor_us_mean"] = rounded(r.floor_mean_us, 1);
      j["floor_over_gloo"] =
        rounded(r.mean_us > 0 ? r.floor_mean_us / r.mean_us : 0.0, 3);
      list.push_back(j);
    }
    out["runs"] = list;
    std::fputs(json_line(out).c_str(), stdout);
    return 0;
  }
  fmt::print("all-reduce of {} doubles ({} bytes) over loopback TCP, {} rounds each; the "
             "floor: the ring's bytes over raw sockets\n",
             *doubles, *doubles * 8, *rounds);
  fmt::print("{:>8} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12} {:>8}\n", "members",
             "p50 us", "p99 us", "mean us", "floor p50", "floor p99", "floor mean",
             "ratio");
  for (auto& r : rows)
    fmt::print(
      "{:>8} {:>10.1f} {:>10.1f} {:>10.1f} {:>12.1f} {:>12.1f} {:>12.1f} {:>8.3f}\n",
      r.members, r.p50_us, r.p99_us, r.mean_us, r.floor_p50_us, r.floor_p99_us,
      r.floor_mean_us, r.mean_us > 0 ? r.floor_mean_us / r.mean_us : 0.0);
  return 0;
}

} // namespace troupe::runtime
