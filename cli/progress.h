// Progress of a long cuvilc compile on a terminal: one status line on standard error,
// rewritten in place ("cuvilc: [3/5] lowering bucket 2 of 4"), cleared when the compile ends.
// Quiet when standard error is not a terminal (CI logs, pipes, tests) or CUVIL_NO_PROGRESS
// is set, so nothing but the final summary line reaches logs.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

namespace cuvil {

class Progress {
 public:
  Progress() : enabled_(::isatty(STDERR_FILENO) == 1 && !std::getenv("CUVIL_NO_PROGRESS")) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const { return enabled_; }
  // Replaces the status line (erase to the end of the line: ESC [ K).
  void show(const std::string& text) {
    if (!enabled_) return;
    std::cerr << "\r\033[Kcuvilc: " << text << std::flush;
    shown_ = true;
  }
  void clear() {
    if (!enabled_ || !shown_) return;
    std::cerr << "\r\033[K" << std::flush;
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
};

}  // namespace cuvil
