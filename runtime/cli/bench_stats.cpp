// `troupe bench stats [--json]`: throughput of the statistics keeper, latency
// of statistics-view reads while it publishes, and the throughput a consumer
// keeps when the keeper is blocked. See docs/benchmarks.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TROUPE_HAVE_RDTSC 1
#endif

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/messages.hpp"
#include "actors/stats_keeper.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/atoms.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

using clock_type = std::chrono::steady_clock;
using actors::stop_atom;

constexpr size_t bench_dim = 64;
const std::string stream = "bench";

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

actors::moments_delta make_delta(std::mt19937_64& rng, const std::string& worker) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  actors::moments_delta d{stream, worker, 256, std::vector<double>(bench_dim),
                          std::vector<double>(bench_dim)};
  for (size_t j = 0; j < bench_dim; ++j) {
    d.mean[j] = u(rng);
    d.m2[j] = 256.0 * (1.5 + u(rng));
  }
  return d;
}

// Sends `count` deltas (each built anew, as a worker builds one per batch) to
// `dest`, in chunks of `window`: after each chunk it asks for a sync (FIFO
// behind the chunk) and waits for the sync of the chunk before, so at most two
// chunks are in flight and the mailbox never balloons. Then tells `done_to`.
void producer(caf::blocking_actor* self, caf::actor dest, uint64_t count,
              std::string worker, caf::actor done_to) {
  constexpr uint64_t window = 1024;
  std::mt19937_64 rng(std::hash<std::string>{}(worker));
  auto proto = make_delta(rng, worker);
  self->receive([](run_atom) {});
  using handle = decltype(self->request(dest, caf::infinite, actors::sync_atom::value));
  std::optional<handle> previous;
  for (uint64_t sent = 0; sent < count;) {
    for (uint64_t end = std::min(count, sent + window); sent < end; ++sent) {
      actors::moments_delta d = proto;
      d.mean[sent % bench_dim] += 1e-9;
      self->send(dest, std::move(d));
    }
    auto current = self->request(dest, caf::infinite, actors::sync_atom::value);
    if (previous)
      previous->receive([](actors::sync_atom) {}, [](caf::error&) {});
    previous.emplace(std::move(current));
  }
  if (previous)
    previous->receive([](actors::sync_atom) {}, [](caf::error&) {});
  self->send(done_to, actors::sync_atom::value);
}

// The floor: an actor that receives the same deltas and only reads them (a
// sum of their numbers), so that it pays the same cross-core transfer of the
// delta's data as the keeper, but does no validation and no merge.
struct sink_state {
  double checksum = 0;
};

caf::behavior sink(caf::stateful_actor<sink_state>* self) {
  return {
    [self](const actors::moments_delta& d) {
      double s = 0;
      for (size_t j = 0; j < d.mean.size(); ++j)
        s += d.mean[j] + d.m2[j];
      self->state.checksum += s;
    },
    [](actors::sync_atom) { return actors::sync_atom::value; },
  };
}

// Sends `per_tick` deltas every millisecond until stopped: a steady load.
caf::behavior paced_producer(caf::event_based_actor* self, caf::actor dest,
                             uint64_t per_tick) {
  auto rng = std::make_shared<std::mt19937_64>(7);
  auto proto = std::make_shared<actors::moments_delta>(make_delta(*rng, "paced"));
  self->send(self, tick_atom::value);
  return {
    [=](tick_atom) {
      for (uint64_t i = 0; i < per_tick; ++i)
        self->send(dest, *proto);
      self->delayed_send(self, std::chrono::milliseconds(1), tick_atom::value);
    },
    [=](stop_atom) { self->quit(); },
  };
}

void declare(caf::scoped_actor& self, const caf::actor& keeper) {
  self
    ->request(keeper, caf::infinite, actors::declare_atom::value, stream,
              uint64_t{bench_dim})
    .receive([](uint64_t) {}, [](caf::error&) {});
}

// Deltas per second handled by `dest` from two producers.
double two_producer_rate(caf::actor_system& sys, const caf::actor& dest,
                         uint64_t per_producer) {
  caf::scoped_actor self{sys};
  auto a =
    sys.spawn(producer, dest, per_producer, std::string{"producer-a"}, caf::actor{self});
  auto b =
    sys.spawn(producer, dest, per_producer, std::string{"producer-b"}, caf::actor{self});
  auto t0 = clock_type::now();
  self->send(a, run_atom::value);
  self->send(b, run_atom::value);
  for (int i = 0; i < 2; ++i)
    self->receive([](actors::sync_atom) {});
  return 2.0 * static_cast<double>(per_producer) / seconds_since(t0);
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

// -- view-read latency -------------------------------------------------------

// Percentiles of one kind of read; NaN where no read of that kind happened.
struct latency_percentiles {
  double p50_ns = std::nan(""), p99_ns = std::nan(""), p999_ns = std::nan("");
  uint64_t reads = 0;
};

// Reads that found a new snapshot (an atomic exchange and cache misses on
// data another core wrote) and reads with nothing new (one relaxed load) have
// different costs; mixing them would let the many cheap reads hide the
// expensive ones, so they are reported apart.
struct latency_result {
  latency_percentiles fresh; ///< reads that swapped in a newer snapshot
  latency_percentiles same;  ///< reads that found nothing new
};

double ticks_per_ns() {
#ifdef TROUPE_HAVE_RDTSC
  auto t0 = clock_type::now();
  auto c0 = __rdtsc();
  while (seconds_since(t0) < 0.05) {
  }
  auto c1 = __rdtsc();
  return static_cast<double>(c1 - c0) / (seconds_since(t0) * 1e9);
#else
  return 1.0;
#endif
}

inline uint64_t now_ticks() {
#ifdef TROUPE_HAVE_RDTSC
  _mm_lfence();
  return __rdtsc();
#else
  return static_cast<uint64_t>(clock_type::now().time_since_epoch().count());
#endif
}

// Latency of view reads while a keeper merges 200k deltas/s and publishes
// every `publish_every` merges (1: the worst case for readers; each new
// snapshot costs the reader cache misses on data written by another core).
latency_result view_read_latency(caf::actor_system& sys, uint64_t samples,
                                 uint64_t publish_every) {
  actors::stats_keeper_options opts;
  opts.publish_every_merges = publish_every;
  auto keeper = actors::spawn_stats_keeper(sys, opts);
  caf::scoped_actor self{sys};
  declare(self, keeper);
  auto subscribed = actors::subscribe_view(sys, keeper, stream, bench_dim);
  TROUPE_CHECK(subscribed.ok(), "a local keeper answers: {}",
               subscribed.ok() ? "" : subscribed.err().message);
  auto view = *subscribed;
  auto load = sys.spawn(paced_producer, keeper, uint64_t{200});
  std::vector<uint32_t> fresh_ticks, same_ticks;
  same_ticks.reserve(samples);
  const double per_ns = ticks_per_ns();
  uint64_t last_version = 0;
  double sink_value = 0;
  for (uint64_t i = 0; i < samples; ++i) {
    auto t0 = now_ticks();
    const auto& s = view->read();
    sink_value += s.mean[i % bench_dim];
    auto t1 = now_ticks();
    auto t = static_cast<uint32_t>(std::min<uint64_t>(t1 - t0, UINT32_MAX));
    if (s.version != last_version) {
      fresh_ticks.push_back(t);
      last_version = s.version;
    } else {
      same_ticks.push_back(t);
    }
  }
  self->send(load, stop_atom::value);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
  // Keeps the reads' results alive without touching what is reported.
  volatile double keep = sink_value;
  (void)keep;
  auto percentiles = [&](std::vector<uint32_t>& ticks) {
    latency_percentiles out;
    out.reads = ticks.size();
    if (ticks.empty())
      return out;
    std::sort(ticks.begin(), ticks.end());
    auto pct = [&](double p) {
      return ticks[std::min<size_t>(
               ticks.size() - 1,
               static_cast<size_t>(p * static_cast<double>(ticks.size())))] /
             per_ns;
    };
    out.p50_ns = pct(0.50);
    out.p99_ns = pct(0.99);
    out.p999_ns = pct(0.999);
    return out;
  };
  latency_result r;
  r.fresh = percentiles(fresh_ticks);
  r.same = percentiles(same_ticks);
  return r;
}

// -- stalled keeper ----------------------------------------------------------

// Iterations per second of a loop doing fixed work (normalizing one
// observation with the snapshot) plus one view read per iteration.
double consumer_rate(learners::stats_view& view, uint64_t iterations) {
  std::vector<float> obs(bench_dim), out(bench_dim);
  for (size_t j = 0; j < bench_dim; ++j)
    obs[j] = static_cast<float>(j) * 0.1f;
  double acc = 0;
  auto t0 = clock_type::now();
  for (uint64_t i = 0; i < iterations; ++i) {
    const auto& s = view.read();
    for (size_t j = 0; j < bench_dim; ++j)
      out[j] = static_cast<float>((obs[j] - s.mean[j]) / std::sqrt(s.var[j] + 1e-8));
    acc += out[i % bench_dim];
    obs[i % bench_dim] += 1e-6f;
  }
  double secs = seconds_since(t0);
  if (acc == 1.2345) // keeps the loop's results alive
    std::fputs("", stderr);
  return static_cast<double>(iterations) / secs;
}

// The keeper runs in an actor system of its own with one scheduler thread; to
// stall it, a blocker actor holds that thread, so that neither the keeper nor
// the view's feeder can run while the consumer reads.
double stalled_consumer_rate(bool stall, uint64_t iterations) {
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cfg.set("scheduler.max-threads", size_t{1});
  caf::actor_system sys{cfg};
  auto keeper = actors::spawn_stats_keeper(sys, actors::stats_keeper_options{});
  caf::scoped_actor self{sys};
  declare(self, keeper);
  auto subscribed = actors::subscribe_view(sys, keeper, stream, bench_dim);
  TROUPE_CHECK(subscribed.ok(), "a local keeper answers: {}",
               subscribed.ok() ? "" : subscribed.err().message);
  auto view = *subscribed;
  auto load = sys.spawn(paced_producer, keeper, uint64_t{100});
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  if (stall) {
    sys.spawn([&entered, released] {
      entered.set_value();
      released.wait();
    });
    TROUPE_CHECK(entered.get_future().wait_for(std::chrono::seconds(30)) ==
                   std::future_status::ready,
                 "the blocker takes the scheduler thread within 30 s");
  }
  double rate = consumer_rate(*view, iterations);
  release.set_value();
  self->send(load, stop_atom::value);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
  return rate;
}

} // namespace

int bench_stats(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"json", false, false, "print one JSON object"},
    {"deltas", true, false, "deltas per producer for merges_per_s (default 500000)"},
    {"repeats", true, false,
     "repetitions of each measurement; the median is reported (default 3)"},
    {"reads", true, false, "view reads timed per publication rate (default 4000000)"},
  };
  auto parsed = parse_args("troupe bench stats", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  if (!parsed->positional.empty())
    return fail(exit_bad_input, fmt::format("bench stats: unexpected argument '{}'",
                                            parsed->positional[0]));
  auto deltas = parsed->get_int("deltas", 500000, 1000, 1000000000);
  auto repeats = parsed->get_int("repeats", 3, 1, 100);
  auto reads = parsed->get_int("reads", 4000000, 1000, 1000000000);
  if (!reads)
    return fail(exit_bad_input, reads.err().message);
  if (!deltas)
    return fail(exit_bad_input, deltas.err().message);
  if (!repeats)
    return fail(exit_bad_input, repeats.err().message);
  const bool json = parsed->flag("json");
  auto say = [&](const std::string& line) {
    if (!json)
      std::printf("%s\n", line.c_str());
  };

  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  // One scheduler thread per core (CAF's default is at least 4).
  cfg.set("scheduler.max-threads",
          static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency())));
  caf::actor_system sys{cfg};
  const auto threads = sys.scheduler().num_workers();

  // Merges per second and the raw-CAF floor.
  std::vector<double> merge_rates, raw_rates;
  for (int64_t r = 0; r < *repeats; ++r) {
    actors::stats_keeper_options opts;
    opts.publish_every_merges = 1u << 30;
    opts.publish_interval_ms = 0;
    auto keeper = actors::spawn_stats_keeper(sys, opts);
    {
      caf::scoped_actor self{sys};
      declare(self, keeper);
    }
    merge_rates.push_back(two_producer_rate(sys, keeper, static_cast<uint64_t>(*deltas)));
    auto s = sys.spawn(sink);
    raw_rates.push_back(two_producer_rate(sys, s, static_cast<uint64_t>(*deltas)));
    caf::anon_send_exit(keeper, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  }
  double merges = median(merge_rates), raw = median(raw_rates);
  say(fmt::format(
    "merges_per_s        {:>14.0f}  (dim {}, 2 producers, {} scheduler threads)", merges,
    bench_dim, threads));
  say(fmt::format(
    "raw_caf_msgs_per_s  {:>14.0f}  (same deltas to an actor that only reads them)",
    raw));
  say(fmt::format("merge/raw ratio     {:>14.3f}", merges / raw));

  const uint64_t default_every = actors::stats_keeper_options{}.publish_every_merges;
  auto lat = view_read_latency(sys, static_cast<uint64_t>(*reads), default_every);
  auto worst = view_read_latency(sys, static_cast<uint64_t>(*reads), 1);
  auto say_reads = [&](const char* kind, const latency_percentiles& p,
                       const std::string& how) {
    say(fmt::format("read_ns {:<12} p50 {:.1f}  p99 {:.1f}  p99.9 {:.1f}  ({} reads; {})",
                    kind, p.p50_ns, p.p99_ns, p.p999_ns, p.reads, how));
  };
  const auto every_default =
    fmt::format("keeper publishing every {} merges of 200k/s", default_every);
  say_reads("new snapshot", lat.fresh, every_default);
  say_reads("nothing new", lat.same, every_default);
  say_reads("new snapshot", worst.fresh, "keeper publishing on every merge");
  say_reads("nothing new", worst.same, "keeper publishing on every merge");

  std::vector<double> normal, stalled;
  const uint64_t iterations = 5 * static_cast<uint64_t>(*reads);
  for (int64_t r = 0; r < *repeats; ++r) {
    normal.push_back(stalled_consumer_rate(false, iterations));
    stalled.push_back(stalled_consumer_rate(true, iterations));
  }
  double ratio = median(stalled) / median(normal);
  say(fmt::format("consumer iterations/s: keeper running {:.0f}, keeper blocked {:.0f}",
                  median(normal), median(stalled)));
  say(fmt::format("stalled_keeper_throughput_ratio {:.3f}", ratio));

  if (json) {
    // A percentile of a kind of read that never happened is null.
    auto reads_json = [](const latency_percentiles& p) {
      runtime::json out;
      out["reads"] = p.reads;
      out["p50"] = rounded(p.p50_ns, 2);
      out["p99"] = rounded(p.p99_ns, 2);
      out["p999"] = rounded(p.p999_ns, 2);
      return out;
    };
    runtime::json out;
    out["merges_per_s"] = rounded(merges, 0);
    out["raw_caf_msgs_per_s"] = rounded(raw, 0);
    out["merge_to_raw_ratio"] = rounded(merges / raw, 4);
    out["publish_every_merges"] = default_every;
    out["read_ns_new_snapshot"] = reads_json(lat.fresh);
    out["read_ns_nothing_new"] = reads_json(lat.same);
    out["read_ns_new_snapshot_every_merge"] = reads_json(worst.fresh);
    out["read_ns_nothing_new_every_merge"] = reads_json(worst.same);
    out["consumer_iters_per_s_keeper_running"] = rounded(median(normal), 0);
    out["consumer_iters_per_s_keeper_blocked"] = rounded(median(stalled), 0);
    out["stalled_keeper_throughput_ratio"] = rounded(ratio, 4);
    out["dim"] = bench_dim;
    out["producers"] = 2;
    out["scheduler_threads"] = threads;
    std::fputs(json_line(out).c_str(), stdout);
  }
  return 0;
}

} // namespace troupe::runtime
