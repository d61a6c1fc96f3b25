// `troupe bench embed [--json] [--steps N] [--slots N]
//                     [--hz F [--frames N] [--spin] [--batch]]`:
// the game-driven form measured (run_embed_bench, runtime/cli/game_bench.hpp):
// CartPoles stepped on the calling thread act through a game agent while one
// PPO learner trains from their transitions. Reports act() latency (p50,
// p99, max), the env steps per second the game loop made and the learner
// learned from, and the transitions dropped. With --hz the loop sleeps to each frame's
// deadline and reports the first act() of a frame apart, beside the plain-loops control.
#include <cstdio>

#include <fmt/format.h>

#include "runtime/cli/game_bench.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

int bench_embed(const args_t& args) {
  std::vector<arg_spec> specs{
    {"json", false, false, "print one JSON object instead of a table"},
    {"steps", true, false, "env steps the learner trains on (default 200000)"},
    {"slots", true, false, "CartPoles in the game loop, one agent slot each (default 4)"},
    {"seed", true, false, "seed of the model, slots and environments (default 1)"},
    {"hz", true, false,
     "frames per second: sleep to each frame's deadline, then act for every slot "
     "(default 0: unthrottled)"},
    {"frames", true, false, "with --hz: frames played (default 1200)"},
    {"spin", false, false,
     "with --hz: busy-wait to each deadline instead of sleeping, so the core never idles "
     "(a diagnostic: what the first act costs when the caches stay warm)"},
    {"batch", false, false,
     "with --hz: one act_batch() call per frame for every slot instead of one act() "
     "each"}};
  auto parsed = parse_args("bench embed", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  embed_bench_options opts;
  auto steps = parsed->get_int("steps", 200000, 1000, int64_t{1} << 40);
  if (!steps)
    return fail(exit_bad_input, steps.err().message);
  auto slots = parsed->get_int("slots", 4, 1, 4096);
  if (!slots)
    return fail(exit_bad_input, slots.err().message);
  auto seed = parsed->get_int("seed", 1, 0, int64_t{1} << 62);
  if (!seed)
    return fail(exit_bad_input, seed.err().message);
  auto hz = parsed->get_int("hz", 0, 0, 100000);
  if (!hz)
    return fail(exit_bad_input, hz.err().message);
  auto frames = parsed->get_int("frames", 1200, 2, int64_t{1} << 40);
  if (!frames)
    return fail(exit_bad_input, frames.err().message);
  if (*hz == 0 && parsed->flag("spin"))
    return fail(exit_bad_input, "bench embed: --spin needs --hz (it is how the throttled "
                                "loop waits for a frame's deadline)");
  if (*hz == 0 && parsed->flag("batch"))
    return fail(exit_bad_input,
                "bench embed: --batch needs --hz (the throttled loop acts "
                "for a frame's slots in one call)");
  if (*hz == 0 && parsed->flag("frames"))
    return fail(exit_bad_input,
                "bench embed: --frames needs --hz (frames of a throttled "
                "loop); the unthrottled loop runs until --steps are learned");
  opts.frame_hz = static_cast<double>(*hz);
  opts.frames = static_cast<uint64_t>(*frames);
  opts.spin = parsed->flag("spin");
  opts.batch = parsed->flag("batch");
  opts.train_env_steps = static_cast<uint64_t>(*steps);
  opts.slots = static_cast<size_t>(*slots);
  opts.seed = static_cast<uint64_t>(*seed);
  auto r = run_embed_bench(opts);
  if (!r)
    return fail(exit_failure, fmt::format("bench embed: {}", r.err().message));
  if (parsed->flag("json")) {
    runtime::json out;
    out["slots"] = opts.slots;
    out["act_p50_us"] = rounded(r->act_p50_us, 3);
    out["act_p99_us"] = rounded(r->act_p99_us, 3);
    out["act_max_us"] = rounded(r->act_max_us, 1);
    out["act_samples"] = r->act_samples;
    out["game_env_steps"] = r->game_env_steps;
    out["game_env_steps_per_s"] = rounded(r->game_env_steps_per_s, 1);
    out["learned_env_steps"] = r->learned_env_steps;
    out["learned_env_steps_per_s"] = rounded(r->learned_env_steps_per_s, 1);
    out["dropped"] = r->dropped;
    out["episodes"] = r->episodes;
    out["return_mean_100"] = rounded(r->return_mean_100, 2);
    out["seconds"] = rounded(r->seconds, 3);
    if (opts.frame_hz > 0) {
      out["hz"] = *hz;
      out["frames"] = r->frames;
      out["missed_frames"] = r->missed_frames;
      out["wait"] = opts.spin ? "spin" : "sleep";
      out["calls"] = opts.batch ? "act_batch" : "act";
      auto summary = [](const latency_summary& l) {
        runtime::json j;
        j["p50_us"] = rounded(l.p50_us, 3);
        j["p99_us"] = rounded(l.p99_us, 3);
        j["max_us"] = rounded(l.max_us, 1);
        j["samples"] = l.samples;
        return j;
      };
      out["first_act"] = summary(r->first_act);
      out["rest_act"] = summary(r->rest_act);
      out["control_first"] = summary(r->control_first);
      out["control_warm"] = summary(r->control_warm);
    }
    std::fputs(json_line(out).c_str(), stdout);
    return 0;
  }
  fmt::print("game-driven CartPole, {} slots, one PPO learner, {:.1f} s\n", opts.slots,
             r->seconds);
  if (opts.frame_hz > 0) {
    fmt::print(
      "{} frames at {} Hz ({} to each deadline), {} missed; acts and the control "
      "take turns to run first after the wait\n",
      r->frames, *hz, opts.spin ? "busy-waiting" : "sleeping", r->missed_frames);
    fmt::print("{:<34} {:>9} {:>9} {:>9} {:>8}\n", "latency (us)", "p50", "p99", "max",
               "calls");
    auto row = [](const char* what, const latency_summary& l) {
      fmt::print("{:<34} {:>9.2f} {:>9.2f} {:>9.1f} {:>8}\n", what, l.p50_us, l.p99_us,
                 l.max_us, l.samples);
    };
    if (opts.batch) {
      row("act_batch(), first after the wait", r->first_act);
      row("act_batch(), after the control", r->rest_act);
    } else {
      row("act(), first of a frame", r->first_act);
      row("act(), the rest", r->rest_act);
    }
    row("control, first after the wait", r->control_first);
    row("control, after the frame's acts", r->control_warm);
  }
  fmt::print("act() latency over {} calls: p50 {:.2f} us, p99 {:.2f} us, max {:.1f} us\n",
             r->act_samples, r->act_p50_us, r->act_p99_us, r->act_max_us);
  fmt::print("game loop: {} env steps, {:.0f} per s\n", r->game_env_steps,
             r->game_env_steps_per_s);
  fmt::print("learned:   {} env steps, {:.0f} per s\n", r->learned_env_steps,
             r->learned_env_steps_per_s);
  fmt::print("transitions dropped: {}; episodes {}; mean return (last 100) {:.1f}\n",
             r->dropped, r->episodes, r->return_mean_100);
  return 0;
}

} // namespace troupe::runtime
