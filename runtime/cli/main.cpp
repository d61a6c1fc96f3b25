#include "runtime/cli/cli.hpp"

int main(int argc, char** argv) {
  return troupe::runtime::run_cli(argc, argv);
}
