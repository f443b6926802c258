// Test-only fault injection and clock replacement for the runtime. Tests run as root, where
// process limits (RLIMIT_NPROC) do not stop a thread from starting, a real clock makes a
// deadline's granularity a matter of luck, and whether a pool worker is scheduled in time is
// up to the OS; these hooks let a test make exactly the Nth thread start fail, decide what
// time it is at every deadline check, and hold a pool worker before it joins a parallel_for. They are internal (not in
// cuvil.h, no environment variable): production code only reads them, and with no hook set
// it costs one relaxed atomic load per use. Both are process-wide, so a test that sets one
// restores it before it ends (ScopedRunClock / the one-shot fault do that).
#pragma once

#include <cstdint>

namespace cuvil::rt::testing {

// The `nth` thread start from now on (1 = the next one, counted over every session of the
// process) fails as if the OS had refused it with `error` (an errno value, e.g. EAGAIN);
// the fault fires once. nth = 0 disarms it.
void inject_thread_start_failure(int nth, int error);

// Replaces the clock that deadlines are measured with (nanoseconds, any origin; must be safe
// to call from several threads at once). nullptr restores std::chrono::steady_clock.
using RunClock = int64_t (*)();
void set_run_clock(RunClock clock);

// Sets a hook for the object's life, then removes it (nullptr).
template <typename Hook, void (*Set)(Hook)>
class ScopedHook {
 public:
  explicit ScopedHook(Hook hook) { Set(hook); }
  ~ScopedHook() { Set(nullptr); }
  ScopedHook(const ScopedHook&) = delete;
  ScopedHook& operator=(const ScopedHook&) = delete;
};
using ScopedRunClock = ScopedHook<RunClock, set_run_clock>;

// Called by every pool worker (runtime/cpu/thread_pool.h) after it sees a new parallel_for
// and before it tries to join its crew, with the worker's index (1 ..); it may block or
// sleep, standing for a worker the OS has not scheduled yet. nullptr (the default) removes it.
// Remove it only while no pool runs, or once the gate function lets every worker through.
using WorkerGate = void (*)(int worker);
void set_worker_gate(WorkerGate gate);
using ScopedWorkerGate = ScopedHook<WorkerGate, set_worker_gate>;

// Lookups by name the runtime has made (an op's kernel by op type, an attribute by name
// scanning a node's list), counted over the process. After a session is made and each node
// has run once, a run makes none (runtime/session.cpp resolves them at load or caches them).
int64_t name_lookup_count();

// Bytes of a KV cache's committed rows that kernels copied (the past rows a fused Attention
// copies into a packed present or a concatenation), counted over the process. Zero per run
// for a state kept in place (runtime/state_layout.h).
int64_t cache_bytes_copied();

// ---- read by the runtime ----

void count_name_lookup();
void count_cache_bytes_copied(int64_t bytes);

// 0, or the errno value the current thread start must fail with (consumes the fault).
int take_thread_start_fault();
// The time for deadline checks, from the hook or steady_clock.
int64_t run_clock_now_ns();
// Runs the worker gate, if one is set.
void pass_worker_gate(int worker);

}  // namespace cuvil::rt::testing
