// Run traces: what a session's runs did, when and on which thread, written as Trace Event
// JSON (the format chrome://tracing and Perfetto open). A session records into a
// TraceRecorder only while tracing is enabled; the run reads that flag once when it starts,
// so a run without tracing reads no clock and records nothing. An event holds indices into
// the Program, not strings: the names of the ONNX nodes (CallOp) and tile kernels (named
// after the last node they run) are spelled only when the JSON is written.
//
// Tracks: tid 0 is the thread that called run (its slices: run, bind, and one per kernel
// call); tid w >= 1 is worker w of the session's pool, with one slice per kernel call in
// which it took chunks, from the start of its first chunk to the end of its last.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/program.h"

namespace cuvil::rt {

// The most events one recording keeps; later ones are counted as dropped (reported in the
// JSON's metadata) so that tracing a long run cannot exhaust memory.
constexpr size_t kMaxTraceEvents = size_t{1} << 20;

int64_t trace_clock_ns();  // steady_clock, nanoseconds

struct TraceEvent {
  enum class Kind : uint8_t { kRun, kBind, kOp, kKernel, kWorker };
  Kind kind = Kind::kRun;
  uint8_t is_op = 0;      // kWorker: the kernel call was a CallOp (index = node), else a tile kernel
  uint16_t tid = 0;       // 0 = calling thread, w = worker w
  uint16_t program = 0;   // the package's program (bucket) the indices refer to
  uint32_t index = 0;     // kOp: node; kKernel: tile kernel; kWorker: see is_op; kRun: run number
  uint32_t pc = 0;        // kOp, kKernel, kWorker: the instruction
  int64_t begin_ns = 0, end_ns = 0;
  int64_t chunks = 0;     // kWorker: chunks the worker ran
  int32_t status = 0;     // kRun: the run's StatusCode
};

class TraceRecorder {
 public:
  void clear() {
    events_.clear();
    dropped_ = 0;
    runs_ = 0;
  }
  void add(const TraceEvent& e) {
    if (events_.size() < kMaxTraceEvents) {
      events_.push_back(e);
    } else {
      ++dropped_;
    }
  }
  uint32_t next_run() { return runs_++; }
  const std::vector<TraceEvent>& events() const { return events_; }
  int64_t dropped() const { return dropped_; }
  // The Trace Event JSON of everything recorded since the last clear(); times in
  // microseconds from the first event. `threads` names the tracks (the pool's size);
  // `programs` are the package's programs, which events name by index (TraceEvent::program).
  std::string to_json(const std::vector<Program>& programs, int threads) const;

 private:
  std::vector<TraceEvent> events_;
  int64_t dropped_ = 0;
  uint32_t runs_ = 0;
};

}  // namespace cuvil::rt
