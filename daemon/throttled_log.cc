#include "daemon/throttled_log.h"

namespace memd::daemon {

bool ThrottledWarning::due(uint64_t* left_out) {
  Clock::time_point now = Clock::now();
  if (now < next_) {
    ++left_out_;
    return false;
  }
  next_ = now + interval_;
  *left_out = left_out_;
  left_out_ = 0;
  return true;
}

}  // namespace memd::daemon
