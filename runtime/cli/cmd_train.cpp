// `troupe train CONFIG [--set section.key=value ...] [--resume RUN_DIR]`.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/plot.hpp"
#include "runtime/config.hpp"
#include "runtime/train.hpp"

namespace troupe::runtime {

int cmd_train(const args_t& args) {
  const std::vector<arg_spec> specs = {
    {"set", true, true, "override one option: --set section.key=value"},
    {"resume", true, false, "continue RUN_DIR from its newest complete checkpoint"},
  };
  auto parsed = parse_args("train", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto resume = parsed->get("resume");
  if (parsed->positional.size() > 1)
    return fail(exit_bad_input, "train takes one CONFIG file, got " +
                                  std::to_string(parsed->positional.size()));
  if (parsed->positional.empty() && !resume)
    return fail(exit_bad_input,
                "usage: troupe train CONFIG [--set section.key=value ...] "
                "[--resume RUN_DIR]\n" +
                  describe_args(specs));
  // A resumed run continues with its own resolved config (overrides still apply).
  std::string path = parsed->positional.empty() ? std::string{} : parsed->positional[0];
  if (resume) {
    if (!std::filesystem::is_directory(*resume))
      return fail(exit_bad_input, "--resume " + *resume + ": not a run folder");
    path = (std::filesystem::path(*resume) / "config.toml").string();
  }
  auto cfg = load_config(path, parsed->all("set"));
  if (!cfg)
    return fail(exit_bad_input, cfg.err().message);
  auto out = run_training(*cfg, resume ? *resume : std::string{});
  if (!out) {
    // A config or a run folder that cannot be used (no run there, a damaged
    // or mismatched checkpoint) is bad input; a failure while training is not.
    const bool bad = out.err().code == errc::not_found ||
                     out.err().code == errc::bad_config ||
                     out.err().code == errc::bad_input ||
                     out.err().code == errc::corrupt_file ||
                     out.err().code == errc::invalid_argument;
    return fail(bad ? exit_bad_input : exit_failure, out.err().message);
  }
  if (auto ok = write_curve_svg(out->run_dir,
                                (std::filesystem::path(out->run_dir) / "curve.svg").string());
      !ok)
    std::fprintf(stderr, "troupe: curve.svg: %s\n", ok.err().message.c_str());
  std::printf("run folder: %s\nenv_steps %llu  updates %llu  return_mean_100 %.2f%s\n",
              out->run_dir.c_str(), static_cast<unsigned long long>(out->env_steps),
              static_cast<unsigned long long>(out->updates), out->return_mean_100,
              out->interrupted ? "  (interrupted)" : "");
  return 0;
}

} // namespace troupe::runtime
