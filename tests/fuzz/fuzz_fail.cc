#include <cstdio>
#include <cstdlib>

#include "fuzz_input.h"

namespace memd::fuzz {

void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz target check failed: %s\n", what.c_str());
  std::abort();
}

}  // namespace memd::fuzz
