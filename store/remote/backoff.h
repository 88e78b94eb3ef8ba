// Backoff: when the remote cache tier may be tried again after failing (no retry storm: a
// process whose server is down or hanging pays one timeout, then skips the tier until the wait is
// over). The wait starts at `initial_s` and doubles with every failure in a row up to `max_s`; a
// success resets it.
//
// Time is passed in (seconds on a monotonic clock), so tests drive it with a fake clock; the
// remote client reads its clock through RemoteClock.
// Thread-safety: not thread-safe (one owner). Errors: none.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>

namespace tracecache::store {

// Seconds on a monotonic clock; the default reads std::chrono::steady_clock.
using RemoteClock = std::function<double()>;
inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct BackoffOptions {
  double initial_s = 1.0;
  double max_s = 30.0;
};

class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}) : options_(options) {}

  // True unless a failure's wait has not passed yet at `now`.
  bool may_try(double now) const { return failures_ == 0 || now >= retry_at_; }
  // A failure at `now`: wait initial_s * 2^(failures in a row - 1), at most max_s.
  void failed(double now) {
    wait_s_ = failures_ == 0 ? options_.initial_s : std::min(wait_s_ * 2, options_.max_s);
    ++failures_;
    retry_at_ = now + wait_s_;
  }
  void succeeded() {
    failures_ = 0;
    wait_s_ = 0;
  }
  int failures_in_a_row() const { return failures_; }
  double wait_s() const { return wait_s_; }

 private:
  BackoffOptions options_;
  int failures_ = 0;
  double wait_s_ = 0;
  double retry_at_ = 0;
};

}  // namespace tracecache::store
