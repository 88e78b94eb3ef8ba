#include "cli/interrupt.h"

#include <atomic>

namespace tracecache::cli {

namespace {

// Written only by the handler; lock-free, so reading it from the step loop is well defined.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void record_signal(int signal) { g_signal.store(signal, std::memory_order_relaxed); }

// Installs record_signal for `signal` unless the process inherited it as ignored. SA_RESETHAND
// puts the default action back as the handler runs (a second signal ends the process);
// SA_RESTART keeps the step's own system calls (file writes, SQLite) from failing with EINTR.
bool install(int signal, struct sigaction* previous) {
  if (sigaction(signal, nullptr, previous) != 0 || previous->sa_handler == SIG_IGN) return false;
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  return sigaction(signal, &action, nullptr) == 0;
}

}  // namespace

Interrupt::Interrupt() {
  g_signal.store(0, std::memory_order_relaxed);
  installed_int_ = install(SIGINT, &previous_int_);
  installed_term_ = install(SIGTERM, &previous_term_);
}

Interrupt::~Interrupt() {
  if (installed_int_) sigaction(SIGINT, &previous_int_, nullptr);
  if (installed_term_) sigaction(SIGTERM, &previous_term_, nullptr);
}

int Interrupt::signal() const { return g_signal.load(std::memory_order_relaxed); }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace tracecache::cli
