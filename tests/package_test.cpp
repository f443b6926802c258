// The .cuvir package (runtime/package.h), the program verifier (runtime/verifier.h) and the
// disassembler (runtime/disasm.h), without the compiler: programs are built by hand here.
// Suite Package: round trips, determinism, the documented layout, the manifest, the text
// form. Suite BadPackage: one named test per package bad input of RELIABILITY.md (and a few
// more); each must give a non-ok Status whose message names the problem, and never crash
// (scripts run these under ASan+UBSan too). Mutated packages are "resealed" (checksums
// recomputed) when the mutation must get past the checksums to reach the verifier.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "runtime/crc32.h"
#include "runtime/disasm.h"
#include "runtime/package.h"
#include "runtime/session.h"
#include "runtime/verifier.h"

namespace cuvil::rt {
namespace {

using Bytes = std::vector<uint8_t>;

// ---- a small hand-built program ----
//   y = tanh(relu(x) + w)   with x, y : f32[N, 4], w : f32[4] (a weight), relu as a CallOp
//   and the rest as one tile kernel.
uint32_t word(Opcode op) { return static_cast<uint32_t>(op); }
uint32_t word(TileOpcode op) { return static_cast<uint32_t>(op); }
uint32_t word(UnaryFn f) { return static_cast<uint32_t>(f); }
uint32_t word(BinaryFn f) { return static_cast<uint32_t>(f); }

// Expression ids of make_program().
enum : uint32_t { kExprN = 0, kExpr4 = 1, kExpr1 = 2, kExpr0 = 3, kExprArena = 4 };

Program make_program() {
  Program p;
  p.symbols = {{"N", 1, 64, false}};
  using K = ExprOpKind;
  p.expr_code = {{K::kSymbol, 0}, {K::kConst, 4}, {K::kConst, 1}, {K::kConst, 0},
                 {K::kSymbol, 0}, {K::kConst, 16}, {K::kMul, 0}};
  p.exprs = {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 3}};  // N, 4, 1, 0, N*16

  TensorDesc x{"x", TensorKind::kInput, DType::Float, {kExprN, kExpr4}, 0, 0, 0, kNone};
  TensorDesc r{"r", TensorKind::kIntermediate, DType::Float, {kExprN, kExpr4}, kNone, 0, 0, kExpr0};
  TensorDesc w{"w", TensorKind::kWeight, DType::Float, {kExpr4}, kNone, 0, 16, kNone};
  TensorDesc y{"y", TensorKind::kOutput, DType::Float, {kExprN, kExpr4}, 0, 0, 0, kNone};
  p.tensors = {x, r, w, y};
  p.inputs = {0};
  p.outputs = {3};

  NodeRecord relu;
  relu.op_type = "Relu";
  relu.name = "relu0";
  relu.opset = 14;
  relu.inputs = {0};
  relu.outputs = {1};
  p.nodes = {relu};

  TileKernel k;
  k.name = "add_tanh";
  k.domain = {kExprN, kExpr4};
  k.maps = {{1, kExpr0, {kExpr4, kExpr1}},   // m0: r
            {2, kExpr0, {kExpr0, kExpr1}},   // m1: w, broadcast over rows
            {3, kExpr0, {kExpr4, kExpr1}}};  // m2: y
  k.registers = 3;
  k.body = {word(TileOpcode::Load),   0, 0,
            word(TileOpcode::Load),   1, 1,
            word(TileOpcode::Binary), word(BinaryFn::Add), 2, 0, 1,
            word(TileOpcode::Unary),  word(UnaryFn::Tanh), 2, 2,
            word(TileOpcode::Store),  2, 2};
  p.kernels = {k};

  p.code = {word(Opcode::CallOp), 0, word(Opcode::RunKernel), 0, word(Opcode::End)};
  p.arena_size = kExprArena;
  p.weights_size = 16;
  return p;
}

PackageContents make_contents() {
  PackageContents c;
  c.manifest = render_manifest({{"cuvil-version", "0.1.0"},
                                {"model", "tiny"},
                                {"input", "x f32 [N, 4]"},
                                {"output", "y f32 [N, 4]"},
                                {"symbol", "N 1..64"},
                                {"option", "opt-level=2"}});
  const float w[4] = {0.5f, -1.f, 2.f, 0.f};
  c.weights.resize(sizeof w);
  std::memcpy(c.weights.data(), w, sizeof w);
  c.programs.push_back({make_program(), {}});
  c.report = "fused 1 kernel\n";
  return c;
}

PackageContents make_two_program_contents();

// ---- byte-level access to a package, per docs/format.md ----
template <typename T>
T get(const Bytes& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
template <typename T>
void set(Bytes& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}
enum EntryField : size_t { kKind = 0, kFlags = 4, kOffset = 8, kSize = 16, kAlign = 24, kCrc = 28 };

size_t entry_at(const Bytes& b, size_t index) {
  return get<uint32_t>(b, 20) + kSectionEntrySize * index;
}
// Table index of the first section of `kind`.
size_t find_entry(const Bytes& b, SectionKind kind) {
  const uint32_t n = get<uint32_t>(b, 16);
  for (size_t i = 0; i < n; ++i)
    if (get<uint32_t>(b, entry_at(b, i) + kKind) == static_cast<uint32_t>(kind)) return i;
  ADD_FAILURE() << "no section " << section_kind_name(static_cast<uint32_t>(kind));
  return 0;
}
uint64_t section_offset(const Bytes& b, SectionKind kind) {
  return get<uint64_t>(b, entry_at(b, find_entry(b, kind)) + kOffset);
}

// Recomputes the checksum of every section whose bounds are inside the file, so that a
// mutated package gets past the checksums and reaches the decoder and verifier.
void reseal(Bytes& b) {
  if (b.size() < kHeaderSize) return;
  const uint64_t header_size = get<uint32_t>(b, 20);
  const uint64_t n = get<uint32_t>(b, 16);
  for (uint64_t i = 0; i < n && header_size + kSectionEntrySize * (i + 1) <= b.size(); ++i) {
    const size_t at = header_size + kSectionEntrySize * i;
    const uint64_t off = get<uint64_t>(b, at + kOffset), size = get<uint64_t>(b, at + kSize);
    if (off <= b.size() && size <= b.size() - off) set<uint32_t>(b, at + kCrc, crc32c(b.data() + off, size));
  }
}

Status open_bytes(const Bytes& b, std::shared_ptr<LoadedPackage>* pkg = nullptr) {
  std::shared_ptr<LoadedPackage> local;
  return LoadedPackage::open_memory(b.data(), b.size(), /*copy=*/true, pkg ? pkg : &local);
}

// The package of make_contents() after `mutate` changed its program: the writer does not
// verify, so the loader's verifier must catch it.
Status open_with_program(const std::function<void(Program&)>& mutate) {
  PackageContents c = make_contents();
  mutate(c.programs[0].program);
  return open_bytes(write_package(c));
}

#define EXPECT_REFUSED(status_expr, substring)                                  \
  do {                                                                          \
    const Status st_ = (status_expr);                                           \
    EXPECT_FALSE(st_.is_ok()) << "expected a failure mentioning: " << substring; \
    EXPECT_EQ(st_.code(), StatusCode::kInvalidPackage) << st_.message();        \
    EXPECT_NE(st_.message().find(substring), std::string::npos)                 \
        << "message: " << st_.message() << "\nexpected to contain: " << substring; \
  } while (0)

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cuvil_pkg_XXXXXX";
    path_ = mkdtemp(tmpl) ? tmpl : "";
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// ============================== Package ==============================

TEST(Package, RoundTripThroughMemory) {
  const PackageContents c = make_contents();
  const Bytes bytes = write_package(c);
  std::shared_ptr<LoadedPackage> pkg;
  Status st = open_bytes(bytes, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(encode_program(pkg->program()), encode_program(c.programs[0].program));
  EXPECT_EQ(pkg->program().tensors.size(), 4u);
  EXPECT_EQ(pkg->program().nodes[0].op_type, "Relu");
  EXPECT_EQ(pkg->program().kernels[0].body, c.programs[0].program.kernels[0].body);
  EXPECT_EQ(pkg->manifest().text, c.manifest);
  ASSERT_NE(pkg->manifest().find("model"), nullptr);
  EXPECT_EQ(*pkg->manifest().find("model"), "tiny");
  EXPECT_EQ(*pkg->manifest().find("format"), "3.0");
  EXPECT_EQ(pkg->manifest().find_all("input"), std::vector<std::string>{"x f32 [N, 4]"});
  ASSERT_EQ(pkg->weights_size(), c.weights.size());
  EXPECT_EQ(0, std::memcmp(pkg->weights(), c.weights.data(), c.weights.size()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pkg->weights()) % kWeightsAlignment, 0u);
  EXPECT_EQ(pkg->report(), c.report);
  EXPECT_EQ(pkg->format_major(), 3);
  EXPECT_EQ(pkg->format_minor(), 0);
  EXPECT_EQ(pkg->sections().size(), 5u);
}

TEST(Package, OpenMemoryInPlaceUsesTheCallersBytes) {
  const Bytes bytes = write_package(make_contents());
  void* buf = std::aligned_alloc(64, (bytes.size() + 63) / 64 * 64);
  std::memcpy(buf, bytes.data(), bytes.size());
  std::shared_ptr<LoadedPackage> pkg;
  Status st = LoadedPackage::open_memory(buf, bytes.size(), /*copy=*/false, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(pkg->data(), buf);
  EXPECT_EQ(pkg->weights(), static_cast<uint8_t*>(buf) + section_offset(bytes, SectionKind::WEIGHTS));
  pkg.reset();
  std::free(buf);
}

TEST(Package, OpenMemoryInPlaceRefusesMisalignedBytes) {
  const Bytes bytes = write_package(make_contents());
  std::vector<uint8_t> buf(bytes.size() + 64);
  uint8_t* p = buf.data();
  while (reinterpret_cast<uintptr_t>(p) % 64 != 1) ++p;
  std::memcpy(p, bytes.data(), bytes.size());
  std::shared_ptr<LoadedPackage> pkg;
  Status st = LoadedPackage::open_memory(p, bytes.size(), /*copy=*/false, &pkg);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("aligned"), std::string::npos) << st.message();
  EXPECT_EQ(pkg, nullptr);
  // The same bytes load when copied.
  EXPECT_TRUE(LoadedPackage::open_memory(p, bytes.size(), /*copy=*/true, &pkg).is_ok());
}

TEST(Package, OpenFileMapsAndVerifies) {
  TempDir dir;
  const PackageContents c = make_contents();
  const Bytes bytes = write_package(c);
  const std::string path = dir.path() + "/tiny.cuvir";
  write_file(path, bytes);
  std::shared_ptr<LoadedPackage> pkg;
  Status st = LoadedPackage::open_file(path, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(encode_program(pkg->program()), encode_program(c.programs[0].program));
  EXPECT_EQ(0, std::memcmp(pkg->weights(), c.weights.data(), c.weights.size()));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pkg->weights()) % kWeightsAlignment, 0u);
  // The package outlives the name.
  ::unlink(path.c_str());
  EXPECT_EQ(pkg->program().nodes[0].op_type, "Relu");
}

TEST(Package, DeterministicBytes) {
  const Bytes a = write_package(make_contents());
  const Bytes b = write_package(make_contents());
  EXPECT_EQ(a, b);
  // Loading and re-writing gives the same bytes again.
  std::shared_ptr<LoadedPackage> pkg;
  ASSERT_TRUE(open_bytes(a, &pkg).is_ok());
  PackageContents again;
  again.manifest = pkg->manifest().text;
  again.weights.assign(pkg->weights(), pkg->weights() + pkg->weights_size());
  again.programs.push_back({pkg->program(), {}});
  again.report = pkg->report();
  EXPECT_EQ(write_package(again), a);
}

// The checked-in package tests/fuzz/corpus/fuzz_package/tiny.bin (also the fuzzer's seed) must
// equal what this version writes and must load: a change of the format or of the PROGRAM
// encoding shows up here. CUVIL_UPDATE_GOLDEN=1 rewrites it after an intended change.
TEST(Package, GoldenPackageBytes) {
  const std::string path = std::string(CUVIL_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_package/tiny.bin";
  const Bytes bytes = write_package(make_contents());
  const char* update = std::getenv("CUVIL_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") write_file(path, bytes);
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing " << path << " (run with CUVIL_UPDATE_GOLDEN=1)";
  const Bytes golden((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, golden) << path << " differs from what write_package produces "
                           << "(CUVIL_UPDATE_GOLDEN=1 rewrites it)";
  std::shared_ptr<LoadedPackage> pkg;
  Status st = LoadedPackage::open_file(path, &pkg);
  EXPECT_TRUE(st.is_ok()) << st.message();
}

// The same for a package with two programs and guards (the fuzzer's seed for PROGRAMS and
// BUCKETS): tests/fuzz/corpus/fuzz_package/two_programs.bin.
TEST(Package, GoldenTwoProgramPackageBytes) {
  const std::string path = std::string(CUVIL_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_package/two_programs.bin";
  const Bytes bytes = write_package(make_two_program_contents());
  const char* update = std::getenv("CUVIL_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") write_file(path, bytes);
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing " << path << " (run with CUVIL_UPDATE_GOLDEN=1)";
  const Bytes golden((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, golden) << path << " differs from what write_package produces (CUVIL_UPDATE_GOLDEN=1 rewrites it)";
}

TEST(Package, LayoutMatchesTheFormatDocument) {
  const Bytes b = write_package(make_contents());
  EXPECT_EQ(0, std::memcmp(b.data(), "CUVIR\0\r\n", 8));
  EXPECT_EQ(get<uint16_t>(b, 8), 3);        // major
  EXPECT_EQ(get<uint16_t>(b, 10), 0);       // minor
  EXPECT_EQ(get<uint32_t>(b, 12), 0u);      // feature bits
  EXPECT_EQ(get<uint32_t>(b, 16), 5u);      // sections
  EXPECT_EQ(get<uint32_t>(b, 20), 32u);     // header size
  EXPECT_EQ(get<uint64_t>(b, 24), b.size()); // file size
  const uint32_t kinds[] = {1, 5, 3, 4, 2};  // MANIFEST, BUCKETS, PROGRAMS, REPORT, WEIGHTS
  uint64_t prev_end = 32 + 5 * 32;
  for (size_t i = 0; i < 5; ++i) {
    const size_t at = entry_at(b, i);
    EXPECT_EQ(get<uint32_t>(b, at + kKind), kinds[i]);
    EXPECT_EQ(get<uint32_t>(b, at + kFlags), kinds[i] == 4 ? 0u : 1u);
    const uint64_t off = get<uint64_t>(b, at + kOffset), size = get<uint64_t>(b, at + kSize);
    const uint32_t align = get<uint32_t>(b, at + kAlign);
    EXPECT_EQ(align, kinds[i] == 2 ? 64u : 8u);
    EXPECT_EQ(off % align, 0u);
    EXPECT_GE(off, prev_end);
    EXPECT_EQ(get<uint32_t>(b, at + kCrc), crc32c(b.data() + off, size));
    for (uint64_t o = prev_end; o < off; ++o) EXPECT_EQ(b[o], 0) << "padding at " << o;
    prev_end = off + size;
  }
  EXPECT_EQ(prev_end, b.size());
}

TEST(Package, ReportIsOptional) {
  PackageContents c = make_contents();
  c.report.clear();
  const Bytes b = write_package(c);
  EXPECT_EQ(get<uint32_t>(b, 16), 4u);
  std::shared_ptr<LoadedPackage> pkg;
  ASSERT_TRUE(open_bytes(b, &pkg).is_ok());
  EXPECT_EQ(pkg->report(), "");
}

TEST(Package, EmptyWeightsSection) {
  PackageContents c = make_contents();
  c.weights.clear();
  c.programs[0].program.weights_size = 0;
  c.programs[0].program.tensors[2].weight_size = 0;
  c.programs[0].program.tensors[2].dims = {kExpr0};  // w : f32[0]
  std::shared_ptr<LoadedPackage> pkg;
  Status st = open_bytes(write_package(c), &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(pkg->weights_size(), 0u);
}

TEST(Package, UnknownNonCriticalSectionIsSkipped) {
  Bytes b = write_package(make_contents());
  set<uint32_t>(b, entry_at(b, find_entry(b, SectionKind::REPORT)) + kKind, 77);
  std::shared_ptr<LoadedPackage> pkg;
  Status st = open_bytes(b, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(pkg->report(), "");
  EXPECT_EQ(pkg->sections()[3].kind, 77u);
}

TEST(Package, NewerMinorVersionIsAccepted) {
  Bytes b = write_package(make_contents());
  set<uint16_t>(b, 10, 7);
  // The manifest repeats the version; a 3.7 writer would write 3.7 there too.
  PackageContents c = make_contents();
  c.manifest = "format: 3.7\nmodel: tiny\n";
  b = write_package(c);
  set<uint16_t>(b, 10, 7);
  std::shared_ptr<LoadedPackage> pkg;
  Status st = open_bytes(b, &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(pkg->format_minor(), 7);
}

TEST(Package, Crc32cKnownValueAndBothImplementationsAgree) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xE3069283u);
  std::mt19937 rng(7);
  Bytes data(4099);
  for (auto& v : data) v = static_cast<uint8_t>(rng());
  for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 4099}) {
    EXPECT_EQ(crc32c(data.data(), n), crc32c_portable(data.data(), n)) << n;
    EXPECT_EQ(crc32c(data.data() + n / 2, n - n / 2, crc32c(data.data(), n / 2)), crc32c(data.data(), n));
  }
}

// ---- several programs (format 3: PROGRAMS and BUCKETS) ----

// make_program() without the tanh: y = relu(x) + w.
Program make_program_without_tanh() {
  Program p = make_program();
  TileKernel& k = p.kernels[0];
  k.body = {word(TileOpcode::Load),   0, 0,
            word(TileOpcode::Load),   1, 1,
            word(TileOpcode::Binary), word(BinaryFn::Add), 2, 0, 1,
            word(TileOpcode::Store),  2, 2};
  return p;
}

// Program 0 (tanh) for N in [1, 8], program 1 (no tanh) for the rest.
PackageContents make_two_program_contents() {
  PackageContents c = make_contents();
  c.programs[0].guard.ranges = {{0, 1, 8}};
  c.programs.push_back({make_program_without_tanh(), {}});
  return c;
}

TEST(Package, SeveralProgramsRoundTrip) {
  const PackageContents c = make_two_program_contents();
  std::shared_ptr<LoadedPackage> pkg;
  Status st = open_bytes(write_package(c), &pkg);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_EQ(pkg->programs().size(), 2u);
  ASSERT_EQ(pkg->guards().size(), 2u);
  EXPECT_EQ(encode_program(pkg->programs()[1]), encode_program(c.programs[1].program));
  ASSERT_EQ(pkg->guards()[0].ranges.size(), 1u);
  EXPECT_EQ(pkg->guards()[0].ranges[0].hi, 8);
  EXPECT_EQ(guard_to_string(pkg->guards()[0], pkg->program()), "N in [1, 8]");
  EXPECT_EQ(guard_to_string(pkg->guards()[1], pkg->program()), "always");
}

// A session binds the shapes, picks the first program whose guard holds, and switches back
// and forth between runs.
TEST(Package, SessionRunsTheProgramWhoseGuardHolds) {
  std::shared_ptr<LoadedPackage> pkg;
  const Bytes bytes = write_package(make_two_program_contents());
  ASSERT_TRUE(open_bytes(bytes, &pkg).is_ok());
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::create(pkg, SessionOptions{2, 0}, &session).is_ok());
  const float w[4] = {0.5f, -1.f, 2.f, 0.f};
  for (int64_t n : {4, 20, 8, 9, 1, 64}) {
    std::vector<float> x(static_cast<size_t>(n) * 4, 1.f);
    ASSERT_TRUE(session->set_input(0, DType::Float, {n, 4}, x.data(), x.size() * 4).is_ok());
    Status st = session->run();
    ASSERT_TRUE(st.is_ok()) << st.message();
    const bool small = n <= 8;
    EXPECT_EQ(session->program_index(), small ? 0u : 1u) << "N = " << n;
    const TensorView* y = session->output(0);
    ASSERT_NE(y, nullptr);
    ASSERT_EQ(y->dims, (std::vector<int64_t>{n, 4}));
    for (int64_t i = 0; i < n * 4; ++i) {
      const float expect = small ? std::tanh(1.f + w[i % 4]) : 1.f + w[i % 4];
      ASSERT_FLOAT_EQ(y->as<float>()[i], expect) << "N = " << n << " element " << i;
    }
  }
}

// Writes make_two_program_contents() changed by `mutate`; the loader must refuse it.
Status open_two_programs(const std::function<void(PackageContents&)>& mutate) {
  PackageContents c = make_two_program_contents();
  mutate(c);
  return open_bytes(write_package(c));
}

TEST(BadPackage, BucketGuards) {
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs[1].guard.ranges = {{0, 9, 64}}; }),
                 "BUCKETS section: the last program's guard must be empty");
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs[0].guard.ranges = {{3, 1, 8}}; }),
                 "BUCKETS section: guard 0 range 0: symbol 3 out of range (1 symbols)");
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs[0].guard.ranges = {{0, 1, 100}}; }),
                 "range [1, 100] of 'N' is empty or outside its declared range [1, 64]");
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs[0].guard.ranges = {{0, 8, 1}}; }),
                 "range [8, 1] of 'N' is empty");
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) {
                   c.programs[0].guard.ranges = {{0, 1, 8}, {0, 2, 3}};
                 }),
                 "symbol 'N' appears twice in one guard");
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) {
                   c.programs[0].program.symbols[0].data_dependent = true;
                   c.programs[1].program.symbols[0].data_dependent = true;
                 }),
                 "symbol 'N' is data-dependent");
}

TEST(BadPackage, ProgramsDisagree) {
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs[1].program.symbols[0].hi = 32; }),
                 "PROGRAMS section: program 1's symbol table differs from program 0's");
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs[1].program.tensors[0].name = "z"; }),
                 "PROGRAMS section: program 1 input 0 ('z') differs from program 0's ('x')");
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs[1].program.tensors[3].dims[1] = kExprN; }),
                 "PROGRAMS section: program 1 output 0 ('y') differs");
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs.clear(); }),
                 "PROGRAMS section: holds no program");
  // Each program goes through the verifier, not only the first.
  EXPECT_REFUSED(open_two_programs([](PackageContents& c) { c.programs[1].program.kernels[0].registers = 99; }),
                 "PROGRAMS section: program 1: ");
}

TEST(BadPackage, BucketAndProgramCountsDisagree) {
  Bytes b = write_package(make_two_program_contents());
  set<uint32_t>(b, section_offset(b, SectionKind::BUCKETS), 1);
  reseal(b);
  EXPECT_REFUSED(open_bytes(b), "BUCKETS section: 1 guards for 2 programs (one per program)");
  b = write_package(make_two_program_contents());
  set<uint32_t>(b, section_offset(b, SectionKind::PROGRAMS), 300);
  reseal(b);
  EXPECT_REFUSED(open_bytes(b), "PROGRAMS section: ");
}

// A reserved kind (runtime/sections.def) flagged critical is refused with its owner named. PTX
// is read (runtime/ptx_section.h): other bytes labelled PTX are refused as a malformed section.
TEST(BadPackage, ReservedCriticalSection) {
  Bytes b = write_package(make_contents());
  const size_t at = entry_at(b, find_entry(b, SectionKind::REPORT));
  set<uint32_t>(b, at + kKind, static_cast<uint32_t>(SectionKind::QUANT));
  set<uint32_t>(b, at + kFlags, kSectionCritical);
  EXPECT_REFUSED(open_bytes(b), "section 3 (QUANT): this section kind is reserved for issue 11 (W8A8)");
  set<uint32_t>(b, at + kKind, static_cast<uint32_t>(SectionKind::PTX));
  set<uint32_t>(b, at + kFlags, 0);
  EXPECT_REFUSED(open_bytes(b), "PTX section: truncated record count");
}

// docs/format.md's "Section kinds" table lists every row of runtime/sections.def with its
// kind, name, presence and critical flag.
TEST(Package, SectionTableIsDocumented) {
  std::ifstream in(std::string(CUVIL_SOURCE_DIR) + "/docs/format.md");
  ASSERT_TRUE(in.good());
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const SectionInfo& info : section_table()) {
    std::string row = "| " + std::to_string(info.kind) + " ";
    while (row.size() < 7) row += ' ';
    row += "| " + std::string(info.name);
    const size_t at = doc.find(row);
    ASSERT_NE(at, std::string::npos) << "docs/format.md has no row starting '" << row << "'";
    const std::string line = doc.substr(at, doc.find('\n', at) - at);
    EXPECT_NE(line.find(info.once ? "exactly once" : "at most once"), std::string::npos) << line;
    EXPECT_NE(line.find(info.critical ? "| yes " : "| no "), std::string::npos) << line;
    EXPECT_NE(line.find(info.reserved ? "reserved" : "read"), std::string::npos) << line;
  }
}

TEST(Package, ManifestRenderAndParse) {
  const std::string text = render_manifest({{"model", "a\nb"}, {"input", " x f32 [N] "}});
  EXPECT_EQ(text, "format: 3.0\nmodel: a b\ninput:  x f32 [N] \n");
  Manifest m;
  ASSERT_TRUE(parse_manifest(text + "# a comment\n\nempty:\n", &m).is_ok());
  ASSERT_EQ(m.entries.size(), 4u);
  EXPECT_EQ(m.entries[2].key, "input");
  EXPECT_EQ(m.entries[2].value, "x f32 [N]");
  EXPECT_EQ(m.entries[3].value, "");
  EXPECT_EQ(m.find("missing"), nullptr);

  EXPECT_REFUSED(parse_manifest("model tiny\n", &m), "line 1: expected 'key: value'");
  EXPECT_REFUSED(parse_manifest("a: b\nbad key: x\n", &m), "line 2: invalid key 'bad key'");
  EXPECT_REFUSED(parse_manifest("a: b\r\n", &m), "line 1: control character 0xd");
  EXPECT_REFUSED(parse_manifest(std::string("a: b\0c\n", 7), &m), "control character 0x0");
  EXPECT_REFUSED(parse_manifest("a: \xc3\x28\n", &m), "invalid UTF-8 at byte 3");
  EXPECT_REFUSED(parse_manifest("a: \xed\xa0\x80\n", &m), "invalid UTF-8");  // surrogate
  EXPECT_REFUSED(parse_manifest("a: \xc0\xaf\n", &m), "invalid UTF-8");      // overlong
  EXPECT_TRUE(parse_manifest("name: caf\xc3\xa9 \xf0\x9f\x99\x82\n", &m).is_ok());
}

TEST(Package, VerifierAcceptsTheHandBuiltProgram) {
  Status st = verify_program(make_program(), 16);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(tile_destination_operand(TileOpcode::Load), 0);
  EXPECT_EQ(tile_destination_operand(TileOpcode::Store), -1);
  EXPECT_EQ(tile_destination_operand(TileOpcode::Binary), 1);
  EXPECT_EQ(tile_destination_operand(TileOpcode::Unary), 1);
}

TEST(Package, ProgramsWithControlFlowAndAttributesVerify) {
  Program p = make_program();
  // A bool scalar condition and a loop back to the start; a Copy into the output.
  p.tensors.push_back({"cond", TensorKind::kIntermediate, DType::Bool, {}, kNone, 0, 0, kNone});
  p.code = {word(Opcode::CallOp), 0,                       // 0
            word(Opcode::JumpIfFalse), 4, 7,               // 2
            word(Opcode::Jump), 0,                         // 5
            word(Opcode::RunKernel), 0,                    // 7
            word(Opcode::Copy), 3, 1,                      // 9
            word(Opcode::End)};                            // 12
  AttrValue alpha;
  alpha.name = "alpha";
  alpha.kind = AttrValue::Kind::kFloat;
  alpha.floats = {0.25f};
  AttrValue value;
  value.name = "value";
  value.kind = AttrValue::Kind::kTensor;
  value.ints = {2, 3};
  value.tensor_dtype = DType::Int64;
  value.tensor_bytes.resize(48);
  p.nodes[0].attrs = {alpha, value};
  Status st = verify_program(p, 16);
  EXPECT_TRUE(st.is_ok()) << st.message();
  const std::string text = disassemble(p);
  EXPECT_NE(text.find("  2: JumpIfFalse t4, @7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  5: Jump @0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  9: Copy t3, t1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("alpha = 0.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("value = tensor i64 [2, 3] (48 bytes)\n"), std::string::npos) << text;
}

TEST(Package, DisassemblyShowsEveryTable) {
  const std::string text = disassemble(make_program());
  for (const char* expected : {
           "symbols 1\n  s0 N [1, 64]\n",
           "  e0 = N\n",
           "  e4 = N*16\n",
           "  t0 input 0 \"x\" f32 [N, 4]\n",
           "  t1 intermediate \"r\" f32 [N, 4] arena @0\n",
           "  t2 weight \"w\" f32 [4] weights @0 +16\n",
           "  t3 output 0 \"y\" f32 [N, 4]\n",
           "inputs (t0)\noutputs (t3)\n",
           "arena size N*16\n",
           "  n0 Relu \"relu0\" opset 14 (t0) -> (t1)\n",
           "  k0 \"add_tanh\" domain [N, 4] registers 3\n",
           "    m1 = t2 \"w\" offset 0 strides [0, 1]\n",
           "    0: r0 = Load m0\n",
           "    6: r2 = Binary.Add r0, r1\n",
           "    11: r2 = Unary.Tanh r2\n",
           "    15: Store m2, r2\n",
           "code 5 words\n  0: CallOp n0  ; Relu \"relu0\"\n  2: RunKernel k0  ; \"add_tanh\"\n  4: End\n",
       })
    EXPECT_NE(text.find(expected), std::string::npos) << "missing: " << expected << "\nin:\n" << text;
}

TEST(Package, DisassemblerSurvivesGarbage) {
  Program p = make_program();
  p.code = {999, word(Opcode::CallOp)};
  p.kernels[0].body = {77, word(TileOpcode::Binary), 1};
  p.tensors[0].dims = {12345};
  p.tensors[1].dtype = static_cast<DType>(99);
  const std::string text = disassemble(p);
  EXPECT_NE(text.find("0: .word 999  ; not a valid instruction"), std::string::npos) << text;
  EXPECT_NE(text.find("1: .word 1  ; not a valid instruction"), std::string::npos) << text;
  EXPECT_NE(text.find("dtype(99)"), std::string::npos) << text;
}

// ============================== BadPackage ==============================

TEST(BadPackage, Empty) {
  Bytes b;
  uint8_t dummy = 0;
  std::shared_ptr<LoadedPackage> pkg;
  EXPECT_REFUSED(LoadedPackage::open_memory(&dummy, 0, true, &pkg), "empty");
  EXPECT_EQ(pkg, nullptr);
  TempDir dir;
  write_file(dir.path() + "/empty.cuvir", b);
  EXPECT_REFUSED(LoadedPackage::open_file(dir.path() + "/empty.cuvir", &pkg), "empty");
}

TEST(BadPackage, NotARegularFileOrMissing) {
  TempDir dir;
  std::shared_ptr<LoadedPackage> pkg;
  Status st = LoadedPackage::open_file(dir.path(), &pkg);
  EXPECT_EQ(st.code(), StatusCode::kIo);
  EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  st = LoadedPackage::open_file(fifo, &pkg);  // must not block waiting for a writer
  EXPECT_EQ(st.code(), StatusCode::kIo);
  EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();
  st = LoadedPackage::open_file(dir.path() + "/missing.cuvir", &pkg);
  EXPECT_EQ(st.code(), StatusCode::kIo);
  EXPECT_NE(st.message().find("missing.cuvir"), std::string::npos) << st.message();
}

TEST(BadPackage, FileErrorsNameThePath) {
  TempDir dir;
  Bytes b = write_package(make_contents());
  b[section_offset(b, SectionKind::WEIGHTS)] ^= 1;
  const std::string path = dir.path() + "/corrupt.cuvir";
  write_file(path, b);
  std::shared_ptr<LoadedPackage> pkg;
  Status st = LoadedPackage::open_file(path, &pkg);
  EXPECT_REFUSED(st, path + ": section 4 (WEIGHTS): checksum mismatch");
}

TEST(BadPackage, TruncatedAtEveryOffset) {
  const Bytes b = write_package(make_contents());
  const size_t table_end = 32 + 32 * get<uint32_t>(b, 16);
  for (size_t n = 1; n < b.size(); ++n) {
    Bytes t(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    Status st = open_bytes(t);
    ASSERT_FALSE(st.is_ok()) << "truncated to " << n << " bytes";
    EXPECT_NE(st.message().find("truncated"), std::string::npos) << n << ": " << st.message();
    // Through the header and section table, also with a file size field that agrees.
    if (n >= 32 && n < table_end) {
      set<uint64_t>(t, 24, n);
      EXPECT_REFUSED(open_bytes(t), "extends past the end");
    }
  }
}

TEST(BadPackage, WrongMagic) {
  Bytes b = write_package(make_contents());
  b[0] = 'X';
  EXPECT_REFUSED(open_bytes(b), "not a cuvil package: bad magic");
  Bytes text = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_REFUSED(open_bytes(text), "bad magic");
  b = write_package(make_contents());
  b[6] = '\n';  // "\r\n" mangled by a text-mode transfer
  EXPECT_REFUSED(open_bytes(b), "bad magic");
}

TEST(BadPackage, NewerMajorVersion) {
  Bytes b = write_package(make_contents());
  set<uint16_t>(b, 8, 4);
  EXPECT_REFUSED(open_bytes(b), "package format 4.0 is newer than this runtime supports (3.x)");
  set<uint16_t>(b, 8, 2);
  set<uint16_t>(b, 10, 0);
  EXPECT_REFUSED(open_bytes(b),
                 "package format 2.0 is older than this runtime supports (3.x): compile the model again");
}

TEST(BadPackage, UnknownFeatureBits) {
  Bytes b = write_package(make_contents());
  set<uint32_t>(b, 12, 0x10);
  EXPECT_REFUSED(open_bytes(b), "needs feature bits 0x10");
}

TEST(BadPackage, BadHeaderSize) {
  Bytes b = write_package(make_contents());
  set<uint32_t>(b, 20, 16);
  EXPECT_REFUSED(open_bytes(b), "header size 16 is invalid");
  set<uint32_t>(b, 20, 33);
  EXPECT_REFUSED(open_bytes(b), "header size 33 is invalid");
}

TEST(BadPackage, FileSizeFieldDisagrees) {
  Bytes b = write_package(make_contents());
  b.push_back(0);
  EXPECT_REFUSED(open_bytes(b), "the header says");
  EXPECT_REFUSED(open_bytes(b), "(extra bytes)");
}

TEST(BadPackage, TooManySections) {
  Bytes b = write_package(make_contents());
  set<uint32_t>(b, 16, 100000);
  EXPECT_REFUSED(open_bytes(b), "section count 100000 exceeds the limit");
  set<uint32_t>(b, 16, 1000);
  EXPECT_REFUSED(open_bytes(b), "section table (1000 entries at offset 32) extends past the end");
}

TEST(BadPackage, UnknownCriticalSection) {
  Bytes b = write_package(make_contents());
  const size_t at = entry_at(b, find_entry(b, SectionKind::REPORT));
  set<uint32_t>(b, at + kKind, 77);
  set<uint32_t>(b, at + kFlags, kSectionCritical);
  EXPECT_REFUSED(open_bytes(b), "section 3 (kind 77): unknown critical section kind 77");
}

TEST(BadPackage, ReservedFlagBits) {
  Bytes b = write_package(make_contents());
  set<uint32_t>(b, entry_at(b, 0) + kFlags, 0x5);
  EXPECT_REFUSED(open_bytes(b), "section 0 (MANIFEST): reserved flag bits 0x4 are set");
}

TEST(BadPackage, RequiredSectionNotCritical) {
  Bytes b = write_package(make_contents());
  set<uint32_t>(b, entry_at(b, find_entry(b, SectionKind::PROGRAMS)) + kFlags, 0);
  EXPECT_REFUSED(open_bytes(b), "section 2 (PROGRAMS): must be flagged critical");
}

TEST(BadPackage, SectionOffsetPastEof) {
  Bytes b = write_package(make_contents());
  const size_t at = entry_at(b, find_entry(b, SectionKind::PROGRAMS));
  set<uint64_t>(b, at + kOffset, b.size() + 64);
  EXPECT_REFUSED(open_bytes(b), "section 2 (PROGRAMS): offset");
  EXPECT_REFUSED(open_bytes(b), "extends past the end of the package");
}

TEST(BadPackage, SectionSizePastEof) {
  Bytes b = write_package(make_contents());
  const size_t at = entry_at(b, find_entry(b, SectionKind::WEIGHTS));
  set<uint64_t>(b, at + kSize, get<uint64_t>(b, at + kSize) + 1);
  EXPECT_REFUSED(open_bytes(b), "section 4 (WEIGHTS): offset");
  EXPECT_REFUSED(open_bytes(b), "extends past the end of the package");
}

TEST(BadPackage, SectionOffsetPlusSizeWraps) {
  Bytes b = write_package(make_contents());
  const size_t at = entry_at(b, find_entry(b, SectionKind::MANIFEST));
  set<uint64_t>(b, at + kOffset, UINT64_MAX - 7);  // 2^64 - 8: 8-aligned
  set<uint64_t>(b, at + kSize, 16);                  // offset + size wraps to 8
  EXPECT_REFUSED(open_bytes(b), "offset 18446744073709551608 + size 16 extends past the end");
  set<uint64_t>(b, at + kOffset, 64);
  set<uint64_t>(b, at + kSize, UINT64_MAX - 63);     // wraps to 0
  EXPECT_REFUSED(open_bytes(b), "extends past the end");
}

TEST(BadPackage, SectionInsideHeaderOrTable) {
  Bytes b = write_package(make_contents());
  set<uint64_t>(b, entry_at(b, 0) + kOffset, 8);
  EXPECT_REFUSED(open_bytes(b), "overlaps the header and section table");
}

TEST(BadPackage, OverlappingSections) {
  Bytes b = write_package(make_contents());
  // Point PROGRAM into the middle of MANIFEST.
  const size_t manifest = entry_at(b, find_entry(b, SectionKind::MANIFEST));
  const size_t program = entry_at(b, find_entry(b, SectionKind::PROGRAMS));
  set<uint64_t>(b, program + kOffset, get<uint64_t>(b, manifest + kOffset) + 8);
  EXPECT_REFUSED(open_bytes(b), "section 0 (MANIFEST)");
  EXPECT_REFUSED(open_bytes(b), "overlaps section 2 (PROGRAMS)");
}

TEST(BadPackage, MisalignedSection) {
  Bytes b = write_package(make_contents());
  const size_t at = entry_at(b, find_entry(b, SectionKind::PROGRAMS));
  set<uint32_t>(b, at + kAlign, 12);
  EXPECT_REFUSED(open_bytes(b), "alignment 12 is not a power of two");
  set<uint32_t>(b, at + kAlign, 8);
  set<uint64_t>(b, at + kOffset, get<uint64_t>(b, at + kOffset) + 4);
  EXPECT_REFUSED(open_bytes(b), "is not a multiple of its alignment 8");
  b = write_package(make_contents());
  set<uint32_t>(b, entry_at(b, find_entry(b, SectionKind::WEIGHTS)) + kAlign, 8);
  EXPECT_REFUSED(open_bytes(b), "section 4 (WEIGHTS): alignment 8 is below the required 64");
}

TEST(BadPackage, MissingRequiredSection) {
  Bytes b = write_package(make_contents());
  set<uint32_t>(b, entry_at(b, find_entry(b, SectionKind::MANIFEST)) + kKind, 77);
  set<uint32_t>(b, entry_at(b, 0) + kFlags, 0);
  EXPECT_REFUSED(open_bytes(b), "the MANIFEST section is missing");
}

TEST(BadPackage, DuplicateSection) {
  Bytes b = write_package(make_contents());
  const size_t at = entry_at(b, find_entry(b, SectionKind::REPORT));
  set<uint32_t>(b, at + kKind, static_cast<uint32_t>(SectionKind::PROGRAMS));
  set<uint32_t>(b, at + kFlags, kSectionCritical);
  EXPECT_REFUSED(open_bytes(b), "the PROGRAMS section appears 2 times");
}

TEST(BadPackage, NonzeroPadding) {
  Bytes b = write_package(make_contents());
  const uint64_t weights = section_offset(b, SectionKind::WEIGHTS);
  ASSERT_EQ(b[weights - 1], 0);
  b[weights - 1] = 1;
  EXPECT_REFUSED(open_bytes(b), "nonzero byte at offset " + std::to_string(weights - 1));
}

TEST(BadPackage, FlippedBitInAnySection) {
  const Bytes b = write_package(make_contents());
  const uint32_t n = get<uint32_t>(b, 16);
  for (uint32_t i = 0; i < n; ++i) {
    const size_t at = entry_at(b, i);
    const uint32_t kind = get<uint32_t>(b, at + kKind);
    const uint64_t off = get<uint64_t>(b, at + kOffset), size = get<uint64_t>(b, at + kSize);
    const std::string expected =
        "section " + std::to_string(i) + " (" + section_kind_name(kind) + "): checksum mismatch";
    for (uint64_t o = off; o < off + size; ++o) {
      Bytes m = b;
      m[o] ^= static_cast<uint8_t>(1u << (o % 8));
      EXPECT_REFUSED(open_bytes(m), expected);
    }
  }
}

// Every single-bit flip anywhere in the file is refused, except the ones the format allows
// by design: the REPORT section is non-critical, so turning its kind into an unknown kind
// (the section is then skipped) or clearing/setting its critical flag changes nothing a
// reader relies on. (A newer minor version passes the header but not the manifest, which
// repeats the version.)
TEST(BadPackage, FlippedBitAnywhereIsRefusedOrHarmless) {
  const Bytes b = write_package(make_contents());
  const size_t report_entry = entry_at(b, find_entry(b, SectionKind::REPORT));
  int accepted = 0;
  for (size_t o = 0; o < b.size(); ++o) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes m = b;
      m[o] ^= static_cast<uint8_t>(1u << bit);
      std::shared_ptr<LoadedPackage> pkg;
      Status st = open_bytes(m, &pkg);
      if (st.is_ok()) {
        ++accepted;
        const bool report_kind = o >= report_entry + kKind && o < report_entry + kKind + 4;
        const bool report_critical = o == report_entry + kFlags && bit == 0;
        EXPECT_TRUE(report_kind || report_critical) << "flip of bit " << bit << " at " << o
                                                    << " was accepted";
        EXPECT_EQ(encode_program(pkg->program()), encode_program(make_program()));
      } else {
        EXPECT_EQ(st.code(), StatusCode::kInvalidPackage) << st.message();
        EXPECT_FALSE(st.message().empty());
      }
    }
  }
  // 30 of the 32 kind bits (kind 4 becomes 5, BUCKETS, a second one, or 6, PANELS, which must
  // be critical: both refused) + the critical flag.
  EXPECT_EQ(accepted, 31);
}

// Random byte mutations inside the sections, resealed so they reach the decoder and the
// verifier: no crash, no hang, and every failure is a message (a poor man's fuzzer that
// runs in every test run; tests/fuzz/fuzz_package.cpp is the real one).
TEST(BadPackage, ResealedRandomMutationsNeverCrash) {
  const Bytes b = write_package(make_contents());
  const uint64_t program = section_offset(b, SectionKind::PROGRAMS);
  const uint64_t begin = section_offset(b, SectionKind::MANIFEST);
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes m = b;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      // Mostly the program section, where the verifier lives.
      const uint64_t lo = rng() % 4 ? program : begin;
      const size_t at = lo + rng() % (m.size() - lo);
      switch (rng() % 3) {
        case 0: m[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: m[at] = static_cast<uint8_t>(rng()); break;
        default: m[at] = (rng() % 2) ? 0xff : 0x00; break;
      }
    }
    reseal(m);
    std::shared_ptr<LoadedPackage> pkg;
    Status st = open_bytes(m, &pkg);
    if (st.is_ok()) {
      ++accepted;
      (void)disassemble(pkg->program());
    } else {
      EXPECT_FALSE(st.message().empty());
    }
  }
  // Most mutations must be caught (weights bytes and names are free to change).
  EXPECT_LT(accepted, 3000);
}

TEST(BadPackage, ProgramSectionGarbageAfterReseal) {
  Bytes b = write_package(make_contents());
  // PROGRAMS: u32 count, u64 size, then the first program, which starts with its magic.
  b[section_offset(b, SectionKind::PROGRAMS) + 12] ^= 0xff;
  reseal(b);
  EXPECT_REFUSED(open_bytes(b), "PROGRAMS section: program 0: program section: bad magic");
  // A count larger than the section: the decoder refuses before allocating.
  b = write_package(make_contents());
  set<uint32_t>(b, section_offset(b, SectionKind::PROGRAMS) + 16, 0x7fffffff);  // symbol count
  reseal(b);
  EXPECT_REFUSED(open_bytes(b), "truncated or a count exceeds its size");
}

TEST(BadPackage, ManifestNotText) {
  PackageContents c = make_contents();
  c.manifest = "model: \xff\xfe\n";
  EXPECT_REFUSED(open_bytes(write_package(c)), "MANIFEST section: manifest: invalid UTF-8 at byte 7");
  c.manifest = "format: 4.0\n";
  EXPECT_REFUSED(open_bytes(write_package(c)), "says format 4.0, the header says 3.0");
}

// ---- the tensor table ----

TEST(BadPackage, TensorSizeNotNumelTimesDtype) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[2].weight_size = 12; }),
                 "tensor 2 ('w'): weight size 12 bytes != 4 elements x f32 = 16 bytes");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[2].dtype = DType::Double; }),
                 "weight size 16 bytes != 4 elements x f64 = 32 bytes");
}

TEST(BadPackage, WeightPastWeightsSection) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[2].weight_offset = 8; }),
                 "tensor 2 ('w'): weight bytes at offset 8 + size 16 extend past the weights section (16 bytes)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[2].weight_offset = UINT64_MAX - 7; }),
                 "extend past the weights section");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.weights_size = 32; }),
                 "program refers to a weights section of 32 bytes, but the package's has 16");
}

TEST(BadPackage, WeightShapeNotConstantOrNegative) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[2].dims = {kExprN}; }),
                 "tensor 2 ('w'): weight dim 0 is not a constant");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.expr_code.push_back({ExprOpKind::kConst, -4});
                   p.exprs.push_back({7, 1});
                   p.tensors[2].dims = {5};
                 }),
                 "weight dim 0 is negative (-4)");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.expr_code.push_back({ExprOpKind::kConst, INT64_MAX / 2});
                   p.exprs.push_back({7, 1});
                   p.tensors[2].dims = {5, 5, 5};
                 }),
                 "element count overflows");
}

TEST(BadPackage, DtypeOutOfRange) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[1].dtype = static_cast<DType>(99); }),
                 "tensor 1 ('r'): dtype 99 out of range");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[1].dtype = DType::Undefined; }),
                 "tensor 1 ('r'): dtype 0 out of range");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[1].dtype = DType::String; }),
                 "string tensors are not supported");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[1].kind = static_cast<TensorKind>(9); }),
                 "tensor 1 ('r'): kind 9 is not valid");
}

TEST(BadPackage, IndexOutOfTable) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[0].dims[1] = 99; }),
                 "tensor 0 ('x'): dim 1: expression 99 out of range (have 5)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[1].arena_offset = 5; }),
                 "tensor 1 ('r'): arena offset expression 5 out of range (have 5)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.arena_size = 70; }),
                 "arena size: expression 70 out of range (have 5)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.inputs = {0, 9}; }),
                 "input 1: tensor 9 out of range (have 4)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.nodes[0].inputs = {4}; }),
                 "node record 0 ('Relu'): input 0: tensor 4 out of range (have 4)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.nodes[0].outputs = {kNone, 17}; }),
                 "node record 0 ('Relu'): output 1: tensor 17 out of range (have 4)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].maps[1].tensor = kNone; }),
                 "kernel 0 ('add_tanh') map 1: tensor 4294967295 out of range (have 4)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].domain[0] = 5; }),
                 "kernel 0 ('add_tanh'): domain dim 0: expression 5 out of range (have 5)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].maps[2].strides[1] = 8; }),
                 "kernel 0 ('add_tanh') map 2: stride 1: expression 8 out of range");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].maps[0].offset = 6; }),
                 "kernel 0 ('add_tanh') map 0: offset expression 6 out of range");
}

TEST(BadPackage, InputOutputListsInconsistent) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[0].io_index = 1; }),
                 "tensor 0 ('x'): input with io_index 1 is not at that position of the input list");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.inputs = {0, 0}; }),
                 "input 1: tensor 0 ('x') has io_index 0");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.outputs = {3, 1}; }),
                 "output 1: tensor 1 ('r') is a intermediate, not an output");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.outputs.clear(); }),
                 "tensor 3 ('y'): output with io_index 0 is not at that position of the output list (0 entries)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[1].io_index = 0; }),
                 "tensor 1 ('r'): a intermediate must have no io_index");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.tensors[0].arena_offset = 0; }),
                 "tensor 0 ('x'): a input cannot have an arena offset");
}

// ---- expressions and symbols ----

TEST(BadPackage, MalformedExpressions) {
  using K = ExprOpKind;
  EXPECT_REFUSED(open_with_program([](Program& p) { p.expr_code[0].value = 3; }),
                 "expression 0: op 0: symbol 3 out of range (have 1)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.expr_code[0].value = -1; }),
                 "symbol 18446744073709551615 out of range");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.exprs[4] = {5, 2}; }),
                 "expression 4: op 1 (Mul) has 1 operand(s) on the stack, needs 2");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.exprs[4] = {3, 2}; }),
                 "expression 4: leaves 2 values on the stack (needs exactly 1)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.exprs[4] = {6, 2}; }),
                 "expression 4: code [6, +2) outside the expression code (7 ops)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.exprs[4] = {0xfffffff0u, 0x20}; }),
                 "outside the expression code");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.exprs[2].count = 0; }),
                 "expression 2: empty code");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.expr_code[6].kind = static_cast<K>(42); }),
                 "expression 4: op 2 has unknown kind 42");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.expr_code.push_back({K::kConst, 7});
                   p.expr_code.push_back({K::kConst, 0});
                   p.expr_code.push_back({K::kFloorDiv, 0});
                   p.exprs.push_back({7, 3});
                 }),
                 "expression 5: op 2 (FloorDiv) of constants 7 and 0 overflows or divides by zero");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.expr_code.clear();
                   for (int i = 0; i < 65; ++i) p.expr_code.push_back({K::kConst, 1});
                   p.exprs = {{0, 65}};
                 }),
                 "expression 0: needs a stack deeper than 64");
}

TEST(BadPackage, BadSymbols) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.symbols[0].lo = 9, p.symbols[0].hi = 3; }),
                 "symbol 0 ('N'): range [9, 3] is empty or negative");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.symbols.push_back({"N", 0, 1, false}); }),
                 "symbol 1 ('N'): name already used by symbol 0");
}

// ---- node records ----

TEST(BadPackage, NodeRecordProblems) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.nodes[0].outputs = {2}; }),
                 "node record 0 ('Relu'): output 0 writes tensor 2 ('w'), which is a read-only weight");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.nodes[0].op_type.clear(); }),
                 "node record 0: empty op_type");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   AttrValue a;
                   a.name = "alpha";
                   a.kind = static_cast<AttrValue::Kind>(12);
                   p.nodes[0].attrs = {a};
                 }),
                 "node record 0 ('Relu') attribute 'alpha': kind 12 is not valid");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   AttrValue a;
                   a.name = "alpha";
                   a.kind = AttrValue::Kind::kFloat;
                   p.nodes[0].attrs = {a};
                 }),
                 "attribute 'alpha': a single value is expected, got 0");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   AttrValue a;
                   a.name = "value";
                   a.kind = AttrValue::Kind::kTensor;
                   a.ints = {2, 2};
                   a.tensor_dtype = DType::Float;
                   a.tensor_bytes.resize(15);
                   p.nodes[0].attrs = {a};
                 }),
                 "attribute 'value': tensor has 15 bytes, expected 4 x f32 = 16");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   AttrValue a;
                   a.name = "value";
                   a.kind = AttrValue::Kind::kTensor;
                   a.ints = {-1};
                   a.tensor_dtype = DType::Float;
                   p.nodes[0].attrs = {a};
                 }),
                 "tensor dims are negative or their product overflows");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   AttrValue a;
                   a.name = "k";
                   a.kind = AttrValue::Kind::kInt;
                   a.ints = {1};
                   p.nodes[0].attrs = {a, a};
                 }),
                 "attribute 'k' given twice");
}

// ---- tile kernels ----

TEST(BadPackage, TileKernelProblems) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].body[0] = 40; }),
                 "kernel 0 ('add_tanh') body word 0: unknown tile opcode 40");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].body[1] = 3; }),
                 "kernel 0 ('add_tanh') body word 0 (Load): register 3 out of range (have 3)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].body[2] = 3; }),
                 "body word 0 (Load): access map 3 out of range (have 3)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].body[12] = 200; }),
                 "body word 11 (Unary): unary function 200 out of range");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].body[7] = 99; }),
                 "body word 6 (Binary): binary function 99 out of range");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].body.pop_back(); }),
                 "body word 15 (Store): needs 2 operand words, only 1 remain");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].registers = 17; }),
                 "kernel 0 ('add_tanh'): uses 17 registers, the limit is 16");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].maps[1].strides.pop_back(); }),
                 "kernel 0 ('add_tanh') map 1: has 1 strides, the domain has rank 2");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].body[10] = 2; }),
                 "body word 6 (Binary): reads register 2 before any instruction writes it");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.kernels[0].maps[2].tensor = 0; }),
                 "body word 15 (Store): stores to tensor 0 ('x'), which is a read-only input");
}

// ---- program code ----

TEST(BadPackage, JumpOutsideProgram) {
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.code = {word(Opcode::Jump), 100, word(Opcode::End)};
                 }),
                 "instruction 0 (Jump): jump target 100 is outside the program (3 words)");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.code = {word(Opcode::Jump), 3, word(Opcode::End)};
                 }),
                 "jump target 3 is outside the program");
}

TEST(BadPackage, JumpIntoTheMiddleOfAnInstruction) {
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.code = {word(Opcode::CallOp), 0, word(Opcode::Jump), 1, word(Opcode::End)};
                 }),
                 "instruction 2 (Jump): jump target 1 is inside instruction 0 (CallOp), not at an "
                 "instruction start");
}

TEST(BadPackage, MissingEnd) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.code.pop_back(); }),
                 "program code does not end with End (last instruction 2 is RunKernel)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.code.clear(); }),
                 "program code is empty (it must end with End)");
  // A loop whose last instruction is a Jump still needs the terminator.
  EXPECT_REFUSED(open_with_program([](Program& p) { p.code = {word(Opcode::Jump), 0}; }),
                 "does not end with End (last instruction 0 is Jump)");
}

TEST(BadPackage, UnknownOpcode) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.code[2] = 200; }),
                 "instruction 2: unknown opcode 200");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.code[2] = 0x80000000u; }),
                 "instruction 2: unknown opcode 2147483648");
}

TEST(BadPackage, OperandOutOfRange) {
  EXPECT_REFUSED(open_with_program([](Program& p) { p.code[1] = 99; }),
                 "instruction 0 (CallOp): node record 99 out of range (have 1)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.code[3] = 1; }),
                 "instruction 2 (RunKernel): kernel 1 out of range (have 1)");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.code = {word(Opcode::Copy), 3, 4, word(Opcode::End)};
                 }),
                 "instruction 0 (Copy): tensor 4 out of range (have 4)");
  EXPECT_REFUSED(open_with_program([](Program& p) { p.code = {word(Opcode::End), word(Opcode::CallOp)}; }),
                 "instruction 1 (CallOp): needs 1 operand words, only 0 remain");
}

TEST(BadPackage, OperandOfTheWrongKindOfTensor) {
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.code = {word(Opcode::Copy), 2, 0, word(Opcode::End)};
                 }),
                 "instruction 0 (Copy): destination tensor 2 ('w') is a read-only weight");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.code = {word(Opcode::JumpIfFalse), 0, 3, word(Opcode::End)};
                 }),
                 "instruction 0 (JumpIfFalse): condition tensor 0 ('x') has dtype f32");
  EXPECT_REFUSED(open_with_program([](Program& p) {
                   p.tensors[1].dtype = DType::Bool;
                   p.code = {word(Opcode::JumpIfFalse), 1, 3, word(Opcode::End)};
                 }),
                 "condition tensor 1 ('r') is not a scalar");
}

}  // namespace
}  // namespace cuvil::rt
