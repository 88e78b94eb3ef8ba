// Interrupt: Ctrl-C (SIGINT) or SIGTERM ends a long command (`run`, `zoo run`, `zoo train`) after
// its current step instead of at once, so that it can say where it stopped, print its summary so
// far and write the replay counts it holds to the database (docs/cache.md, "Interrupting a run").
// While an Interrupt lives, the first such signal only records itself; the signal's default
// action is back in place at once, so a second Ctrl-C ends the process immediately (a step that
// hangs can still be stopped). A signal the process inherited as ignored (a background job of a
// non-interactive shell, nohup) stays ignored. The destructor restores the previous actions.
// Thread-safety: at most one Interrupt at a time per process (the signal state is the
// process's); signal() may be read from any thread. Errors: none; a handler that cannot be
// installed leaves that signal's previous action.
#pragma once

#include <csignal>

namespace tracecache::cli {

class Interrupt {
 public:
  Interrupt();
  ~Interrupt();
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  // The signal received while this Interrupt lived (SIGINT or SIGTERM), or 0.
  int signal() const;
  bool requested() const { return signal() != 0; }

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
  bool installed_int_ = false;
  bool installed_term_ = false;
};

// The exit code of a command ended by `signal`: 128 + its number, as a shell reports it (130 for
// Ctrl-C, 143 for SIGTERM).
constexpr int interrupted_exit_code(int signal) { return 128 + signal; }

// "SIGINT", "SIGTERM" (else "a signal").
const char* signal_name(int signal);

}  // namespace tracecache::cli
