// write_file_atomically (support/output_file.h) under process faults: a writer killed with
// SIGKILL in the middle of a write (a forked child, stopped through the test-only fault hook)
// leaves no named temporary, or one that the next write into the directory removes, and the
// old output byte-identical; SIGINT/SIGTERM remove the temporary and exit 130/143; a full disk
// (a real one: a 64 KiB tmpfs in a private mount namespace, and an injected ENOSPC) fails with
// the path named, the old output intact and no temporary left; the stale-temporary cleanup
// touches nothing but our own dead writers' files. Each case runs with the unnamed (O_TMPFILE)
// temporary and with the named fallback.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "onnx_builder.h"
#include "run_tool.h"
#include "private_tmpfs.h"
#include "support/error.h"
#include "support/output_file.h"

namespace cuvil {
namespace {

namespace hooks = output_file_testing;
using hooks::Stage;
using test::TempDir;

using test::list_dir;

std::set<std::string> temporaries_in(const std::string& dir) {
  std::set<std::string> temps;
  for (const std::string& n : list_dir(dir))
    if (hooks::is_temporary_name(n)) temps.insert(n);
  return temps;
}

// Runs `body` in a forked child and returns its wait status. The child exits 0 when `body`
// returns, 3 when it throws.
int in_child(const std::function<void()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    try {
      body();
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

bool o_tmpfile_works(const std::string& dir) {
  int fd = open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// The fault hooks are plain function pointers: what they do is chosen through these.
Stage g_fault_stage = Stage::kAfterChunk;
int g_fault_signal = SIGKILL;
int g_fault_errno = 0;

int signal_at_stage(Stage stage, size_t) {
  if (stage == g_fault_stage) raise(g_fault_signal);
  return 0;
}
int fail_after_first_chunk(Stage stage, size_t) {
  return stage == Stage::kAfterChunk ? g_fault_errno : 0;
}

enum class Temporary { kUnnamed, kNamed };
const char* temporary_name(Temporary t) { return t == Temporary::kUnnamed ? "Unnamed" : "Named"; }
std::string temporary_kind(const ::testing::TestParamInfo<Temporary>& info) {
  return temporary_name(info.param);
}
void PrintTo(Temporary t, std::ostream* os) { *os << temporary_name(t); }

class FaultyWrite : public ::testing::TestWithParam<Temporary> {
 protected:
  void SetUp() override {
    if (GetParam() == Temporary::kUnnamed && !o_tmpfile_works(tmp_.path()))
      GTEST_SKIP() << "the test directory's filesystem has no O_TMPFILE";
    hooks::set_force_named_temporary(GetParam() == Temporary::kNamed);
    out_ = tmp_.file("model.cuvir");
    test::write_bytes(out_, kOld);
  }
  void TearDown() override {
    hooks::set_fault_hook(nullptr);
    hooks::set_force_named_temporary(false);
  }
  // Several chunks, so that a fault after the first one is in the middle of the write.
  static std::string new_data() { return std::string(3 * hooks::kChunkBytes + 123, 'n'); }

  // Kills a child writing `out_` with `sig` at `stage`; returns its wait status.
  int write_and_signal(Stage stage, int sig) {
    g_fault_stage = stage;
    g_fault_signal = sig;
    return in_child([&] {
      hooks::set_fault_hook(signal_at_stage);
      write_file_atomically(out_, new_data());
    });
  }

  const std::string kOld = "the previous package\n\x01\x02\x03 must survive byte for byte\n";
  TempDir tmp_;
  std::string out_;
};

TEST_P(FaultyWrite, ReplacesTheTargetAndLeavesNothingElse) {
  write_file_atomically(out_, new_data());
  EXPECT_EQ(test::read_bytes(out_), new_data());
  EXPECT_EQ(list_dir(tmp_.path()), std::set<std::string>{"model.cuvir"});
  struct stat st;
  ASSERT_EQ(stat(out_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // A new file, and an empty one.
  write_file_atomically(tmp_.file("empty"), "");
  EXPECT_EQ(test::read_bytes(tmp_.file("empty")), "");
  EXPECT_EQ(list_dir(tmp_.path()), (std::set<std::string>{"empty", "model.cuvir"}));
}

// Pieces are written in order; the check sees the complete temporary (readable) before the
// rename, and a check that throws leaves the old file and no temporary.
TEST_P(FaultyWrite, PiecesAndACheckBeforeTheTargetIsReplaced) {
  const std::string a(hooks::kChunkBytes + 7, 'a'), b = "bb", c(2 * hooks::kChunkBytes, 'c');
  std::string seen;
  write_file_atomically(out_, Pieces{a, b, "", c}, [&](int fd, uint64_t size) {
    seen.resize(size);
    ASSERT_EQ(pread(fd, seen.data(), size, 0), static_cast<ssize_t>(size));
    EXPECT_EQ(test::read_bytes(out_), kOld) << "replaced before the check";
  });
  EXPECT_EQ(seen, a + b + c);
  EXPECT_EQ(test::read_bytes(out_), a + b + c);
  test::write_bytes(out_, kOld);
  EXPECT_THROW(write_file_atomically(out_, Pieces{a, b}, [](int, uint64_t) { throw std::runtime_error("bad"); }),
               std::runtime_error);
  EXPECT_EQ(test::read_bytes(out_), kOld);
  EXPECT_EQ(list_dir(tmp_.path()), std::set<std::string>{"model.cuvir"});
}

TEST_P(FaultyWrite, SigkillInTheMiddleOfTheDataLeavesNoTemporaryForLong) {
  int status = write_and_signal(Stage::kAfterChunk, SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_EQ(test::read_bytes(out_), kOld);
  std::set<std::string> temps = temporaries_in(tmp_.path());
  if (GetParam() == Temporary::kUnnamed) {
    // The data went to an unnamed file: nothing at all is left.
    EXPECT_EQ(list_dir(tmp_.path()), std::set<std::string>{"model.cuvir"});
  } else {
    ASSERT_EQ(temps.size(), 1u) << "a named temporary is expected after SIGKILL";
    EXPECT_EQ(list_dir(tmp_.path()).size(), 2u);
  }
  // The next write into the directory, of another file, removes what the dead writer left.
  write_file_atomically(tmp_.file("other.cuvir"), "other");
  EXPECT_EQ(list_dir(tmp_.path()), (std::set<std::string>{"model.cuvir", "other.cuvir"}));
  EXPECT_EQ(test::read_bytes(out_), kOld);
}

TEST_P(FaultyWrite, SigkillBetweenLinkAndRenameLeavesATemporaryTheNextWriteRemoves) {
  int status = write_and_signal(Stage::kBeforeRename, SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_EQ(test::read_bytes(out_), kOld);
  std::set<std::string> temps = temporaries_in(tmp_.path());
  ASSERT_EQ(temps.size(), 1u);
  EXPECT_EQ(temps.begin()->rfind("model.cuvir.cuvil-tmp.", 0), 0u) << *temps.begin();
  EXPECT_EQ(test::read_bytes(tmp_.file(*temps.begin())), new_data());
  write_file_atomically(out_, "newer");
  EXPECT_EQ(list_dir(tmp_.path()), std::set<std::string>{"model.cuvir"});
  EXPECT_EQ(test::read_bytes(out_), "newer");
}

TEST_P(FaultyWrite, SigtermAndSigintRemoveTheTemporaryAndExit143And130) {
  for (Stage stage : {Stage::kAfterChunk, Stage::kBeforeRename}) {
    for (int sig : {SIGTERM, SIGINT}) {
      int status = write_and_signal(stage, sig);
      ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
      EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
      EXPECT_EQ(test::read_bytes(out_), kOld);
      EXPECT_EQ(list_dir(tmp_.path()), std::set<std::string>{"model.cuvir"})
          << "signal " << sig << " at stage " << static_cast<int>(stage);
    }
  }
}

TEST_P(FaultyWrite, InjectedWriteFailureKeepsTheOldFile) {
  g_fault_errno = ENOSPC;
  hooks::set_fault_hook(fail_after_first_chunk);
  try {
    write_file_atomically(out_, new_data());
    FAIL() << "the write succeeded";
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kIo);
    const std::string msg = d.what();
    EXPECT_NE(msg.find(out_), std::string::npos) << msg;
    EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unchanged"), std::string::npos) << msg;
  }
  EXPECT_EQ(test::read_bytes(out_), kOld);
  EXPECT_EQ(list_dir(tmp_.path()), std::set<std::string>{"model.cuvir"});
  // A failure just before the rename (the temporary complete and named) is cleaned up too.
  hooks::set_fault_hook([](Stage stage, size_t) { return stage == Stage::kBeforeRename ? EIO : 0; });
  EXPECT_THROW(write_file_atomically(out_, new_data()), Diagnostic);
  EXPECT_EQ(test::read_bytes(out_), kOld);
  EXPECT_EQ(list_dir(tmp_.path()), std::set<std::string>{"model.cuvir"});
}

TEST_P(FaultyWrite, DiskFullOnASmallTmpfs) {
  const std::string small = tmp_.file("small");
  ASSERT_EQ(mkdir(small.c_str(), 0755), 0);
  const bool named = GetParam() == Temporary::kNamed;
  int rc = test::run_with_private_tmpfs(small, "64k", [&]() -> int {
    hooks::set_force_named_temporary(named);
    const std::string out = small + "/model.cuvir";
    test::write_bytes(out, kOld);
    try {
      write_file_atomically(out, std::string(256 * 1024, 'x'));
      std::fprintf(stderr, "a 256 KiB write into a 64 KiB tmpfs succeeded\n");
      return 1;
    } catch (const Diagnostic& d) {
      const std::string msg = d.what();
      if (d.code() != ExitCode::kIo || msg.find(out) == std::string::npos ||
          msg.find("No space left on device") == std::string::npos) {
        std::fprintf(stderr, "unexpected diagnostic (code %d): %s\n", static_cast<int>(d.code()),
                     msg.c_str());
        return 2;
      }
    }
    if (test::read_bytes(out) != kOld) {
      std::fprintf(stderr, "the old output changed\n");
      return 3;
    }
    if (list_dir(small) != std::set<std::string>{"model.cuvir"}) {
      std::fprintf(stderr, "the full disk holds more than the old output\n");
      return 4;
    }
    // The space is free again: a small write now succeeds.
    write_file_atomically(out, "fits");
    return test::read_bytes(out) == "fits" ? 0 : 5;
  });
  if (rc == test::kPrivateMountRefused)
    GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here (needs CAP_SYS_ADMIN or unprivileged user namespaces)";
  EXPECT_EQ(rc, 0) << "see the child's message above";
}

INSTANTIATE_TEST_SUITE_P(OutputFile, FaultyWrite,
                         ::testing::Values(Temporary::kUnnamed, Temporary::kNamed), temporary_kind);

TEST(OutputFileCleanup, RemovesOnlyOurOwnDeadWritersTemporaries) {
  TempDir tmp;
  // A pid that is certainly gone: a child that has exited and been reaped.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  int status = 0;
  waitpid(dead, &status, 0);
  const std::string d = std::to_string(dead);
  const std::string stale = "a.cuvir.cuvil-tmp." + d + ".Ab3xYz";
  // Look like ours but are not, or must be spared (created in this order).
  const std::vector<std::string> kept = {
      "b.cuvir.cuvil-tmp.1.Ab3xYz",              // pid 1 is alive
      "c.cuvir.cuvil-tmp." + d + ".Ab3xY",       // five-letter suffix
      "d.cuvir.cuvil-tmp." + d + ".Ab3xYz.bak",  // something after the suffix
      "e.cuvir.cuvil-tmp." + d + ".Ab3-Yz",      // not a letter or digit
      "f.cuvir.cuvil-tmp.x" + d + ".Ab3xYz",     // pid not a number
      ".cuvil-tmp." + d + ".Ab3xYz",             // no target name
      "g.cuvir.tmp.Ab3xYz",                      // the old mkstemp pattern
      "h.cuvir.cuvil-tmp.0.Ab3xYz",              // pid 0 (the process group) never
      "locked.cuvir.cuvil-tmp." + d + ".Ab3xYz",  // a live writer's lock (other pid namespace)
      "linked.cuvir.cuvil-tmp." + d + ".Ab3xYz",  // two links: not a temporary of ours
      "link2",                                   // (made after the file it links)
      "dir.cuvir.cuvil-tmp." + d + ".Ab3xYz",     // a directory
      "target",
      "sym.cuvir.cuvil-tmp." + d + ".Ab3xYz",     // a symlink (to a file that must survive)
  };
  test::write_bytes(tmp.file(stale), "stale");
  for (const std::string& n : kept) {
    if (n.rfind("dir.", 0) == 0) ASSERT_EQ(mkdir(tmp.file(n).c_str(), 0755), 0);
    else if (n.rfind("sym.", 0) == 0) ASSERT_EQ(symlink("target", tmp.file(n).c_str()), 0);
    else if (n == "link2") ASSERT_EQ(link(tmp.file("linked.cuvir.cuvil-tmp." + d + ".Ab3xYz").c_str(), tmp.file(n).c_str()), 0);
    else test::write_bytes(tmp.file(n), n);
  }
  for (const std::string& n : kept) EXPECT_EQ(access(tmp.file(n).c_str(), F_OK), 0) << n;
  EXPECT_TRUE(hooks::is_temporary_name(stale));
  EXPECT_FALSE(hooks::is_temporary_name("c.cuvir.cuvil-tmp." + d + ".Ab3xY"));
  int lock_fd = open(tmp.file("locked.cuvir.cuvil-tmp." + d + ".Ab3xYz").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(lock_fd, 0);
  ASSERT_EQ(flock(lock_fd, LOCK_EX), 0);

  write_file_atomically(tmp.file("new.cuvir"), "new");
  std::set<std::string> expected(kept.begin(), kept.end());
  expected.insert("new.cuvir");
  EXPECT_EQ(list_dir(tmp.path()), expected) << "only '" << stale << "' should have gone";
  EXPECT_EQ(test::read_bytes(tmp.file("target")), "target");
  // Once the lock is released, the next write removes that one too.
  close(lock_fd);
  write_file_atomically(tmp.file("new.cuvir"), "newer");
  expected.erase("locked.cuvir.cuvil-tmp." + d + ".Ab3xYz");
  EXPECT_EQ(list_dir(tmp.path()), expected);
}

TEST(OutputFileTarget, RefusesToReplaceAnythingButAFileOrASymlink) {
  TempDir tmp;
  const std::string fifo = tmp.file("fifo"), dir = tmp.file("dir");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  for (const std::string& path : {fifo, dir, dir + "/"}) {
    try {
      write_file_atomically(path, "data");
      ADD_FAILURE() << "replaced " << path;
    } catch (const Diagnostic& d) {
      EXPECT_EQ(d.code(), ExitCode::kIo);
      EXPECT_NE(std::string(d.what()).find(path), std::string::npos) << d.what();
    }
  }
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(list_dir(tmp.path()), (std::set<std::string>{"dir", "fifo"}));
  EXPECT_EQ(list_dir(dir), std::set<std::string>{});
  // A symlink is replaced by the new file; what it pointed to is not touched.
  test::write_bytes(tmp.file("target"), "target");
  ASSERT_EQ(symlink("target", tmp.file("link").c_str()), 0);
  write_file_atomically(tmp.file("link"), "new");
  ASSERT_EQ(lstat(tmp.file("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(test::read_bytes(tmp.file("link")), "new");
  EXPECT_EQ(test::read_bytes(tmp.file("target")), "target");
}

}  // namespace
}  // namespace cuvil
