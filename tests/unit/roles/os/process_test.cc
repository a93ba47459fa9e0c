#include "roles/os/process.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "tests/fakes/process_runner.h"

namespace onehpc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

bool HavePerl() { return ::access("/usr/bin/perl", X_OK) == 0; }

Command Cmd(std::vector<std::string> argv) {
  Command c;
  c.argv = std::move(argv);
  c.timeout = Duration(10000);
  return c;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) lines.push_back(line);
  return lines;
}

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/process_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  RealProcessRunner runner_;
  std::string dir_;
};

TEST_F(ProcessTest, TrueAndFalse) {
  auto t = runner_.Run(Cmd({"/bin/true"}));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->exit_code, 0);
  EXPECT_TRUE(t->ok());
  auto f = runner_.Run(Cmd({"false"}));
  ASSERT_TRUE(f) << f.error().message;  // a non-zero exit is a result, not an error
  EXPECT_EQ(f->exit_code, 1);
  EXPECT_EQ(f->term_signal, 0);
  EXPECT_FALSE(f->timed_out);
  EXPECT_FALSE(f->ok());
}

TEST_F(ProcessTest, CapturesStdoutAndStderrSeparately) {
  auto r = runner_.Run(Cmd({"printf", "%s|%s\n", "a b", "c'd"}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "a b|c'd\n");
  EXPECT_EQ(r->err, "");
  auto e = runner_.Run(Cmd({"ls", "/nonexistent-onehpc-dir"}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->out, "");
  EXPECT_THAT(e->err, HasSubstr("No such file or directory"));
  EXPECT_NE(e->exit_code, 0);
}

TEST_F(ProcessTest, StdinIsWrittenAndClosed) {
  Command c = Cmd({"cat"});
  c.stdin_data = "line one\nline two\n";
  auto r = runner_.Run(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, c.stdin_data);
  // Without stdin_data the program reads EOF at once (cat does not hang).
  auto empty = runner_.Run(Cmd({"cat"}));
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->out, "");
  EXPECT_TRUE(empty->ok());
}

TEST_F(ProcessTest, LargeStdinAndStdoutDoNotDeadlock) {
  std::string data(3 * 1024 * 1024, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i % 26);
  Command c = Cmd({"cat"});
  c.stdin_data = data;
  auto r = runner_.Run(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out.size(), data.size());
  EXPECT_TRUE(r->out == data);
  EXPECT_FALSE(r->out_truncated);
}

TEST_F(ProcessTest, LargeOutput) {
  auto r = runner_.Run(Cmd({"head", "-c", "2000000", "/dev/zero"}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out.size(), 2000000u);
  EXPECT_FALSE(r->out_truncated);
}

TEST_F(ProcessTest, OutputIsCappedAndTruncationNoted) {
  log::Capture capture;
  auto r = runner_.Run(Cmd({"head", "-c", "5000000", "/dev/zero"}));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ok());  // the program was drained, not blocked
  EXPECT_EQ(r->out.size(), ProcessResult::kMaxOutput);
  EXPECT_TRUE(r->out_truncated);
  EXPECT_FALSE(r->err_truncated);
  EXPECT_TRUE(capture.Contains("output truncated"));
}

TEST_F(ProcessTest, ProgramThatIgnoresStdinDoesNotBreakTheRunner) {
  Command c = Cmd({"true"});
  c.stdin_data = std::string(2 * 1024 * 1024, 'x');  // EPIPE, not SIGPIPE
  auto r = runner_.Run(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 0);
}

TEST_F(ProcessTest, TimeoutSendsSigterm) {
  Command c = Cmd({"sleep", "10"});
  c.timeout = Duration(200);
  auto start = std::chrono::steady_clock::now();
  auto r = runner_.Run(c);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->exit_code, -1);
  EXPECT_EQ(r->term_signal, SIGTERM);
  EXPECT_GE(elapsed, std::chrono::milliseconds(190));
  EXPECT_LT(elapsed, std::chrono::milliseconds(1500));
}

TEST_F(ProcessTest, TimeoutEscalatesToSigkill) {
  if (!HavePerl()) GTEST_SKIP() << "perl is not installed";
  Command c = Cmd({"perl", "-e", "$SIG{TERM} = 'IGNORE'; sleep 10"});
  // Long enough for perl to start and install its handler on a loaded machine (with 200 ms a
  // slow start took the SIGTERM before the handler existed).
  c.timeout = Duration(1500);
  c.kill_grace = Duration(300);
  auto start = std::chrono::steady_clock::now();
  auto r = runner_.Run(c);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->term_signal, SIGKILL);
  EXPECT_GE(elapsed, std::chrono::milliseconds(1790));
  EXPECT_LT(elapsed, std::chrono::milliseconds(4000));
}

TEST_F(ProcessTest, TimeoutKillsTheWholeProcessGroup) {
  if (!HavePerl()) GTEST_SKIP() << "perl is not installed";
  // The child forks a grandchild that keeps stdout open, prints its pid and sleeps.
  Command c = Cmd({"perl", "-e",
                   "$| = 1; my $p = fork(); if ($p == 0) { sleep 30; exit 0 } "
                   "print \"$p\\n\"; sleep 30"});
  c.timeout = Duration(200);
  auto r = runner_.Run(c);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->timed_out);
  ASSERT_FALSE(r->out.empty());
  int grandchild = std::stoi(r->out);
  ASSERT_GT(grandchild, 1);
  // Gone, or a zombie waiting for whoever reaps orphans here.
  std::string state;
  for (int i = 0; i < 100; ++i) {
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) {
      state = "gone";
      break;
    }
    state = line.substr(line.rfind(')') + 2, 1);
    if (state == "Z") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(state == "gone" || state == "Z") << "grandchild state " << state;
}

TEST_F(ProcessTest, KilledBySignalIsReported) {
  if (!HavePerl()) GTEST_SKIP() << "perl is not installed";
  auto r = runner_.Run(Cmd({"perl", "-e", "kill 'KILL', $$"}));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->exit_code, -1);
  EXPECT_EQ(r->term_signal, SIGKILL);
  auto checked = RunChecked(runner_, Cmd({"perl", "-e", "kill 'KILL', $$"}));
  ASSERT_FALSE(checked);
  EXPECT_THAT(checked.error().message, HasSubstr("killed by signal 9 (SIGKILL)"));
}

TEST_F(ProcessTest, ProgramNotFoundIsAnError) {
  auto r = runner_.Run(Cmd({"onehpc-no-such-program", "x"}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kProcess);
  EXPECT_EQ(r.error().message, "program not found: onehpc-no-such-program");
  auto p = runner_.Run(Cmd({"/nonexistent/onehpc-prog"}));
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message, "program not found: /nonexistent/onehpc-prog");
}

TEST_F(ProcessTest, NotExecutableIsAnError) {
  std::string file = dir_ + "/not-executable";
  std::ofstream(file) << "#!/bin/true\n";
  ::chmod(file.c_str(), 0644);
  auto r = runner_.Run(Cmd({file}));
  if (::geteuid() == 0 && r) GTEST_SKIP() << "root may execute anything here";
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kProcess);
  EXPECT_THAT(r.error().message, HasSubstr("cannot execute " + file));
}

TEST_F(ProcessTest, WorkingDirectory) {
  Command c = Cmd({"pwd"});
  c.cwd = dir_;
  auto r = runner_.Run(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, std::filesystem::canonical(dir_).string() + "\n");
  c.cwd = dir_ + "/missing";
  auto bad = runner_.Run(c);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, ErrorKind::kProcess);
  EXPECT_THAT(bad.error().message, HasSubstr("cannot change directory to " + dir_ + "/missing"));
}

// one-contextd runs the hook with the whole context in its environment: a child gets the
// system's variables only, never a password or the token.
TEST_F(ProcessTest, ChildrenInheritTheSystemsVariablesNeverTheContext) {
  ::setenv("ONEAPP_AUTH_LOCAL_USERS", "alice:s3cret", 1);
  ::setenv("ONEGATE_TOKEN", "tok", 1);
  ::setenv("ONEHPC_PROCESS_TEST_INHERITED", "yes", 1);
  ::setenv("LC_TIME", "C.UTF-8", 1);
  Command c = Cmd({"env"});
  c.env = {{"ONEHPC_PROCESS_TEST_ADDED", "a b=c"}};
  auto r = runner_.Run(c);
  ASSERT_TRUE(r);
  auto lines = Lines(r->out);
  EXPECT_THAT(lines, ::testing::Contains("ONEHPC_PROCESS_TEST_ADDED=a b=c"));
  EXPECT_THAT(lines, ::testing::Contains("LC_TIME=C.UTF-8"));
  EXPECT_THAT(lines, ::testing::Contains(::testing::StartsWith("PATH=/")));
  EXPECT_THAT(r->out, Not(HasSubstr("s3cret")));
  EXPECT_THAT(r->out, Not(HasSubstr("ONEGATE_TOKEN")));
  EXPECT_THAT(r->out, Not(HasSubstr("ONEHPC_PROCESS_TEST_INHERITED")));

  c.env = {{"LC_TIME", "replaced"}};
  r = runner_.Run(c);
  ASSERT_TRUE(r);
  lines = Lines(r->out);
  EXPECT_THAT(lines, ::testing::Contains("LC_TIME=replaced"));
  EXPECT_THAT(lines, Not(::testing::Contains("LC_TIME=C.UTF-8")));
  for (const char* name :
       {"ONEAPP_AUTH_LOCAL_USERS", "ONEGATE_TOKEN", "ONEHPC_PROCESS_TEST_INHERITED", "LC_TIME"}) {
    ::unsetenv(name);
  }
}

TEST_F(ProcessTest, PathIsSetWhenOursHasNone) {
  const char* saved = std::getenv("PATH");
  const std::string path = saved ? saved : "";
  ::unsetenv("PATH");
  Command c = Cmd({"/usr/bin/env"});
  auto r = runner_.Run(c);
  ::setenv("PATH", path.c_str(), 1);
  ASSERT_TRUE(r);
  EXPECT_THAT(Lines(r->out), ::testing::Contains(::testing::StartsWith("PATH=/usr/local/sbin:")));
}

TEST_F(ProcessTest, ClearEnvKeepsOnlyPathAndGivenVariables) {
  ::setenv("ONEHPC_PROCESS_TEST_INHERITED", "yes", 1);
  Command c = Cmd({"env"});
  c.clear_env = true;
  c.env = {{"LC_ALL", "C"}};
  auto r = runner_.Run(c);
  ::unsetenv("ONEHPC_PROCESS_TEST_INHERITED");
  ASSERT_TRUE(r);
  auto lines = Lines(r->out);
  ASSERT_EQ(lines.size(), 2u) << r->out;
  EXPECT_EQ(lines[0].rfind("PATH=/", 0), 0u);
  EXPECT_EQ(lines[1], "LC_ALL=C");
}

TEST_F(ProcessTest, InvalidEnvironmentNameIsRefused) {
  Command c = Cmd({"env"});
  c.env = {{"A=B", "x"}};
  auto r = runner_.Run(c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kInvalidInput);
}

TEST_F(ProcessTest, EmptyArgvIsRefused) {
  auto r = runner_.Run(Command{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kInvalidInput);
}

TEST_F(ProcessTest, OtherDescriptorsAreNotInherited) {
  int fd = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::dup2(fd, 100), 100);
  ::close(fd);
  auto r = runner_.Run(Cmd({"ls", "/proc/self/fd"}));
  ::close(100);
  ASSERT_TRUE(r);
  auto lines = Lines(r->out);
  // 0, 1, 2 and the directory ls itself opened.
  EXPECT_THAT(lines, Not(::testing::Contains("100")));
  EXPECT_LE(lines.size(), 4u) << r->out;
}

TEST_F(ProcessTest, ChildRunsInItsOwnProcessGroup) {
  auto r = runner_.Run(Cmd({"cat", "/proc/self/stat"}));
  ASSERT_TRUE(r);
  // Fields after "(comm) ": state ppid pgrp ...
  std::stringstream ss(r->out.substr(r->out.rfind(')') + 2));
  std::string state;
  long ppid = 0, pgrp = 0;
  ss >> state >> ppid >> pgrp;
  long pid = std::stol(r->out);
  EXPECT_EQ(pgrp, pid);
  EXPECT_NE(pgrp, ::getpgrp());
}

TEST_F(ProcessTest, DebugLineQuotesArgvAndRedactsSecrets) {
  log::Capture capture;
  Command c = Cmd({"printf", "%s", "token=SuperSecret42"});
  c.secrets = {"SuperSecret42"};
  auto r = runner_.Run(c);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "token=SuperSecret42");  // the output itself is not changed
  EXPECT_TRUE(capture.Contains("run: printf %s token=<redacted>")) << capture.text();
  EXPECT_FALSE(capture.Contains("SuperSecret42"));
}

TEST_F(ProcessTest, RunCheckedPassesSuccessThrough) {
  auto r = RunChecked(runner_, Cmd({"printf", "ok"}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "ok");
}

TEST_F(ProcessTest, RunCheckedErrorHasArgvExitCodeAndStderrTail) {
  std::vector<std::string> argv = {"ls"};
  for (int i = 1; i <= 50; ++i) argv.push_back("/onehpc-missing-" + std::to_string(i));
  auto r = RunChecked(runner_, Cmd(argv));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kProcess);
  const std::string& m = r.error().message;
  EXPECT_THAT(m, HasSubstr("ls /onehpc-missing-1 /onehpc-missing-2"));
  EXPECT_THAT(m, HasSubstr("exited with code 2"));
  EXPECT_THAT(m, HasSubstr("/onehpc-missing-50'"));
  EXPECT_THAT(m, HasSubstr("/onehpc-missing-31'"));
  EXPECT_THAT(m, Not(HasSubstr("/onehpc-missing-30'")));  // only the last 20 lines
}

TEST_F(ProcessTest, RunCheckedTimeoutAndRedaction) {
  Command c = Cmd({"env", "ONEHPC_TOKEN=Password123", "sleep", "10"});
  c.timeout = Duration(200);
  c.secrets = {"Password123"};
  auto r = RunChecked(runner_, c);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("timed out after 200 ms"));
  EXPECT_THAT(r.error().message, HasSubstr("<redacted>"));
  EXPECT_THAT(r.error().message, Not(HasSubstr("Password123")));

  Command e = Cmd({"ls", "/onehpc-GlobalSecret99"});
  log::AddSecret("GlobalSecret99");
  auto g = RunChecked(runner_, e);
  log::ClearSecrets();
  ASSERT_FALSE(g);
  EXPECT_THAT(g.error().message, Not(HasSubstr("GlobalSecret99")));
}

TEST_F(ProcessTest, RunCheckedPassesStartErrorsThrough) {
  auto r = RunChecked(runner_, Cmd({"onehpc-no-such-program"}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "program not found: onehpc-no-such-program");
}

TEST_F(ProcessTest, ConcurrentRunsDoNotMixOutput) {
  std::vector<std::thread> threads;
  std::vector<std::string> outs(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      RealProcessRunner runner;
      Command c = Cmd({"cat"});
      c.stdin_data = std::string(200000, static_cast<char>('a' + i));
      auto r = runner.Run(c);
      if (r) outs[i] = r->out;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(outs[i], std::string(200000, static_cast<char>('a' + i)));
  }
}

TEST(FakeProcessRunnerTest, RecordsCommandsAndAnswersFromRules) {
  fakes::FakeProcessRunner fake;
  fake.On({"systemctl", "is-active"}, ProcessResult{3, 0, false, "", "inactive"});
  fake.On({"systemctl", "is-active", "--quiet", "munge.service"},
          ProcessResult{0, 0, false, "", ""});
  fake.On({"echo"}, [](const Command& c) {
    ProcessResult r;
    r.exit_code = 0;
    r.out = c.argv.size() > 1 ? c.argv[1] : "";
    return r;
  });

  auto a = fake.Run(Cmd({"systemctl", "is-active", "--quiet", "slurmd.service"}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->exit_code, 3);
  auto b = fake.Run(Cmd({"systemctl", "is-active", "--quiet", "munge.service"}));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->exit_code, 0);
  auto c = fake.Run(Cmd({"echo", "hi there"}));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->out, "hi there");
  auto d = fake.Run(Cmd({"anything"}));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->exit_code, 0);

  ASSERT_EQ(fake.commands().size(), 4u);
  EXPECT_EQ(fake.commands()[2].argv[1], "hi there");
  EXPECT_EQ(fake.Argvs(), (std::vector<std::string>{
                              "systemctl is-active --quiet slurmd.service",
                              "systemctl is-active --quiet munge.service",
                              "echo 'hi there'",
                              "anything",
                          }));
}

TEST(FakeProcessRunnerTest, DefaultResultAndRunChecked) {
  fakes::FakeProcessRunner fake;
  ProcessResult failing;
  failing.exit_code = 5;
  failing.err = "boom\n";
  fake.SetDefault(failing);
  auto r = RunChecked(fake, Cmd({"mkfs.ext4", "-F", "/dev/vdb"}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "mkfs.ext4 -F /dev/vdb exited with code 5: boom");
  // A more specific rule added later wins over the default.
  fake.On({"mkfs.ext4"}, ProcessResult{});
  ProcessResult ok;
  ok.exit_code = 0;
  fake.On({"mkfs.ext4"}, ok);
  EXPECT_TRUE(RunChecked(fake, Cmd({"mkfs.ext4", "/dev/vdb"})));
}

}  // namespace
}  // namespace onehpc
