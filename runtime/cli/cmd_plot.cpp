// `troupe plot RUN_DIR... [--out FILE] [--bands]`: learning curves of one run
// (or several, overlaid; with --bands, the median and quartiles of each
// config's seeds) as a self-contained SVG (runtime/cli/plot.hpp).
#include <cstdio>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/plot.hpp"

namespace troupe::runtime {

int cmd_plot(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"out", true, false, "SVG file to write (default RUN_DIR/curve.svg for one run)"},
    {"bands", false, false,
     "one curve per run.name (the seeds of one config): the median over a band "
     "from the first to the third quartile"},
  };
  auto parsed = parse_args("troupe plot", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto usage = [&] {
    return fmt::format("usage: troupe plot RUN_DIR... [--out FILE] [--bands]\n{}",
                       describe_args(specs));
  };
  const auto& dirs = parsed->positional;
  if (dirs.empty())
    return fail(exit_bad_input, fmt::format("plot: RUN_DIR is required\n{}", usage()));
  auto out = parsed->get("out");
  if (!out && dirs.size() > 1)
    return fail(exit_bad_input,
                fmt::format("plot: --out is required with several run folders "
                            "(given {})\n{}",
                            dirs.size(), usage()));
  const std::string out_path =
    out ? *out : (std::filesystem::path(dirs[0]) / "curve.svg").string();
  auto written = write_curves_svg(dirs, out_path, parsed->flag("bands"));
  if (!written) {
    const auto code = written.err().code;
    return fail(code == errc::io_error ? exit_failure : exit_bad_input,
                written.err().message);
  }
  std::printf("wrote %s\n", out_path.c_str());
  return 0;
}

} // namespace troupe::runtime
