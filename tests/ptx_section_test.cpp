// The package's PTX section (runtime/ptx_section.h, docs/format.md "PTX") and cuvilc's PTX
// options. Suite PtxSection: encode/decode round trip, every refusal of a malformed section
// (each naming the problem, also through the package loader), and the package written with
// and without the section. Suite CuvilcPtx: `cuvilc compile` includes the megakernel's PTX by
// default (byte-identical from one compile to the next), `--no-ptx` leaves it out, and
// `--emit ptx` prints it (skipped when this build has no PTX: clang-19 not found).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codegen/ptx/megakernel_ptx.h"
#include "compile_in_process.h"
#include "onnx_builder.h"
#include "run_tool.h"
#include "runtime/package.h"
#include "runtime/ptx_section.h"

namespace cuvil {
namespace {

using rt::PtxRecord;

std::string decode_error(const std::vector<uint8_t>& b) {
  std::vector<PtxRecord> out;
  rt::Status st = rt::decode_ptx_section(b.data(), b.size(), &out);
  return st.is_ok() ? "" : st.message();
}

TEST(PtxSection, RoundTrip) {
  PtxRecord a{80, 70, ".version 7.0\n.target sm_80\n"}, b{90, 78, ".version 7.8\n.target sm_90\n"};
  const auto bytes = rt::encode_ptx_section({a, b});
  std::vector<PtxRecord> out;
  ASSERT_TRUE(rt::decode_ptx_section(bytes.data(), bytes.size(), &out).is_ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].target, 90u);
  EXPECT_EQ(out[1].ptx_version, 78u);
  EXPECT_EQ(out[1].text, b.text);
}

TEST(PtxSection, MalformedSectionsAreRefused) {
  EXPECT_EQ(decode_error({1, 0}), "PTX section: truncated record count");
  EXPECT_EQ(decode_error(rt::encode_ptx_section({})), "PTX section: 0 records (must be 1 to 16)");
  std::vector<PtxRecord> many(17, PtxRecord{80, 70, "x"});
  EXPECT_EQ(decode_error(rt::encode_ptx_section(many)), "PTX section: 17 records (must be 1 to 16)");
  auto bytes = rt::encode_ptx_section({PtxRecord{80, 70, "abc"}});
  auto cut = bytes;
  cut.pop_back();
  EXPECT_EQ(decode_error(cut), "PTX section: record 0 is truncated");
  auto extra = bytes;
  extra.push_back(0);
  EXPECT_EQ(decode_error(extra), "PTX section: 1 bytes after the last record");
  EXPECT_EQ(decode_error(rt::encode_ptx_section({PtxRecord{80, 70, std::string("a\0b", 3)}})),
            "PTX section: record 0 text is empty or holds a NUL byte");
  EXPECT_EQ(decode_error(rt::encode_ptx_section({PtxRecord{80, 70, ""}})),
            "PTX section: record 0 text is empty or holds a NUL byte");
  EXPECT_EQ(decode_error(rt::encode_ptx_section({PtxRecord{75, 70, "x"}})),
            "PTX section: record 0 targets sm_75 (the megakernel needs sm_80 or newer)");
}

TEST(PtxSection, PackagesWithAndWithoutIt) {
  const auto m = test::make_relu_model();
  Model model = test::import_for_codegen(m);
  codegen::LoweredModel lowered = codegen::lower_model(model);
  const std::vector<uint8_t> section = rt::encode_ptx_section({PtxRecord{80, 70, ".version 7.0\n"}});
  const auto with = codegen::build_package(model, lowered, "", section);
  const auto without = codegen::build_package(model, lowered);
  std::shared_ptr<rt::LoadedPackage> a, b;
  ASSERT_TRUE(rt::LoadedPackage::open_memory(with.data(), with.size(), true, &a).is_ok());
  ASSERT_TRUE(rt::LoadedPackage::open_memory(without.data(), without.size(), true, &b).is_ok());
  ASSERT_EQ(a->ptx().size(), 1u);
  EXPECT_EQ(a->ptx()[0].text, ".version 7.0\n");
  EXPECT_TRUE(b->ptx().empty());
  // A malformed PTX section fails the whole package: the record's text gets a NUL, resealed
  // by writing the package from contents whose section bytes are bad.
  auto bad = section;
  bad.back() = 0;
  const auto broken = codegen::build_package(model, lowered, "", bad);
  std::shared_ptr<rt::LoadedPackage> c;
  rt::Status st = rt::LoadedPackage::open_memory(broken.data(), broken.size(), true, &c);
  EXPECT_EQ(st.code(), rt::StatusCode::kInvalidPackage);
  EXPECT_NE(st.message().find("PTX section: record 0 text is empty or holds a NUL byte"), std::string::npos)
      << st.message();
}

TEST(CuvilcPtx, IncludedByDefaultDeterministicAndLeftOutWithNoPtx) {
  if (codegen::megakernel_ptx().empty()) GTEST_SKIP() << "this build has no megakernel PTX (no clang-19)";
  test::TempDir dir;
  const std::string model = test::write_model(dir.path(), test::make_relu_model(), "relu.onnx");
  auto r1 = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "-o", dir.file("a.cuvir")});
  auto r2 = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "-o", dir.file("b.cuvir")});
  auto r3 = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--no-ptx", "-o", dir.file("c.cuvir")});
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  ASSERT_EQ(r3.exit_code, 0) << r3.err;
  const std::string a = test::read_bytes(dir.file("a.cuvir")), b = test::read_bytes(dir.file("b.cuvir")),
                    c = test::read_bytes(dir.file("c.cuvir"));
  EXPECT_TRUE(a == b) << "two compiles with PTX differ";
  std::shared_ptr<rt::LoadedPackage> pa, pc;
  ASSERT_TRUE(rt::LoadedPackage::open_memory(a.data(), a.size(), true, &pa).is_ok());
  ASSERT_TRUE(rt::LoadedPackage::open_memory(c.data(), c.size(), true, &pc).is_ok());
  ASSERT_EQ(pa->ptx().size(), 1u);
  EXPECT_EQ(pa->ptx()[0].target, 80u);
  EXPECT_EQ(pa->ptx()[0].ptx_version, 70u);
  EXPECT_EQ(pa->ptx()[0].text, std::string(codegen::megakernel_ptx()));
  EXPECT_TRUE(pc->ptx().empty());
  EXPECT_LT(c.size(), a.size());
}

TEST(CuvilcPtx, EmitPtxPrintsTheMegakernel) {
  if (codegen::megakernel_ptx().empty()) GTEST_SKIP() << "this build has no megakernel PTX (no clang-19)";
  test::TempDir dir;
  const std::string model = test::write_model(dir.path(), test::make_relu_model(), "relu.onnx");
  auto r = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--emit", "ptx"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string(codegen::megakernel_ptx()));
  EXPECT_NE(r.out.find(".target sm_80"), std::string::npos);
  EXPECT_NE(r.out.find("megakernel_op_Load"), std::string::npos);
  auto s = test::run_tool(dir.path(), CUVIL_CUVILC, {"compile", model, "--emit", "ptx", "--stop-after", "import"});
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_NE(s.err.find("--stop-after stops before ptx exists; use --emit ir"), std::string::npos) << s.err;
}

}  // namespace
}  // namespace cuvil
