// Trace Event JSON for the events a TraceRecorder holds (runtime/trace.h): complete events
// ("ph": "X") with microsecond times, plus metadata events naming the process and the thread
// tracks. Names come from the Program, escaped for JSON (node names are arbitrary strings).
#include "runtime/trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "support/json_text.h"

namespace cuvil::rt {
namespace {

// Microseconds with nanosecond precision: the format's times are in microseconds.
void append_us(std::string& out, int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  out += buf;
}

}  // namespace

int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string TraceRecorder::to_json(const std::vector<Program>& programs, int threads) const {
  int64_t origin = INT64_MAX;
  for (const TraceEvent& e : events_) origin = std::min(origin, e.begin_ns);
  if (events_.empty()) origin = 0;
  std::string out = "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"cuvil\",\"dropped_events\":" +
                    std::to_string(dropped_) + "},\"traceEvents\":[\n";
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"cuvil session\"}}";
  for (int t = 0; t < threads; ++t) {
    out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(t) +
           ",\"args\":{\"name\":\"" + (t == 0 ? std::string("caller") : "worker " + std::to_string(t)) + "\"}}";
    out += ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(t) +
           ",\"args\":{\"sort_index\":" + std::to_string(t) + "}}";
  }
  for (const TraceEvent& e : events_) {
    const Program& program = programs[e.program < programs.size() ? e.program : 0];
    std::string name, cat, args;
    auto node_args = [&](uint32_t node) {
      const NodeRecord& n = program.nodes[node];
      std::string a = "\"node\":";
      append_json_string(a, n.name);
      a += ",\"op_type\":";
      append_json_string(a, n.op_type);
      if (!n.domain.empty()) {
        a += ",\"domain\":";
        append_json_string(a, n.domain);
      }
      return a;
    };
    auto kernel_args = [&](uint32_t kernel) {
      std::string a = "\"kernel\":";
      append_json_string(a, program.kernels[kernel].name);
      return a;
    };
    switch (e.kind) {
      case TraceEvent::Kind::kRun:
        name = "run";
        cat = "run";
        args = "\"run\":" + std::to_string(e.index) + ",\"status\":" + std::to_string(e.status);
        break;
      case TraceEvent::Kind::kBind:
        name = "bind";
        cat = "run";
        args = "\"run\":" + std::to_string(e.index);
        break;
      case TraceEvent::Kind::kOp:
        name = program.nodes[e.index].name;
        cat = "op";
        args = node_args(e.index) + ",\"pc\":" + std::to_string(e.pc);
        break;
      case TraceEvent::Kind::kKernel:
        name = program.kernels[e.index].name;
        cat = "kernel";
        args = kernel_args(e.index) + ",\"pc\":" + std::to_string(e.pc);
        break;
      case TraceEvent::Kind::kWorker:
        name = e.is_op ? program.nodes[e.index].name : program.kernels[e.index].name;
        cat = e.is_op ? "op" : "kernel";
        args = (e.is_op ? node_args(e.index) : kernel_args(e.index)) + ",\"pc\":" + std::to_string(e.pc) +
               ",\"chunks\":" + std::to_string(e.chunks);
        break;
    }
    out += ",\n{\"name\":";
    append_json_string(out, name);
    out += ",\"cat\":\"" + cat + "\",\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(e.tid) + ",\"ts\":";
    append_us(out, e.begin_ns - origin);
    out += ",\"dur\":";
    append_us(out, std::max<int64_t>(0, e.end_ns - e.begin_ns));
    out += ",\"args\":{" + args + "}}";
  }
  out += "\n]}\n";
  return out;
}

}  // namespace cuvil::rt
